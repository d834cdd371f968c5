// The default generators (python/bindings.h).
#include <torch/csrc/Generator.h>

#include "device/generator.h"
#include "python/bindings.h"

namespace spyre::python {

void bindGenerators(py::module_& m) {
  // No argument (or -1): the current device's generator, as upstream.
  m.def(
      "_get_default_generator",
      [](int64_t device) {
        return py::reinterpret_steal<py::object>(
            THPGenerator_initDefaultGenerator(defaultGenerator(deviceArg(device))));
      },
      py::arg("device") = -1);
}

}  // namespace spyre::python
