"""torch.spyre.Event: a torch.Event on the spyre device.

Events mark points in a stream's work: `record` captures what was launched so
far, `wait` makes another stream's later work wait for it (the host does not
wait), `synchronize` blocks the host (sleeping, never spinning), and
`elapsed_time` gives emulated device milliseconds between two timing events.
"""

import torch


class Event(torch.Event):
    def __new__(cls, enable_timing=False, blocking=False, interprocess=False):
        if interprocess:
            raise NotImplementedError(
                "torch.spyre.Event(interprocess=True) is not supported: "
                "Spyre events cannot be shared between processes"
            )
        return torch.Event.__new__(
            cls, device="spyre", enable_timing=enable_timing, blocking=blocking
        )
