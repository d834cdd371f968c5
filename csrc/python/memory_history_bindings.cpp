// Memory history and snapshots of the device allocator (python/bindings.h),
// as torch.cuda's: the stack gatherers the allocator calls while history
// records, and the snapshot as the dict torch.cuda.memory._snapshot() returns.
#include <string>
#include <vector>

#include <pybind11/stl.h>
#include <torch/csrc/profiler/combined_traceback.h>

#include "device/allocator.h"
#include "python/bindings.h"

namespace spyre::python {
namespace {

// Only a thread that has run Python has stacks worth gathering, and only there
// may the GIL be taken: the runtime's engine threads never get a Python thread
// state, so they gather nothing (and never wait for the GIL). Nor does any
// thread once the interpreter finalizes (taking the GIL then may end the thread).
bool onPythonThread() {
#if PY_VERSION_HEX >= 0x030D0000
  const bool finalizing = Py_IsFinalizing();
#else
  const bool finalizing = _Py_IsFinalizing();
#endif
  return Py_IsInitialized() && !finalizing && PyGILState_GetThisThreadState() != nullptr;
}

std::shared_ptr<c10::GatheredContext> gatherPython() {
  if (!onPythonThread()) return nullptr;
  return torch::CapturedTraceback::gather(/*python=*/true, /*script=*/true, /*cpp=*/false);
}

std::shared_ptr<c10::GatheredContext> gatherPythonAndCpp() {
  if (!onPythonThread()) return nullptr;
  return torch::CapturedTraceback::gather(/*python=*/true, /*script=*/true, /*cpp=*/true);
}

const char* actionName(HistoryAction action) {
  switch (action) {
    case HistoryAction::ALLOC: return "alloc";
    case HistoryAction::FREE_REQUESTED: return "free_requested";
    case HistoryAction::FREE_COMPLETED: return "free_completed";
    case HistoryAction::SEGMENT_ALLOC: return "segment_alloc";
    case HistoryAction::SEGMENT_FREE: return "segment_free";
    case HistoryAction::SEGMENT_MAP: return "segment_map";
    case HistoryAction::SEGMENT_UNMAP: return "segment_unmap";
    case HistoryAction::SNAPSHOT: return "snapshot";
    case HistoryAction::OOM: return "oom";
  }
  return "unknown";
}

py::tuple poolTuple(const PoolId& pool) {
  return py::make_tuple(pool.first, pool.second);
}

// torch_spyre's wrappers of torch functions (torch.empty, Tensor.to, ...: the
// modules of the package torch_spyre/_patches/) are left out of stacks: those
// functions are builtins, which have no Python frame, and CUDA's stacks start at
// their caller.
bool isTorchFunctionWrapper(const std::string& filename) {
  static const std::string kPatches = "torch_spyre/_patches";
  const size_t slash = filename.rfind('/');
  return slash != std::string::npos && slash >= kPatches.size() &&
         filename.compare(slash - kPatches.size(), kPatches.size(), kPatches) == 0;
}

// Frames for every dict that has a context, symbolized in one batch (frames
// shared between stacks become shared dicts, as in CUDA's snapshots).
class FrameSlots {
 public:
  void add(py::dict dict, const Context& context) {
    if (context == nullptr) {
      dict["frames"] = py::list();
      return;
    }
    tracebacks_.push_back(torch::getCapturedTracebackFromContext(context));
    dicts_.push_back(std::move(dict));
  }
  void fill() {
    const torch::SymbolizedTracebacks symbolized = torch::symbolize(tracebacks_);
    std::vector<py::dict> all_frames;
    all_frames.reserve(symbolized.all_frames.size());
    for (const auto& frame : symbolized.all_frames) {
      py::dict f;
      f["filename"] = frame.filename;
      f["line"] = frame.lineno;
      f["name"] = frame.funcname;
      all_frames.push_back(std::move(f));
    }
    for (size_t i = 0; i < dicts_.size(); ++i) {
      const std::vector<uint64_t>& traceback = symbolized.tracebacks.at(i);
      // C++ stacks start inside the gathering (unwind, CapturedTraceback::gather,
      // MemoryHistory::gather...): they begin at the allocator's caller.
      size_t first = 0;
      for (size_t j = 0; j < traceback.size(); ++j) {
        if (symbolized.all_frames[traceback[j]].funcname.find("spyre::MemoryHistory::gather") !=
            std::string::npos) {
          first = j + 1;
        }
      }
      py::list frames;
      for (size_t j = first; j < traceback.size(); ++j) {
        if (isTorchFunctionWrapper(symbolized.all_frames[traceback[j]].filename)) continue;
        frames.append(all_frames.at(traceback[j]));
      }
      dicts_[i]["frames"] = frames;
    }
  }

