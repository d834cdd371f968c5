// The default generators (python/bindings.h).
#include <array>

#include <torch/csrc/Generator.h>

#include "device/generator.h"
#include "python/bindings.h"

namespace spyre::python {

void bindGenerators(py::module_& m) {
  // No argument (or -1): the current device's generator, as upstream.
  // One Python object per device, as torch.cuda.default_generators: the same
  // object on every call (kept for the process, like the generators).
  m.def(
      "_get_default_generator",
      [](int64_t device) {
        static std::array<PyObject*, kMaxDevices> objects{};
        const at::Generator& generator = defaultGenerator(deviceArg(device));
        PyObject*& object = objects[static_cast<size_t>(generator.device().index())];
        if (object == nullptr) object = THPGenerator_initDefaultGenerator(generator);
        if (object == nullptr) throw py::error_already_set();
        return py::reinterpret_borrow<py::object>(object);
      },
      py::arg("device") = -1);
}

}  // namespace spyre::python
