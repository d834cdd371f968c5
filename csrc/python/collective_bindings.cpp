// gloo's collectives, issued with tensors Python never sees
// (torch_spyre/distributed/gloo_calls.py; docs/distributed.md, "Exit").
//
// A tensor that has a Python object holds a reference to that object while
// C++ holds it too, and drops it (taking the GIL) when C++ lets go. gloo lets
// go of a work's tensors on its own worker thread, after the work's future has
// completed: if that is late enough to fall after the script's end (a busy
// machine), the thread asks for the GIL during Py_FinalizeEx, CPython ends it
// with a forced unwind, and a noexcept frame turns that into std::terminate.
// Each binding here hands gloo aliases made in C++ (same storage, no Python
// object), so gloo's threads never touch Python.
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/utils/pybind.h>

#include "python/bindings.h"

namespace spyre::python {
namespace {

using Backend = c10::intrusive_ptr<c10d::Backend>;
using Work = c10::intrusive_ptr<c10d::Work>;
using Tensors = std::vector<at::Tensor>;
using TensorLists = std::vector<Tensors>;

at::Tensor hidden(const at::Tensor& tensor) {
  // A new TensorImpl over the same storage; gloo writes through it in place.
  return at::Tensor(tensor.unsafeGetTensorImpl()->shallow_copy_and_detach(
      tensor.unsafeGetTensorImpl()->version_counter(), /*allow_tensor_metadata_change=*/false));
}

Tensors hidden(const Tensors& tensors) {
  Tensors out;
  out.reserve(tensors.size());
  for (const auto& tensor : tensors) {
    out.push_back(hidden(tensor));
  }
  return out;
}

TensorLists hidden(const TensorLists& lists) {
  TensorLists out;
  out.reserve(lists.size());
  for (const auto& list : lists) {
    out.push_back(hidden(list));
  }
  return out;
}

// Options default as gloo's own Python methods do.
template <typename Options>
Options options(const py::object& opts) {
  return opts.is_none() ? Options() : opts.cast<Options>();
}

}  // namespace

void bindCollectives(py::module_& m) {
  // Enqueueing on gloo does not block, but it takes gloo's work mutex, which
  // its threads hold while they release works: never wait for it with the
  // GIL. The options cross as py::object (None: gloo's defaults) and are cast
  // before the GIL is released.
  m.def("_gloo_allreduce", [](const Backend& b, const Tensors& ts, const py::object& o) {
    auto opts = options<c10d::AllreduceOptions>(o);
    auto args = hidden(ts);
    py::gil_scoped_release nogil;
    return b->allreduce(args, opts);
  });
  m.def("_gloo_allreduce_coalesced", [](const Backend& b, const Tensors& ts, const py::object& o) {
    auto opts = options<c10d::AllreduceCoalescedOptions>(o);
    auto args = hidden(ts);
    py::gil_scoped_release nogil;
    return b->allreduce_coalesced(args, opts);
  });
  m.def("_gloo_broadcast", [](const Backend& b, const Tensors& ts, const py::object& o) {
    auto opts = options<c10d::BroadcastOptions>(o);
    auto args = hidden(ts);
    py::gil_scoped_release nogil;
    return b->broadcast(args, opts);
  });
  m.def("_gloo_reduce", [](const Backend& b, const Tensors& ts, const py::object& o) {
    auto opts = options<c10d::ReduceOptions>(o);
    auto args = hidden(ts);
    py::gil_scoped_release nogil;
    return b->reduce(args, opts);
  });
  m.def("_gloo_allgather",
        [](const Backend& b, const TensorLists& outs, const Tensors& ins, const py::object& o) {
          auto opts = options<c10d::AllgatherOptions>(o);
          auto out = hidden(outs);
          auto in = hidden(ins);
          py::gil_scoped_release nogil;
          return b->allgather(out, in, opts);
        });
  m.def("_gloo_allgather_coalesced",
        [](const Backend& b, const TensorLists& outs, const Tensors& ins, const py::object& o) {
          auto opts = options<c10d::AllgatherOptions>(o);
          auto out = hidden(outs);
          auto in = hidden(ins);
          py::gil_scoped_release nogil;
          return b->allgather_coalesced(out, in, opts);
        });
  m.def("_gloo_allgather_base",
        [](const Backend& b, const at::Tensor& out, const at::Tensor& in, const py::object& o) {
          auto opts = options<c10d::AllgatherOptions>(o);
          auto output = hidden(out);
          auto input = hidden(in);
          py::gil_scoped_release nogil;
          return b->_allgather_base(output, input, opts);
        });
  m.def("_gloo_gather",
        [](const Backend& b, const TensorLists& outs, const Tensors& ins, const py::object& o) {
          auto opts = options<c10d::GatherOptions>(o);
          auto out = hidden(outs);
          auto in = hidden(ins);
          py::gil_scoped_release nogil;
          return b->gather(out, in, opts);
        });
  m.def("_gloo_scatter",
        [](const Backend& b, const Tensors& outs, const TensorLists& ins, const py::object& o) {
          auto opts = options<c10d::ScatterOptions>(o);
          auto out = hidden(outs);
          auto in = hidden(ins);
          py::gil_scoped_release nogil;
          return b->scatter(out, in, opts);
        });
  m.def("_gloo_reduce_scatter",
        [](const Backend& b, const Tensors& outs, const TensorLists& ins, const py::object& o) {
          auto opts = options<c10d::ReduceScatterOptions>(o);
          auto out = hidden(outs);
          auto in = hidden(ins);
          py::gil_scoped_release nogil;
          return b->reduce_scatter(out, in, opts);
        });
  m.def("_gloo_reduce_scatter_base",
        [](const Backend& b, const at::Tensor& out, const at::Tensor& in, const py::object& o) {
          auto opts = options<c10d::ReduceScatterOptions>(o);
          auto output = hidden(out);
          auto input = hidden(in);
          py::gil_scoped_release nogil;
          return b->_reduce_scatter_base(output, input, opts);
        });
  m.def("_gloo_alltoall_base",
        [](const Backend& b, const at::Tensor& out, const at::Tensor& in,
           std::vector<int64_t> out_splits, std::vector<int64_t> in_splits, const py::object& o) {
          auto opts = options<c10d::AllToAllOptions>(o);
          auto output = hidden(out);
          auto input = hidden(in);
          py::gil_scoped_release nogil;
          return b->alltoall_base(output, input, out_splits, in_splits, opts);
        });
  m.def("_gloo_alltoall",
        [](const Backend& b, const Tensors& outs, const Tensors& ins, const py::object& o) {
          auto opts = options<c10d::AllToAllOptions>(o);
          auto out = hidden(outs);
          auto in = hidden(ins);
          py::gil_scoped_release nogil;
          return b->alltoall(out, in, opts);
        });
  m.def("_gloo_send", [](const Backend& b, const Tensors& ts, int dst, int tag) {
    auto args = hidden(ts);
    py::gil_scoped_release nogil;
    return b->send(args, dst, tag);
  });
  m.def("_gloo_recv", [](const Backend& b, const Tensors& ts, int src, int tag) {
    auto args = hidden(ts);
    py::gil_scoped_release nogil;
    return b->recv(args, src, tag);
  });
  m.def("_gloo_recv_anysource", [](const Backend& b, const Tensors& ts, int tag) {
    auto args = hidden(ts);
    py::gil_scoped_release nogil;
    return b->recvAnysource(args, tag);
  });
}

}  // namespace spyre::python
