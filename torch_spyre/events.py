"""torch.spyre.Event: a torch.Event on the spyre device.

Events mark points in a stream's work: `record` captures what was launched so
far, `wait` makes another stream's later work wait for it (the host does not
wait), `synchronize` blocks the host (sleeping, never spinning), and
`elapsed_time` gives emulated device milliseconds between two timing events.
"""

import torch

from . import _C


class Event(torch.Event):
    """A torch.Event on spyre, with torch.cuda.Event's signature.

    `blocking` is accepted for compatibility: every host wait sleeps.
    """

    def __new__(cls, enable_timing=False, blocking=False, interprocess=False):
        if interprocess:
            raise NotImplementedError(
                "torch.spyre.Event(interprocess=True) is not supported: "
                "Spyre events cannot be shared between processes"
            )
        return torch.Event.__new__(
            cls, device="spyre", enable_timing=enable_timing, blocking=blocking
        )

    def elapsed_time(self, end_event) -> float:
        """Milliseconds of emulated device time from this event's record to `end_event`'s.

        torch.Event.elapsed_time only accepts an exact torch.Event argument;
        this accepts torch.spyre.Event too, with torch's checks and errors.
        """
        return _C._event_elapsed_time(self, end_event)