 private:
  std::vector<torch::CapturedTraceback*> tracebacks_;
  std::vector<py::dict> dicts_;
};

py::dict snapshotDict() {
  MemorySnapshot snapshot;
  {
    py::gil_scoped_release no_gil;  // the allocator's lock is taken by threads without the GIL
    snapshot = memorySnapshot();
  }
  FrameSlots frames;
  py::list segments;
  for (const SnapshotSegment& info : snapshot.segments) {
    py::dict segment;
    segment["device"] = info.device;
    segment["address"] = info.address;
    segment["total_size"] = info.total_size;
    segment["allocated_size"] = info.allocated_size;
    segment["active_size"] = info.active_size;
    segment["requested_size"] = info.requested_size;
    segment["stream"] = info.stream;
    segment["segment_type"] = info.is_large ? "large" : "small";
    segment["segment_pool_id"] = poolTuple(info.pool);
    segment["is_expandable"] = false;
    frames.add(segment, info.context);
    py::list blocks;
    uintptr_t address = info.address;
    for (const SnapshotBlock& block_info : info.blocks) {
      py::dict block;
      block["address"] = address;
      block["size"] = block_info.size;
      block["requested_size"] = block_info.requested_size;
      block["state"] = block_info.allocated ? "active_allocated"
                       : block_info.active  ? "active_pending_free"
                                            : "inactive";
      frames.add(block, block_info.context);
      blocks.append(block);
      address += block_info.size;
    }
    segment["blocks"] = blocks;
    segments.append(segment);
  }
  py::list trace;
  for (const HistoryEntry& entry : snapshot.trace) {
    py::dict item;
    item["action"] = actionName(entry.action);
    item[entry.action == HistoryAction::OOM ? "device_free" : "addr"] = entry.addr;
    item["size"] = entry.size;
    item["stream"] = entry.stream;
    item["pool_id"] = poolTuple(entry.pool);
    item["time_us"] = entry.time_us;
    item["device"] = entry.device;  // torch_spyre.memory files the entry under its device
    frames.add(item, entry.context);
    trace.append(item);
  }
  frames.fill();
  py::dict result;
  result["segments"] = segments;
  result["trace"] = trace;
  return result;
}

}  // namespace

void bindMemoryHistory(py::module_& m) {
  // Arguments checked by torch_spyre.memory._record_memory_history.
  m.def("_memory_record_history", [](bool enabled, int context, bool cpp_frames,
                                      size_t max_entries, bool clear_history,
                                      const std::vector<std::string>& skip_actions) {
    HistorySettings settings;
    settings.enabled = enabled;
    settings.when = static_cast<RecordContext>(context);
    settings.gather = cpp_frames ? &gatherPythonAndCpp : &gatherPython;
    settings.max_entries = max_entries;
    settings.clear = clear_history;
    for (const std::string& action : skip_actions) {
      settings.skip.push_back(c10::CachingDeviceAllocator::parseTraceEntryAction(action));
    }
    py::gil_scoped_release no_gil;
    recordMemoryHistory(settings);
  });
  // {"segments": [...], "trace": [...]}: CUDA's segment dicts, and the trace
  // entries with their device (torch_spyre.memory._snapshot files them).
  m.def("_memory_snapshot", &snapshotDict);
}

}  // namespace spyre::python
