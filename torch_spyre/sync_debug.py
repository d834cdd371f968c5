"""Sync debug mode, as `torch.cuda.set_sync_debug_mode`: make the host's implicit
waits for the device warn or raise (docs/sanitizer.md, "Sync debug mode").

Implicit waits are the ones a program does not ask for by name: `.item()`, a
blocking copy between spyre and cpu (`.cpu()`, `.tolist()`, `print(t)`, a
blocking `.to("spyre")`), ops that run at the call because their output depends
on the data (`nonzero`, `masked_select`, boolean indexing, `unique`). Explicit
waits (`torch.spyre.synchronize()`, `Stream.synchronize()`,
`Event.synchronize()`, `torch.accelerator.synchronize()`) and `non_blocking=True`
copies are never flagged. The mode is one setting for the whole process; it
does not start the runtime.
"""

from . import _C

_MODES = {"default": 0, "warn": 1, "error": 2}
_ACCEPTED = '"default", "warn", "error" or 0, 1, 2'


def set_sync_debug_mode(debug_mode: int | str) -> None:
    """"default" or 0: implicit waits are silent; "warn" or 1: each warns
    (UserWarning "called a synchronizing spyre operation: <operation>");
    "error" or 2: each raises RuntimeError with that message, before it waits
    or queues anything."""
    if isinstance(debug_mode, str):
        if debug_mode not in _MODES:
            raise ValueError(f"invalid sync debug mode {debug_mode!r}, expected one of {_ACCEPTED}")
        mode = _MODES[debug_mode]
    elif isinstance(debug_mode, int) and not isinstance(debug_mode, bool):
        if debug_mode not in _MODES.values():
            raise ValueError(f"invalid sync debug mode {debug_mode!r}, expected one of {_ACCEPTED}")
        mode = debug_mode
    else:
        raise TypeError(f"invalid sync debug mode {debug_mode!r} of type "
                        f"{type(debug_mode).__name__}, expected one of {_ACCEPTED}")
    _C._set_sync_debug_mode(mode)


def get_sync_debug_mode() -> int:
    """The current mode as torch.cuda returns it: 0 default, 1 warn, 2 error."""
    return _C._get_sync_debug_mode()
