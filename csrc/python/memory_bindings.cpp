// The pinned host allocator's statistics (python/bindings.h).
#include <ATen/core/CachingHostAllocator.h>

#include "python/bindings.h"

namespace spyre::python {
namespace {

py::dict statDict(const c10::CachingAllocator::Stat& stat) {
  py::dict result;
  result["current"] = stat.current;
  result["peak"] = stat.peak;
  result["allocated"] = stat.allocated;
  result["freed"] = stat.freed;
  return result;
}

py::dict durationDict(const c10::CachingAllocator::DurationStat& stat) {
  py::dict result;
  result["total"] = stat.total;
  result["max"] = stat.max;
  result["min"] = stat.min;
  result["count"] = stat.count;
  result["avg"] = stat.count == 0 ? 0 : stat.total / stat.count;
  return result;
}

}  // namespace

// The pinned host allocator's statistics, with torch.cuda.host_memory_stats' keys.
void bindHostMemory(py::module_& m) {
  m.def("_host_memory_stats", [] {
    const at::HostStats stats = at::getHostAllocator(c10::DeviceType::PrivateUse1)->get_stats();
    py::dict result;
    result["allocations"] = statDict(stats.allocations);
    result["allocated_bytes"] = statDict(stats.allocated_bytes);
    result["active_requests"] = statDict(stats.active_requests);
    result["active_bytes"] = statDict(stats.active_bytes);
    result["num_host_alloc"] = stats.num_host_alloc;
    result["num_host_free"] = stats.num_host_free;
    result["host_alloc_time"] = durationDict(stats.host_alloc_time);
    result["host_free_time"] = durationDict(stats.host_free_time);
    return result;
  });
  m.def("_host_reset_accumulated_stats", [] {
    at::getHostAllocator(c10::DeviceType::PrivateUse1)->reset_accumulated_stats();
  });
  m.def("_host_reset_peak_stats",
        [] { at::getHostAllocator(c10::DeviceType::PrivateUse1)->reset_peak_stats(); });
}

}  // namespace spyre::python
