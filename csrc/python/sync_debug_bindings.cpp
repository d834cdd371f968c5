// Sync debug mode (runtime/sync_debug.h); torch_spyre/sync_debug.py checks
// and converts the mode names.
#include "python/bindings.h"
#include "runtime/sync_debug.h"

namespace spyre::python {

void bindSyncDebug(py::module_& m) {
  m.def("_set_sync_debug_mode", [](int mode) { setSyncDebugMode(mode); });
  m.def("_get_sync_debug_mode", [] { return getSyncDebugMode(); });
}

}  // namespace spyre::python
