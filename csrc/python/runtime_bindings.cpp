// The runtime, the device's properties and its error state (python/bindings.h).
#include <string>
#include <unordered_map>

#include <flex/card.hpp>

#include "aten/autograd_exit.h"
#include "launch/plan.h"
#include "launch/queued_op.h"
#include "launch/replay_kernel.h"
#include "device/allocator.h"
#include "device/card_rules.h"
#include "python/bindings.h"
#include "runtime/error.h"
#include "runtime/host_wait.h"
#include "runtime/runtime.h"
#include "runtime/stream.h"

namespace spyre::python {

void bindCardTiming(py::module_& m);  // below

void bindRuntime(py::module_& m) {
  m.attr("_device_type") = static_cast<int>(c10::DeviceType::PrivateUse1);
  m.def("start_runtime", &startRuntime, "Start the Spyre runtime (once per process).");
  m.def("free_runtime", &freeRuntime,
        "Drop the runtime context; restarting in the same process is not supported.");
  m.def("_is_initialized", [] { return isRuntimeStarted(); });
  m.def("_is_in_bad_fork", &isInBadFork);
  m.def("device_count", [] { return static_cast<int>(deviceCount()); });
  m.def("current_device", [] { return static_cast<int>(currentDevice()); });
  m.def("set_device", [](int64_t index) { setCurrentDevice(deviceArg(index)); });
  // Limits and ids defined once, in C++; torch_spyre reads them from here.
  m.attr("_max_devices") = static_cast<int>(kMaxDevices);
  m.def("_bound_device", [] { return static_cast<int>(boundDevice()); });
  // Raises the one message for an index that names no device, for a Python int of any
  // size: below -1 (ValueError) or past the visible devices (RuntimeError).
  m.def("_check_device_index", [](const py::int_& index) {
    int overflow = 0;
    const long long value = PyLong_AsLongLongAndOverflow(index.ptr(), &overflow);
    if (overflow < 0 || (overflow == 0 && value < -1)) {
      throw py::value_error(negativeDeviceIndexMessage(py::str(index).cast<std::string>()));
    }
    if (overflow != 0) throwInvalidDeviceIndex(py::str(index).cast<std::string>());
    if (value >= 0) checkVisibleDevice(value);
  });
  m.def("_threads_in_host_waits", &threadsInHostWaits,
        "Threads blocked in (or entering) a wait on device work.");
  m.def(
      "_drain_autograd_device_thread",
      [](int64_t device, double timeout) {
        return drainAutogradDeviceThread(deviceArg(device), timeout);
      },
      py::call_guard<py::gil_scoped_release>());
  bindCardTiming(m);
}

// The card time model (flex/card.hpp; torch_spyre/timing.py shapes the results).
void bindCardTiming(py::module_& m) {
  m.def("_card_timing", [] { return flex::card::enabled(); });
  m.def("_card_profile", [] {
    const flex::card::Profile p = flex::card::profile();
    py::dict d;
    d["cores"] = p.cores;
    d["matmul_mac_per_ns_per_core"] = p.matmul_mac_per_ns_per_core;
    d["memory_gb_per_s"] = p.memory_gb_per_s;
    d["rw_turnaround_ns_per_byte"] = p.rw_turnaround_ns_per_byte;
    d["broadcast_gb_per_s"] = p.broadcast_gb_per_s;
    d["reduction_floor_gb_per_s"] = p.reduction_floor_gb_per_s;
    d["reduction_boost_gb_per_s"] = p.reduction_boost_gb_per_s;
    d["reduction_rows_scale"] = p.reduction_rows_scale;
    d["bmm_mac_per_ns_per_core"] = p.bmm_mac_per_ns_per_core;
    d["bmm_min_batch"] = p.bmm_min_batch;
    d["bmm_min_cores"] = p.bmm_min_cores;
    d["projection_mac_per_ns_per_core"] = p.projection_mac_per_ns_per_core;
    d["projection_wide_mac_per_ns_per_core"] = p.projection_wide_mac_per_ns_per_core;
    d["projection_batch_knee"] = p.projection_batch_knee;
    d["pt_full_rows"] = p.pt_full_rows;
    d["pt_exponent"] = p.pt_exponent;
    d["spill_area"] = p.spill_area;
    d["spill_slope"] = p.spill_slope;
    d["spill_cap"] = p.spill_cap;
    d["split_area"] = p.split_area;
    d["split_long_us_per_elem"] = p.split_long_us_per_elem;
    d["split_short_us_per_elem"] = p.split_short_us_per_elem;
    d["split_long_knee"] = p.split_long_knee;
    d["split_short_knee"] = p.split_short_knee;
    d["cat0"] = py::make_tuple(p.cat0_a, p.cat0_b, p.cat0_d, p.cat0_floor);
    d["cat1"] = py::make_tuple(p.cat1_a, p.cat1_b, p.cat1_d, p.cat1_floor);
    d["transpose_outer"] = py::make_tuple(p.transpose_outer_a, p.transpose_outer_b,
                                          p.transpose_outer_d, p.transpose_outer_floor);
    d["transpose_outer_m"] = py::make_tuple(p.transpose_outer_m_ref, p.transpose_outer_m_penalty,
                                            p.transpose_outer_m_floor);
    d["restickify_gb_per_s"] = p.restickify_gb_per_s;
    d["reduce_outer_gb_per_s"] = p.reduce_outer_gb_per_s;
    d["host_link_gb_per_s"] = p.host_link_gb_per_s;
    d["collective_link_gb_per_s"] = p.collective_link_gb_per_s;
    d["host_prep_us"] = p.host_prep_us;
    return d;
  });
  m.def("_card_summary", [] {
    ensureDevice(currentDevice());
    const flex::card::Summary s = flex::card::summary();
    py::dict d;
    d["start_ns"] = s.start_ns;
    d["end_ns"] = s.end_ns;
    d["compute_ns"] = s.compute_ns;
    d["copy_ns"] = s.copy_ns;
    d["collective_ns"] = s.collective_ns;
    d["other_ns"] = s.other_ns;
    d["busy_ns"] = s.busy_ns;
    d["union_ns"] = s.union_ns;
    // Kernel time by class, in WorkCost::Class order (torch_spyre/_timing.py names them).
    py::list classes;
    for (int64_t ns : s.class_ns) classes.append(ns);
    d["class_ns"] = classes;
    // Streams by the pool's ids (the ids users see), not the runtime's.
    std::unordered_map<uint64_t, c10::StreamId> pool_ids;
    for (const auto& [pool_id, runtime_id] : mappedRuntimeStreamIds()) {
      pool_ids.emplace(runtime_id, pool_id);
    }
    py::dict streams;
    for (const flex::card::StreamBusy& busy : s.streams) {
      const auto found = pool_ids.find(busy.stream_id);
      const int64_t id = found != pool_ids.end() ? found->second
                                                 : static_cast<int64_t>(busy.stream_id);
      streams[py::int_(id)] = busy.busy_ns;
    }
    d["streams"] = streams;
    return d;
  });
  m.def("_card_collective",
        [](c10::StreamId id, int64_t device, const std::string& name, uint64_t link_bytes) {
          flex::card::launchCollective(SpyreStream(fromKey(id, device)).resolveRuntimeHandle(),
                                       name, link_bytes);
        });
  m.def("_card_reset", [] {
    ensureDevice(currentDevice());
    flex::card::reset();
  });
}

// Plain ints cross the boundary; torch_spyre/errors.py wraps them in IntEnums.
void bindErrors(py::module_& m) {
  m.def("_get_device_state", [] { return static_cast<int>(SpyreGetDeviceState()); });
  m.def("_stream_get_error", [](c10::StreamId id, int64_t device) {
    return static_cast<int>(SpyreStreamGetError(fromKey(id, device)));
  });
  m.def("_stream_get_error_string", [](int error) {
    return std::string(SpyreStreamGetErrorString(static_cast<SpyreStreamError>(error)));
  });
}

// The bound device's properties (starts the runtime, as CUDA's does).
void bindDeviceProperties(py::module_& m) {
  m.def("_device_properties", [](int64_t device) {
    ensureDevice(deviceArg(device));
    const flex::DeviceProperties properties = runtimeContext()->properties();
    py::dict result;
    result["name"] = properties.name;
    result["card_index"] = properties.card_index;
    result["total_memory"] = properties.total_memory;
    result["engines"] = properties.engines;
    result["dma_engines"] = properties.dma_engines;
    return result;
  });  // The card's rules (device/card_rules.h) and upstream's downcast warning.
  m.def("_plan_counts", [] {
    const launch::PlanCounts counts = launch::planCounts();
    py::dict out;
    out["meta_runs"] = counts.meta_runs;
    out["from_template"] = counts.from_template;
    return out;
  }, "How the calling thread's launch plans were made (tests).");
  m.def("_retired_work", &launch::retiredWorkCount,
        "Works that ran on an engine and wait for the host to free them (tests).");
  m.def("_replay_kernels_resolved", &launch::replayKernelsResolved,
        "Graph nodes whose kernel was resolved at capture (launch/replay_kernel.h; tests).");
  m.def("_block_objects_made", &blockObjectsMade,
        "Block objects the caching allocator has allocated (tests).");
  m.def("_card_rules", &cardRules);
  m.def("_get_downcast_warning", &downcastWarning);
  m.def("_set_downcast_warning", &setDowncastWarning);
}

}  // namespace spyre::python
