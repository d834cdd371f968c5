// The peer access windows spyreccl's direct collectives run in
// (docs/distributed.md, "Streams: direct or staged"). gloo plays the card's
// collective transport: it reads and writes device memory through the
// executors' view (peerAccessView), and only while a window queued on the
// group's communication stream is open, so the collective's accesses are a
// runtime operation in that stream's order.
#include <memory>
#include <string>

#include <ATen/core/Tensor.h>
#include <torch/csrc/utils/pybind.h>

#include "launch/tensor_ref.h"
#include "python/bindings.h"
#include "runtime/host_wait.h"

namespace spyre::python {
namespace {

class PeerWindow {
 public:
  at::Tensor view(const at::Tensor& tensor) const { return peerAccessView(tensor); }

  // A stream that cannot take the window (it failed, or the runtime shut
  // down) does not raise here: the window never opens, and the progress
  // thread reports why through the cross-rank comparison, so every rank
  // fails the collective instead of one raising and the others waiting.
  void enqueue(c10::StreamId id, int64_t device, const std::string& name) {
    const SpyreStream stream = fromKey(id, device);
    try {
      stream.launchPeerAccessWindow(*window_, name);
      stream_ = stream.resolveRuntimeHandle();
    } catch (const flex::Error& e) {
      dropped_ = e.what();
    }
  }

  bool waitOpen() const {
    if (!dropped_.empty()) return false;
    bool open = false;
    waitForDevice([&] { open = window_->waitOpen(); });
    return open;
  }

  // Why the window never opened ("" while it may still open).
  std::string why() const {
    if (!dropped_.empty()) return dropped_;
    if (stream_ == nullptr) return "the window was never queued";
    const std::string message = stream_->errorMessage();
    return message.empty() ? "the runtime shut down" : message;
  }

  bool isOpen() const { return window_->isOpen(); }
  void close() { window_->close(); }

  // Close once the stream `id` has run what is queued on it now (a collective's
  // copies back), so a synchronize() that waits for this window waits for
  // them too. A stream that cannot take it (failed) runs nothing more: close now.
  void closeWhenReached(c10::StreamId id, int64_t device, const std::string& name) {
    try {
      fromKey(id, device).launchPeerAccessClose(*window_, name);
    } catch (const flex::Error&) {
      window_->close();
    }
  }

 private:
  std::unique_ptr<flex::PeerAccessWindow> window_ = std::make_unique<flex::PeerAccessWindow>();
  flex::RuntimeStream* stream_ = nullptr;  // owned by the runtime until exit
  std::string dropped_;
};

}  // namespace

void bindPeerAccessWindows(py::module_& m) {
  py::class_<PeerWindow>(m, "_PeerAccessWindow",
                         "A collective's access to device memory as an operation of a stream")
      .def(py::init<>())
      .def("view", &PeerWindow::view,
           "A CPU tensor gloo uses in place of a spyre tensor, inside the window only")
      .def("enqueue", &PeerWindow::enqueue, py::arg("stream_id"), py::arg("device_index"),
           py::arg("name"))
      .def("wait_open", &PeerWindow::waitOpen,
           "Block (without the GIL) until the stream reaches the window; False: it never opens")
      .def("why", &PeerWindow::why)
      .def("is_open", &PeerWindow::isOpen)
      .def("close", &PeerWindow::close, "Let the stream go on (idempotent)")
      .def("close_when_reached", &PeerWindow::closeWhenReached, py::arg("stream_id"),
           py::arg("device_index"), py::arg("name"),
           "Let the stream go on once another stream has run what is queued on it now");
}

}  // namespace spyre::python
