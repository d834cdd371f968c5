// The binding groups of torch_spyre._C, one file each (csrc/python/*.cpp),
// and the argument conversions they share. module.cpp calls them once, from
// PYBIND11_MODULE. Streams cross the boundary as (stream_id, device_index)
// pairs; torch_spyre wraps them in torch.Stream subclasses.
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include <pybind11/pybind11.h>

#include "runtime/stream.h"

namespace spyre::python {

namespace py = pybind11;

// ---- arguments (device_arguments.cpp)
using StreamKey = std::pair<c10::StreamId, int>;
StreamKey key(const SpyreStream& stream);
// Every device index from Python is checked before it narrows to
// c10::DeviceIndex (an int8_t: 256 would wrap to spyre:0).
c10::DeviceIndex deviceArg(int64_t index);
// The ValueError text for an index below -1 (-1 is the current device, as on CUDA).
std::string negativeDeviceIndexMessage(const std::string& index);
// A device argument as upstream's bindings take it: None (the current
// device), an int, a str or a torch.device, of type spyre.
c10::DeviceIndex deviceFromPython(const py::handle& device);
SpyreStream fromKey(c10::StreamId id, int64_t device_index);
// torch.Stream's constructor, wrapped once so that a spyre index is checked;
// left alone if it is not torch's own: then returns why (a warning's text).
std::string checkTorchStreamIndices();

// ---- host waits (host_waits_without_gil.cpp): release the GIL, park threads at exit.
void installHostWaitHooks();

// ---- device memory faults (device_fault_stack.cpp): the Python stack in the report.
void installDeviceFaultStack();

// ---- binding groups
void bindRuntime(py::module_& m);           // runtime_bindings.cpp
void bindErrors(py::module_& m);            // runtime_bindings.cpp
void bindDeviceProperties(py::module_& m);  // runtime_bindings.cpp
void bindStreams(py::module_& m);           // stream_bindings.cpp (host-compute streams too)
void bindEvents(py::module_& m);            // event_bindings.cpp
void bindGenerators(py::module_& m);        // generator_bindings.cpp
void bindHostMemory(py::module_& m);        // memory_bindings.cpp
void bindMemoryHistory(py::module_& m);     // memory_history_bindings.cpp
void bindCompiledKernels(py::module_& m);   // compiled_kernel_bindings.cpp
void bindCollectives(py::module_& m);      // collective_bindings.cpp (gloo, no Python objects)
void bindPeerAccessWindows(py::module_& m);  // peer_window_bindings.cpp
void bindSanitizer(py::module_& m);        // sanitizer_bindings.cpp
void bindSyncDebug(py::module_& m);        // sync_debug_bindings.cpp
void bindGraphs(py::module_& m);           // graph_bindings.cpp
void bindNumerics(py::module_& m);         // numerics_bindings.cpp (DLFloat16)

}  // namespace spyre::python
