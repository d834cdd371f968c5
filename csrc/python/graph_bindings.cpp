// Graphs (graphs/graph.h): torch.accelerator.Graph needs no binding of its own
// (torch finds spyre's through at::GraphImplRegistry); torch_spyre/graphs.py
// adds torch.cuda's helpers.
#include "graphs/graph.h"
#include "python/bindings.h"

namespace spyre::python {

void bindGraphs(py::module_& m) {
  m.def("_graph_pool_handle", [] {
    const c10::MempoolId_t id = newGraphPoolId();
    return py::make_tuple(id.first, id.second);
  });
}

}  // namespace spyre::python
