"""torch_spyre.profiler: upstream torch-spyre's profiling package.

Device profiling itself is torch.profiler's (ProfilerActivity.PrivateUse1,
docs/profiling.md); this package adds upstream's diagnostic reports (FFDC, first
failure data capture: see _ffdc).
"""

from ._ffdc import get_diagnostic_report

__all__ = ["get_diagnostic_report"]
