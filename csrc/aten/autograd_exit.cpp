#include "aten/autograd_exit.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/csrc/autograd/autograd.h>

#include <chrono>
#include <future>
#include <memory>
#include <thread>

namespace spyre {

bool drainAutogradDeviceThread(c10::DeviceIndex device, double timeout_seconds) {
  auto done = std::make_shared<std::promise<void>>();
  std::future<void> finished = done->get_future();
  // A fresh thread: its thread-local state (which the graph task copies and the
  // device thread drops) holds no Python object, unlike a Python caller's
  // (backward() stashes a contextvars.Context there). Detached: if the device
  // thread is stuck in a user's backward, the exit goes on without it.
  std::thread([device, done] {
    try {
      const auto options =
          at::TensorOptions().device(c10::Device(c10::DeviceType::PrivateUse1, device));
      // Zero elements: no kernel, no copy, no wait on queued work. The root's
      // gradient is on spyre, so ViewBackward0 and AccumulateGrad run on the
      // spyre device thread.
      at::Tensor leaf = at::empty({0}, options).requires_grad_(true);
      at::Tensor root = leaf.view({0});
      torch::autograd::backward({root}, {at::empty({0}, options)});
    } catch (...) {
      // Best effort at exit (a latched fault, a runtime shut down): never raise.
    }
    done->set_value();
  }).detach();
  return finished.wait_for(std::chrono::duration<double>(timeout_seconds)) ==
         std::future_status::ready;
}

}  // namespace spyre
