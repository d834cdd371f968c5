// Launch entry points: validate the parameters, copy them into an Op, queue it.
// Every check happens here, on the caller's thread, so a bad launch throws at
// the call that made it rather than failing later on an engine.
#include <algorithm>
#include <string>

#include "context_impl.hpp"
#include "fill_format.hpp"
#include "format.hpp"
#include "stream_impl.hpp"
#include "trace.hpp"

namespace flex {

using detail::DevPiece;
using detail::DevSpan;
using detail::Op;
using detail::OpKind;

namespace {

template <class Params>
const Params& required(const Params* params, const char* what) {
  if (!params) throw Error(std::string("flex: ") + what + ": params is null");
  return *params;
}

// The pieces of device memory behind [offset, offset + size) of `address`, each
// checked to lie inside one live allocation, as the executors' addresses.
DevSpan deviceSpan(const detail::Memory& memory, const char* what,
                   const CompositeAddress& address, size_t offset, size_t size) {
  const size_t total = address.total_size();
  if (offset > total || size > total - offset) {
    throw Error(std::string("flex: ") + what + ": offset " + std::to_string(offset) + " + size " +
                std::to_string(size) + " exceeds the device address's " + std::to_string(total) +
                " bytes");
  }
  DevSpan span;
  for (const Chunk& chunk : address.chunks) {
    if (size == 0) break;
    if (offset >= chunk.size) {
      offset -= chunk.size;
      continue;
    }
    const size_t length = std::min(chunk.size - offset, size);
    if (!chunk.device_ptr) {
      throw Error(std::string("flex: ") + what + ": a chunk of " + std::to_string(chunk.size) +
                  " bytes has a null device pointer");
    }
    const DevPiece piece{static_cast<char*>(chunk.device_ptr) + offset, length};
    if (!memory.isInsideOneAllocation(piece.ptr, piece.size)) {
      throw Error(std::string("flex: ") + what + ": device range of " + std::to_string(length) +
                  " bytes at offset " + std::to_string(offset) + " of chunk " +
                  detail::hexPointer(chunk.device_ptr) + " is not inside one live allocation");
    }
    // Executors (DMA, fill, graph replay) copy through the read-write view.
    const DevPiece executor{static_cast<char*>(executorAddress(piece.ptr)), length};
    if (span.first.size == 0) {
      span.first = executor;
    } else {
      span.rest.push_back(executor);
    }
    offset = 0;
    size -= length;
  }
  return span;
}

void launchDma(RuntimeStream::Impl& stream, const DmaParams& params, bool to_device) {
  const char* what = to_device ? "launchOperationH2D" : "launchOperationD2H";
  if (params.to_device != to_device) {
    throw Error(std::string("flex: ") + what + ": DmaParams.to_device is " +
                (params.to_device ? "true" : "false") + ", expected " +
                (to_device ? "true" : "false"));
  }
  if (!params.host_ptr) {
    throw Error(std::string("flex: ") + what + ": host pointer is null (size " +
                std::to_string(params.size) + " bytes)");
  }
  Op op;
  op.kind = to_device ? OpKind::H2D : OpKind::D2H;
  op.bytes = params.size;
  op.host = params.host_ptr;
  op.dev = deviceSpan(stream.context->memory, what, params.dev, params.dev_offset, params.size);
  op.fn = params.callback;
  stream.enqueue(std::move(op));
}

Op d2dOp(const detail::Memory& memory, const D2DParams& p, const std::string& what) {
  Op op;
  op.kind = OpKind::D2D;
  op.bytes = p.size;
  op.dev = deviceSpan(memory, (what + " (dst)").c_str(), p.dst, p.dst_offset, p.size);
  op.dev_src = deviceSpan(memory, (what + " (src)").c_str(), p.src, p.src_offset, p.size);
  return op;
}

Op fillOp(const detail::Memory& memory, const CompositeAddress& address, double value,
          DataFormats format, const char* what) {
  Op op;
  op.kind = OpKind::Fill;
  op.fill = detail::fillElement(value, format);
  op.bytes = address.total_size();
  if (op.bytes % op.fill.width != 0) {
    throw Error(std::string("flex: ") + what + ": " + std::to_string(op.bytes) +
                " bytes is not a whole number of " + std::to_string(op.fill.width) +
                "-byte elements");
  }
  op.dev = deviceSpan(memory, what, address, 0, op.bytes);
  return op;
}

// Callables run on an engine; an empty one would only fail there.
void requireFunction(const std::function<void()>& fn, const char* what, const std::string& name) {
  if (!fn) throw Error(std::string("flex: ") + what + ": '" + name + "' has no function");
}

}  // namespace

void RuntimeStream::launchOperationH2D(const DmaParams* params) {
  launchDma(*impl_, required(params, "launchOperationH2D"), true);
}

void RuntimeStream::launchOperationD2H(const DmaParams* params) {
  launchDma(*impl_, required(params, "launchOperationD2H"), false);
}

void RuntimeStream::launchOperationD2D(const D2DParams* params) {
  impl_->enqueue(d2dOp(impl_->context->memory, required(params, "launchOperationD2D"),
                       "launchOperationD2D"));
}

void RuntimeStream::launchOperationCompute(const ComputeParams* params) {
  const ComputeParams& p = required(params, "launchOperationCompute");
  requireFunction(p.fn, "launchOperationCompute", p.name);
  Op op;
  op.kind = OpKind::Compute;
  op.bytes = p.bytes;
  op.cost = p.cost;
  op.fn = p.fn;
  op.on_discard = p.on_discard;
  op.discard_arg = p.discard_arg;
  if (detail::trace::enabled()) op.name = p.name;  // names can be long: copy only when used
  impl_->enqueue(std::move(op));
}

void RuntimeStream::launchOperationCompute(ComputeParams&& params) {
  requireFunction(params.fn, "launchOperationCompute", params.name);
  Op op;
  op.kind = OpKind::Compute;
  op.bytes = params.bytes;
  op.cost = params.cost;
  op.fn = std::move(params.fn);
  op.on_discard = params.on_discard;
  op.discard_arg = params.discard_arg;
  if (detail::trace::enabled()) op.name = std::move(params.name);
  impl_->enqueue(std::move(op));
}

void RuntimeStream::launchOperationHostCallback(const HostCallbackParams* params) {
  const HostCallbackParams& p = required(params, "launchOperationHostCallback");
  requireFunction(p.fn, "launchOperationHostCallback", p.name);
  Op op;
  op.kind = OpKind::HostCallback;
  op.fn = p.fn;
  if (detail::trace::enabled()) op.name = p.name;
  impl_->enqueue(std::move(op));
}

void RuntimeStream::fillAsync(const CompositeAddress* dev, double value, DataFormats format,
                              bool /*use_dmai: the stub has one fill path*/) {
  impl_->enqueue(fillOp(impl_->context->memory, required(dev, "fillAsync"), value, format,
                        "fillAsync"));
}

void RuntimeStream::launchOperationDelay(std::chrono::nanoseconds duration) {
  if (duration.count() < 0) {
    throw Error("flex: launchOperationDelay: duration " + std::to_string(duration.count()) +
                " ns is negative");
  }
  Op op;
  op.kind = OpKind::Delay;
  op.delay = duration;
  impl_->enqueue(std::move(op));
}

void RuntimeStream::launchGraph(const RuntimeGraph& graph) {
  Op op;
  op.kind = OpKind::Graph;
  op.graph = graph.nodes();
  for (const Op& node : op.graph->ops) op.bytes += node.bytes;
  if (detail::trace::enabled()) op.name = "graph";
  impl_->enqueue(std::move(op));
}

// ---------------------------------------------------------------- graphs
namespace {

const detail::Memory& contextMemory(const char* what) {
  RuntimeContext* context = RuntimeContext::get();
  if (context == nullptr) {
    throw Error(std::string("flex: ") + what + ": no runtime context (create one first)");
  }
  return context->impl()->memory;
}

}  // namespace

RuntimeGraph::RuntimeGraph() : nodes_(std::make_shared<Nodes>()) {}
RuntimeGraph::~RuntimeGraph() = default;
RuntimeGraph::RuntimeGraph(const RuntimeGraph&) = default;
RuntimeGraph& RuntimeGraph::operator=(const RuntimeGraph&) = default;

const std::shared_ptr<const RuntimeGraph::Nodes>& RuntimeGraph::nodes() const { return nodes_; }

size_t RuntimeGraph::nodeCount() const { return nodes_->ops.size(); }

namespace {
// Launches share the nodes they run: an add after a launch appends to a copy.
void append(std::shared_ptr<const RuntimeGraph::Nodes>& nodes, Op&& op) {
  auto appended = std::make_shared<RuntimeGraph::Nodes>();
  if (nodes.use_count() == 1) {
    appended->ops = std::move(const_cast<RuntimeGraph::Nodes&>(*nodes).ops);
  } else {
    appended->ops = nodes->ops;
  }
  appended->ops.push_back(std::move(op));
  nodes = std::move(appended);
}
}  // namespace

void RuntimeGraph::addD2D(const D2DParams* params) {
  const char* what = "RuntimeGraph::addD2D";
  append(nodes_, d2dOp(contextMemory(what), required(params, what), what));
}

void RuntimeGraph::addCompute(const ComputeParams* params) {
  const char* what = "RuntimeGraph::addCompute";
  const ComputeParams& p = required(params, what);
  requireFunction(p.fn, what, p.name);
  Op op;
  op.kind = OpKind::Compute;
  op.bytes = p.bytes;
  op.cost = p.cost;
  op.fn = p.fn;
  op.name = p.name;  // kept: a graph is recorded once
  append(nodes_, std::move(op));
}

void RuntimeGraph::addFill(const CompositeAddress* dev, double value, DataFormats format) {
  const char* what = "RuntimeGraph::addFill";
  append(nodes_, fillOp(contextMemory(what), required(dev, what), value, format, what));
}

}  // namespace flex
