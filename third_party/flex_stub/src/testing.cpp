// Test facilities: gates, per-stream fault injection, programmatic tracing.
#include "flex/testing.hpp"

#include "clock.hpp"
#include "context_impl.hpp"
#include "device_arena.hpp"
#include "stream_impl.hpp"
#include "trace.hpp"

namespace flex::test {

// A gate is a completion state that only the host completes.
struct Gate::State : detail::Completion {};

Gate::Gate() : state_(std::make_shared<State>()) {}

Gate::~Gate() { release(); }

void Gate::enqueueOn(RuntimeStream* stream) {
  if (!stream) throw Error("flex: Gate::enqueueOn: stream is null");
  detail::Op op;
  op.kind = detail::OpKind::Gate;
  op.sync = state_;
  stream->impl()->enqueue(std::move(op));
}

void Gate::release() { state_->complete(detail::nowNs()); }

int Gate::blockedStreams() const { return static_cast<int>(state_->parkedStreams()); }

void injectFault(RuntimeStream* stream, const std::string& message) {
  if (!stream) throw Error("flex: injectFault: stream is null");
  RuntimeStream::Impl& impl = *stream->impl();
  std::lock_guard<std::mutex> lock(impl.mutex);
  impl.injected_fault = message;
  impl.fault_pending = true;
}

void lockDeviceMemoryRegistry() {
  if (detail::DeviceArena* arena = detail::DeviceArena::ifReserved()) arena->lockForTest();
}

void unlockDeviceMemoryRegistry() {
  if (detail::DeviceArena* arena = detail::DeviceArena::ifReserved()) arena->unlockForTest();
}

void exhaustDeviceMemoryBacking() {
  if (detail::DeviceArena* arena = detail::DeviceArena::ifReserved()) arena->exhaustBackingForTest();
}

void startTrace() {
  const RuntimeContext* context = RuntimeContext::get();
  detail::CardClock* clock = context ? context->impl()->card_clock.get() : nullptr;
  detail::trace::start(clock ? clock->hostNs() : detail::nowNs());
}

size_t stopTrace(const std::string& path) {
  const RuntimeContext* context = RuntimeContext::get();
  return detail::trace::stopAndWrite(path, context ? context->cardIndex() : 0);
}

uint64_t cardCompactions() {
  const RuntimeContext* context = RuntimeContext::get();
  detail::CardClock* clock = context ? context->impl()->card_clock.get() : nullptr;
  return clock ? clock->compactions() : 0;
}

}  // namespace flex::test
