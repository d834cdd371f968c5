"""transformers' Trainer stops at its start when transformers and accelerate chose different
devices, one of them spyre (docs/support.md, transformers' `Trainer`).

transformers' TrainingArguments choose their device from a fixed list of backends that lacks
spyre, falling back to ACCELERATE_TORCH_DEVICE, else cpu; the batches go there. accelerate
(1.16 on) picks spyre through `torch.accelerator`, or ACCELERATE_TORCH_DEVICE, which it lets win
over `use_cpu=True`; the model goes there. Neither offers an extension point for a new device
type, and torch_spyre cannot set the variable itself (that would break `use_cpu=True`), so a
disagreement would otherwise fail in the first forward with `Expected all tensors to be on the
same device`. The check below turns it into an error naming what to set, raised where
transformers sets up its devices (at `Trainer(...)` or `args.device`, before any training).
It changes no choice: agreeing devices, and distributed runs, pass through untouched.
"""

import functools
import os

from . import _patches

_SETUP = "_setup_devices"


def check_devices(args, device):
    """Raise when transformers' `device` and accelerate's differ and one of them is spyre."""
    state = getattr(args, "distributed_state", None)
    chosen = getattr(state, "device", None)
    if chosen is None or chosen.type == device.type or "spyre" not in (chosen.type, device.type):
        return
    env = os.environ.get("ACCELERATE_TORCH_DEVICE")
    if args.use_cpu:
        raise RuntimeError(
            f"TrainingArguments(use_cpu=True) put the batches on {device} but accelerate puts the "
            f"model on {chosen}: ACCELERATE_TORCH_DEVICE={env!r} overrides use_cpu in accelerate; "
            "unset ACCELERATE_TORCH_DEVICE to train on cpu")
    raise RuntimeError(
        f"transformers' TrainingArguments chose device {device} for the batches (its device list "
        f"lacks spyre) but accelerate chose {chosen} for the model; set "
        "ACCELERATE_TORCH_DEVICE=spyre to train on spyre, or TrainingArguments(use_cpu=True) to "
        "train on cpu")


def _guard(module):
    cls = module.TrainingArguments
    setup = cls.__dict__.get(_SETUP)
    # Only the form this was written for (transformers 4.57 to 5.20): another is left alone.
    if not isinstance(setup, functools.cached_property) or getattr(setup.func, "_spyre_checked", False):
        return

    @functools.wraps(setup.func)
    def checked(self):
        device = setup.func(self)
        check_devices(self, device)
        return device

    checked._spyre_checked = True
    guarded = functools.cached_property(checked)
    guarded.__set_name__(cls, _SETUP)
    setattr(cls, _SETUP, guarded)


def install():
    """Guard TrainingArguments' device setup once transformers.training_args loads."""
    _patches.when_imported("transformers.training_args", _guard)
