"""torch_spyre.profiler: upstream torch-spyre's profiling package.

Device profiling itself is torch.profiler's (ProfilerActivity.PrivateUse1,
docs/profiling.md); this package adds upstream's diagnostic reports (FFDC, first
failure data capture: see _ffdc) and `is_available()`.
"""

from ._ffdc import get_diagnostic_report


def is_available() -> bool:
    """True: torch.profiler records spyre's device activities (ProfilerActivity.PrivateUse1)."""
    import torch

    return torch.profiler.ProfilerActivity.PrivateUse1 in torch.profiler.supported_activities()


__all__ = ["get_diagnostic_report", "is_available"]
