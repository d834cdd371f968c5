// The stream sanitizer's switch (torch_spyre/sanitizer.py; sanitizer/tracker.h).
#include "python/bindings.h"
#include "sanitizer/tracker.h"

namespace spyre::python {

void bindSanitizer(py::module_& m) {
  // 0: off, 1: raise, 2: warn. Turning it off forgets every access.
  m.def("_sanitizer_set_mode", [](int mode) {
    TORCH_CHECK(mode >= 0 && mode <= 2, "sanitizer mode must be 0, 1 or 2, got ", mode);
    sanitizer::setMode(static_cast<sanitizer::Mode>(mode));
  });
  m.def("_sanitizer_mode", [] { return static_cast<int>(sanitizer::mode()); });
}

}  // namespace spyre::python
