// Recurrent layers on spyre: nn.RNN, nn.GRU and nn.LSTM (padded or packed
// sequences), nn.GRUCell and nn.LSTMCell.
//
// ATen's composite kernels for these ops (aten/src/ATen/native/RNN.cpp) give a
// CPU tensor unfused cells (addmm, sigmoid_, tanh_, ...) and project a whole
// sequence's inputs in one matmul, but send the cells of every other device
// to fused kernels (_thnn_fused_lstm_cell, _thnn_fused_gru_cell) that only
// CUDA has. Spyre computes with CPU's kernels, so it takes CPU's path: the
// kernels below call the same ATen ops in the same order as ATen does for a
// CPU tensor. Every op is queued on the current stream by the launch path,
// autograd records the graph it records on CPU, and results equal CPU's bit
// for bit, forward and backward. One exception: while oneDNN is enabled
// (torch.backends.mkldnn), CPU runs a float32 nn.LSTM without projections (on
// some CPUs also bfloat16, or float16 without autograd) with oneDNN's
// whole-layer kernel, mkldnn_rnn_layer. Its training workspace has a size only
// oneDNN knows (libtorch does not export oneDNN's API to ask it), so its
// outputs cannot be allocated before the kernel is queued: spyre's LSTM equals
// CPU's with oneDNN disabled (docs/tensors.md, "Recurrent layers").
//
// Registered for PrivateUse1 and AutogradPrivateUse1, as a composite kernel:
// autograd sees the ops these functions call.
#include <algorithm>
#include <cstdint>
#include <optional>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <ATen/TensorOperators.h>
#include <ATen/core/Tensor.h>
#include <ATen/native/RNN.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/dropout.h>
#include <ATen/ops/linear.h>
#include <ATen/ops/matmul.h>
#include <ATen/ops/relu.h>
#include <ATen/ops/stack.h>
#include <ATen/ops/tanh.h>
#include <torch/library.h>

namespace spyre {
namespace {

using at::Tensor;
using at::TensorList;
using LstmState = std::tuple<Tensor, Tensor>;  // (h, c)

// One layer and direction's parameters, grouped as ATen groups them
// (w_ih, w_hh[, b_ih, b_hh][, w_hr]). Undefined biases are left out of the
// linear layers; w_hr is defined for LSTMs with projections only.
struct LayerWeights {
  Tensor w_ih, w_hh, b_ih, b_hh, w_hr;

  Tensor inputGates(const Tensor& x) const { return at::linear(x, w_ih, b_ih); }
  Tensor hiddenGates(const Tensor& h) const { return at::linear(h, w_hh, b_hh); }
  Tensor projected(const Tensor& h) const { return w_hr.defined() ? at::matmul(h, w_hr.t()) : h; }
};

std::vector<LayerWeights> groupWeights(TensorList params, bool has_biases, bool has_projections) {
  const size_t group = (has_biases ? 4 : 2) + (has_projections ? 1 : 0);
  TORCH_CHECK(params.size() % group == 0, "got an incorrect number of RNN parameters");
  std::vector<LayerWeights> result;
  for (size_t i = 0; i < params.size(); i += group) {
    LayerWeights w{params[i], params[i + 1], {}, {}, {}};
    if (has_biases) {
      w.b_ih = params[i + 2];
      w.b_hh = params[i + 3];
    }
    if (has_projections) w.w_hr = params[i + group - 1];
    result.push_back(std::move(w));
  }
  return result;
}

// Cells: one step of the recurrence. `gates_done` says the input already went
// through the input linear layer (a layer projects a whole sequence at once).

template <typename Nonlinearity>
struct SimpleCell {
  using Hidden = Tensor;
  Tensor operator()(const Tensor& x, const Tensor& h, const LayerWeights& w,
                    bool gates_done) const {
    Tensor gates = w.hiddenGates(h);
    gates.add_(gates_done ? x : w.inputGates(x));
    return Nonlinearity{}(gates);
  }
};

struct Tanh {
  Tensor operator()(const Tensor& t) const { return at::tanh(t); }
};
struct Relu {
  Tensor operator()(const Tensor& t) const { return at::relu(t); }
};

struct LstmCell {
  using Hidden = LstmState;
  LstmState operator()(const Tensor& x, const LstmState& state, const LayerWeights& w,
                       bool gates_done) const {
    const auto& [hx, cx] = state;
    Tensor gates = w.hiddenGates(hx);
    gates.add_(gates_done ? x : w.inputGates(x));
    const std::vector<Tensor> chunks = gates.unsafe_chunk(4, 1);
    const Tensor input_gate = chunks[0].sigmoid_();
    const Tensor forget_gate = chunks[1].sigmoid_();
    const Tensor cell_gate = chunks[2].tanh_();
    const Tensor output_gate = chunks[3].sigmoid_();
    Tensor cy = forget_gate * cx;
    cy.add_(input_gate * cell_gate);
    Tensor hy = output_gate * cy.tanh();
    return {w.projected(hy), cy};
  }
};

struct GruCell {
  using Hidden = Tensor;
  Tensor operator()(const Tensor& x, const Tensor& h, const LayerWeights& w,
                    bool gates_done) const {
    const std::vector<Tensor> input_gates =
        gates_done ? x.unsafe_chunk(3, 1) : w.inputGates(x).unsafe_chunk(3, 1);
    std::vector<Tensor> hidden_gates = w.hiddenGates(h).unsafe_chunk(3, 1);
    const Tensor reset_gate = hidden_gates[0].add_(input_gates[0]).sigmoid_();
    const Tensor update_gate = hidden_gates[1].add_(input_gates[1]).sigmoid_();
    const Tensor& scaled = hidden_gates[2].mul_(reset_gate);
    const Tensor new_gate = input_gates[2].add(scaled).tanh_();
    Tensor hy = h - new_gate;
    return hy.mul_(update_gate).add_(new_gate);
  }
};

// Hidden states: one tensor, or an LSTM's (h, c).
const Tensor& outputOf(const Tensor& h) { return h; }
const Tensor& outputOf(const LstmState& s) { return std::get<0>(s); }

// An LSTM state's c before its h, in the order CPU's build (GCC evaluates
// std::make_tuple's arguments last to first) records them for autograd.
Tensor rows(const Tensor& h, int64_t start, int64_t end) { return h.narrow(0, start, end - start); }
LstmState rows(const LstmState& s, int64_t start, int64_t end) {
  Tensor c = rows(std::get<1>(s), start, end);
  Tensor h = rows(std::get<0>(s), start, end);
  return {std::move(h), std::move(c)};
}

Tensor concatRows(const std::vector<Tensor>& hs) { return at::cat(hs, 0); }
LstmState concatRows(const std::vector<LstmState>& states) {
  std::vector<Tensor> hs, cs;
  for (const LstmState& s : states) {
    hs.push_back(std::get<0>(s));
    cs.push_back(std::get<1>(s));
  }
  Tensor c = at::cat(cs, 0);
  Tensor h = at::cat(hs, 0);
  return {std::move(h), std::move(c)};
}

template <typename Hidden>
struct Steps {
  std::vector<Tensor> outputs;
  Hidden last;
};

template <typename Cell>
Steps<typename Cell::Hidden> runSteps(const std::vector<Tensor>& inputs,
                                      typename Cell::Hidden hidden, const LayerWeights& w) {
  Steps<typename Cell::Hidden> steps;
  for (const Tensor& x : inputs) {
    hidden = Cell{}(x, hidden, w, /*gates_done=*/true);
    steps.outputs.push_back(outputOf(hidden));
  }
  steps.last = std::move(hidden);
  return steps;
}

// Layers: a cell run over a sequence. Padded sequences are (time, batch,
// features) tensors; packed ones a PackedSequence's data and batch sizes.

struct Packed {
  Tensor data;
  Tensor batch_sizes;  // int64 on the CPU, as a PackedSequence keeps it
};

template <typename Hidden>
using LayerResult = std::pair<Tensor, Hidden>;

template <typename Cell>
struct FullLayer {
  using Hidden = typename Cell::Hidden;
  using Weights = LayerWeights;
  LayerResult<Hidden> operator()(const Tensor& input, const Hidden& hidden,
                                 const LayerWeights& w) const {
    const Tensor gates = w.inputGates(input);
    Steps<Hidden> steps = runSteps<Cell>(gates.unbind(0), hidden, w);
    TORCH_CHECK(!steps.outputs.empty(), "Expected sequence length to be larger than 0 in RNN");
    return {at::stack(steps.outputs, 0), std::move(steps.last)};
  }
};

template <typename Cell>
struct FullBidirectionalLayer {
  using Hidden = std::pair<typename Cell::Hidden, typename Cell::Hidden>;
  using Weights = std::pair<LayerWeights, LayerWeights>;
  LayerResult<Hidden> operator()(const Tensor& input, const Hidden& hidden,
                                 const Weights& w) const {
    const Tensor forward_gates = w.first.inputGates(input);
    auto forward = runSteps<Cell>(forward_gates.unbind(0), hidden.first, w.first);
    TORCH_CHECK(!forward.outputs.empty(), "Expected sequence length to be larger than 0 in RNN");
    const Tensor forward_output = at::stack(forward.outputs, 0);
    const Tensor backward_gates = w.second.inputGates(input);
    std::vector<Tensor> backward_inputs = backward_gates.unbind(0);
    std::reverse(backward_inputs.begin(), backward_inputs.end());
    auto backward = runSteps<Cell>(backward_inputs, hidden.second, w.second);
    std::reverse(backward.outputs.begin(), backward.outputs.end());
    const Tensor backward_output = at::stack(backward.outputs, 0);
    return {at::cat({forward_output, backward_output}, forward_output.dim() - 1),
            {std::move(forward.last), std::move(backward.last)}};
  }
};

std::vector<int64_t> batchSizesOf(const Packed& input) {
  const Tensor& sizes = input.batch_sizes;
  TORCH_CHECK(sizes.is_cpu() && sizes.scalar_type() == at::kLong && sizes.dim() == 1,
              "batch_sizes must be a 1-D int64 CPU tensor (a PackedSequence keeps it on the CPU), "
              "got a ", sizes.dim(), "-D ", sizes.scalar_type(), " tensor on ", sizes.device());
  TORCH_CHECK(sizes.size(0) > 0, "Expected sequence length to be larger than 0 in RNN");
  const Tensor dense = sizes.contiguous();
  const int64_t* first = dense.data_ptr<int64_t>();
  return std::vector<int64_t>(first, first + dense.size(0));
}

// Packed steps from the first: the batch shrinks as sequences end, and the
// rows of the hidden state of those that ended are its final value.
template <typename Cell>
struct PackedLayer {
  using Hidden = typename Cell::Hidden;
  LayerResult<Hidden> operator()(const Packed& input, const Hidden& initial,
                                 const LayerWeights& w) const {
    const std::vector<int64_t> batch_sizes = batchSizesOf(input);
    const auto num_steps = static_cast<int64_t>(batch_sizes.size());
    const Tensor gates = w.inputGates(input.data);
    std::vector<Tensor> outputs;
    std::vector<Hidden> finished;
    int64_t offset = 0;
    int64_t last_batch_size = batch_sizes[0];
    Hidden hidden = initial;
    for (int64_t i = 0; i < num_steps; ++i) {
      const int64_t batch_size = batch_sizes[i];
      const Tensor x = gates.narrow(0, offset, batch_size);
      offset += batch_size;
      if (batch_size < last_batch_size) {
        finished.push_back(rows(hidden, batch_size, last_batch_size));
        hidden = rows(hidden, 0, batch_size);
      }
      last_batch_size = batch_size;
      hidden = Cell{}(x, hidden, w, /*gates_done=*/true);
      outputs.push_back(outputOf(hidden));
    }
    finished.push_back(hidden);
    std::reverse(finished.begin(), finished.end());
    return {at::cat(outputs, 0), concatRows(finished)};
  }
};

// Packed steps from the last: the batch grows, taking the initial hidden
// state's rows of the sequences that start.
template <typename Cell>
struct ReversedPackedLayer {
  using Hidden = typename Cell::Hidden;
  LayerResult<Hidden> operator()(const Packed& input, const Hidden& initial,
                                 const LayerWeights& w) const {
    const std::vector<int64_t> batch_sizes = batchSizesOf(input);
    const auto num_steps = static_cast<int64_t>(batch_sizes.size());
    const Tensor gates = w.inputGates(input.data);
    std::vector<Tensor> outputs;
    int64_t offset = input.data.size(0);
    int64_t last_batch_size = batch_sizes[num_steps - 1];
    Hidden hidden = rows(initial, 0, last_batch_size);
    for (int64_t i = num_steps - 1; i >= 0; --i) {
      const int64_t batch_size = batch_sizes[i];
      if (batch_size > last_batch_size) {
        hidden = concatRows(std::vector<Hidden>{hidden, rows(initial, last_batch_size, batch_size)});
      }
      const Tensor x = gates.narrow(0, offset - batch_size, batch_size);
      offset -= batch_size;
      last_batch_size = batch_size;
      hidden = Cell{}(x, hidden, w, /*gates_done=*/true);
      outputs.push_back(outputOf(hidden));
    }
    std::reverse(outputs.begin(), outputs.end());
    return {at::cat(outputs, 0), std::move(hidden)};
  }
};

template <typename Cell>
struct PackedBidirectionalLayer {
  using Hidden = std::pair<typename Cell::Hidden, typename Cell::Hidden>;
  using Weights = std::pair<LayerWeights, LayerWeights>;
  LayerResult<Hidden> operator()(const Packed& input, const Hidden& hidden,
                                 const Weights& w) const {
    auto forward = PackedLayer<Cell>{}(input, hidden.first, w.first);
    auto backward = ReversedPackedLayer<Cell>{}(input, hidden.second, w.second);
    return {at::cat({forward.first, backward.first}, -1),
            {std::move(forward.second), std::move(backward.second)}};
  }
};

template <typename T>
std::vector<std::pair<T, T>> pairUp(const std::vector<T>& values) {
  TORCH_CHECK(values.size() % 2 == 0,
              "Odd number of params or hiddens given to a bidirectional RNN");
  std::vector<std::pair<T, T>> result;
  for (size_t i = 0; i < values.size(); i += 2) result.emplace_back(values[i], values[i + 1]);
  return result;
}

template <typename T>
std::vector<T> unpair(const std::vector<std::pair<T, T>>& pairs) {
  std::vector<T> result;
  for (const auto& [first, second] : pairs) {
    result.push_back(first);
    result.push_back(second);
  }
  return result;
}

Tensor dropoutOf(const Tensor& input, double p) { return at::dropout(input, p, /*train=*/true); }
Tensor dropoutOf(const Packed& input, double p) { return dropoutOf(input.data, p); }
const Tensor& dataOf(const Tensor& output) { return output; }
const Tensor& dataOf(const Packed& output) { return output.data; }

// Layers stacked: each layer's output (after dropout, between layers when
// training) is the next one's input. Returns the last layer's output data and
// every layer's final hidden state.
template <typename Layer, typename Input, typename Hidden, typename Weights>
std::pair<Tensor, std::vector<Hidden>> stackLayers(const Input& input,
                                                   const std::vector<Hidden>& hiddens,
                                                   const std::vector<Weights>& weights,
                                                   int64_t num_layers, double dropout_p,
                                                   bool train) {
  TORCH_CHECK(num_layers == static_cast<int64_t>(hiddens.size()),
              "Expected more hidden states in stacked_rnn");
  TORCH_CHECK(num_layers == static_cast<int64_t>(weights.size()),
              "Expected more weights in stacked_rnn");
  Input layer_input = input;
  std::vector<Hidden> finals;
  for (int64_t l = 0; l < num_layers; ++l) {
    auto [output, final_hidden] = Layer{}(layer_input, hiddens[l], weights[l]);
    finals.push_back(std::move(final_hidden));
    if constexpr (std::is_same_v<Input, Packed>) {
      layer_input.data = std::move(output);
    } else {
      layer_input = std::move(output);
    }
    if (dropout_p != 0 && train && l < num_layers - 1) {
      if constexpr (std::is_same_v<Input, Packed>) {
        layer_input.data = dropoutOf(layer_input, dropout_p);
      } else {
        layer_input = dropoutOf(layer_input, dropout_p);
      }
    }
  }
  return {dataOf(layer_input), std::move(finals)};
}

template <typename Cell, template <typename> class Layer,
          template <typename> class BidirectionalLayer, typename Input>
std::pair<Tensor, std::vector<typename Cell::Hidden>> runLayers(
    const Input& input, const std::vector<LayerWeights>& weights,
    const std::vector<typename Cell::Hidden>& hiddens, int64_t num_layers, double dropout_p,
    bool train, bool bidirectional) {
  if (bidirectional) {
    auto [output, finals] = stackLayers<BidirectionalLayer<Cell>>(
        input, pairUp(hiddens), pairUp(weights), num_layers, dropout_p, train);
    return {std::move(output), unpair(finals)};
  }
  return stackLayers<Layer<Cell>>(input, hiddens, weights, num_layers, dropout_p, train);
}

// An LSTM's layers, with h and c given and returned as (layers, batch, size).
template <template <typename> class Layer, template <typename> class BidirectionalLayer,
          typename Input>
std::tuple<Tensor, Tensor, Tensor> lstmLayers(const Input& input,
                                              const std::vector<LayerWeights>& weights,
                                              const Tensor& hx, const Tensor& cx,
                                              int64_t num_layers, double dropout_p, bool train,
                                              bool bidirectional) {
  const std::vector<Tensor> layer_hx = hx.unbind(0);
  const std::vector<Tensor> layer_cx = cx.unbind(0);
  std::vector<LstmState> hiddens;
  for (size_t i = 0; i < layer_hx.size(); ++i) hiddens.emplace_back(layer_hx[i], layer_cx[i]);
  auto [output, finals] = runLayers<LstmCell, Layer, BidirectionalLayer>(
      input, weights, hiddens, num_layers, dropout_p, train, bidirectional);
  std::vector<Tensor> hy, cy;
  for (const LstmState& s : finals) {
    hy.push_back(std::get<0>(s));
    cy.push_back(std::get<1>(s));
  }
  Tensor cy_stacked = at::stack(cy, 0);  // c first, as rows() says
  Tensor hy_stacked = at::stack(hy, 0);
  return {std::move(output), std::move(hy_stacked), std::move(cy_stacked)};
}

// --- the ops -----------------------------------------------------------------

std::tuple<Tensor, Tensor, Tensor> lstm(const Tensor& input, TensorList hx, TensorList params,
                                        bool has_biases, int64_t num_layers, double dropout_p,
                                        bool train, bool bidirectional, bool batch_first) {
  TORCH_CHECK(hx.size() == 2, "lstm expects two hidden states");
  const bool has_projections = hx[0].sym_size(2) != hx[1].sym_size(2);
  at::native::check_attributes(input, params, hx);
  const Tensor x = batch_first ? input.transpose(0, 1) : input;
  const auto weights = groupWeights(params, has_biases, has_projections);
  auto result = lstmLayers<FullLayer, FullBidirectionalLayer>(
      x, weights, hx[0], hx[1], num_layers, dropout_p, train, bidirectional);
  if (batch_first) std::get<0>(result) = std::get<0>(result).transpose(0, 1);
  return result;
}

std::tuple<Tensor, Tensor, Tensor> lstmPacked(const Tensor& data, const Tensor& batch_sizes,
                                              TensorList hx, TensorList params, bool has_biases,
                                              int64_t num_layers, double dropout_p, bool train,
                                              bool bidirectional) {
  TORCH_CHECK(hx.size() == 2, "lstm expects two hidden states");
  const bool has_projections = hx[0].size(2) != hx[1].size(2);
  const auto weights = groupWeights(params, has_biases, has_projections);
  return lstmLayers<PackedLayer, PackedBidirectionalLayer>(Packed{data, batch_sizes}, weights,
                                                          hx[0], hx[1], num_layers, dropout_p,
                                                          train, bidirectional);
}

// GRU and the simple RNNs: one hidden tensor.
template <typename Cell>
std::tuple<Tensor, Tensor> oneHidden(const Tensor& input, const Tensor& hx, TensorList params,
                                     bool has_biases, int64_t num_layers, double dropout_p,
                                     bool train, bool bidirectional, bool batch_first) {
  at::native::check_attributes(input, params, hx);
  const Tensor x = batch_first ? input.transpose(0, 1) : input;
  const auto weights = groupWeights(params, has_biases, false);
  auto [output, finals] = runLayers<Cell, FullLayer, FullBidirectionalLayer>(
      x, weights, hx.unbind(0), num_layers, dropout_p, train, bidirectional);
  Tensor hy = at::stack(finals, 0);
  if (batch_first) output.transpose_(0, 1);
  return {std::move(output), std::move(hy)};
}

template <typename Cell>
std::tuple<Tensor, Tensor> oneHiddenPacked(const Tensor& data, const Tensor& batch_sizes,
                                           const Tensor& hx, TensorList params, bool has_biases,
                                           int64_t num_layers, double dropout_p, bool train,
                                           bool bidirectional) {
  const auto weights = groupWeights(params, has_biases, false);
  auto [output, finals] = runLayers<Cell, PackedLayer, PackedBidirectionalLayer>(
      Packed{data, batch_sizes}, weights, hx.unbind(0), num_layers, dropout_p, train,
      bidirectional);
  return {std::move(output), at::stack(finals, 0)};
}

void checkCellInput(const Tensor& input, const c10::SymInt& input_size) {
  TORCH_CHECK(input.sym_size(1) == input_size, "input has inconsistent input_size: got ",
              input.sym_size(1), " expected ", input_size);
}

void checkCellHidden(const Tensor& input, const Tensor& hx, const c10::SymInt& hidden_size,
                     int label) {
  TORCH_CHECK(input.sym_size(0) == hx.sym_size(0), "Input batch size ", input.sym_size(0),
              " doesn't match hidden", label, " batch size ", hx.sym_size(0));
  TORCH_CHECK(hx.sym_size(1) == hidden_size, "hidden", label,
              " has inconsistent hidden_size: got ", hx.sym_size(1), ", expected ", hidden_size);
}

void checkCellWeights(const Tensor& w_ih, const Tensor& w_hh, const c10::SymInt& hidden_size,
                      int64_t gates) {
  TORCH_CHECK(w_ih.sym_size(0) == hidden_size * gates, "weight_ih first dim must be ", gates,
              " * hidden_size = ", hidden_size * gates, ", but got ", w_ih.sym_size(0));
  TORCH_CHECK(w_hh.sym_size(0) == hidden_size * gates, "weight_hh first dim must be ", gates,
              " * hidden_size = ", hidden_size * gates, ", but got ", w_hh.sym_size(0));
}

LayerWeights cellWeights(const Tensor& w_ih, const Tensor& w_hh,
                         const std::optional<Tensor>& b_ih, const std::optional<Tensor>& b_hh) {
  return {w_ih, w_hh, b_ih.value_or(Tensor()), b_hh.value_or(Tensor()), Tensor()};
}

std::tuple<Tensor, Tensor> lstmCell(const Tensor& input, TensorList hx, const Tensor& w_ih,
                                    const Tensor& w_hh, const std::optional<Tensor>& b_ih,
                                    const std::optional<Tensor>& b_hh) {
  TORCH_CHECK(hx.size() == 2, "lstm_cell expects two hidden states");
  const c10::SymInt hidden_size = w_hh.sym_size(1);
  checkCellInput(input, w_ih.sym_size(1));
  checkCellWeights(w_ih, w_hh, hidden_size, 4);
  checkCellHidden(input, hx[0], hidden_size, 0);
  checkCellHidden(input, hx[1], hidden_size, 1);
  return LstmCell{}(input, LstmState(hx[0], hx[1]), cellWeights(w_ih, w_hh, b_ih, b_hh),
                    /*gates_done=*/false);
}

Tensor gruCell(const Tensor& input, const Tensor& hx, const Tensor& w_ih, const Tensor& w_hh,
               const std::optional<Tensor>& b_ih, const std::optional<Tensor>& b_hh) {
  checkCellInput(input, w_ih.sym_size(1));
  checkCellHidden(input, hx, w_hh.sym_size(1), 0);
  checkCellWeights(w_ih, w_hh, w_hh.sym_size(1), 3);
  return GruCell{}(input, hx, cellWeights(w_ih, w_hh, b_ih, b_hh), /*gates_done=*/false);
}

void registerRnnKernels(torch::Library& m) {
  m.impl("lstm.input", TORCH_FN(lstm));
  m.impl("lstm.data", TORCH_FN(lstmPacked));
  m.impl("gru.input", TORCH_FN(oneHidden<GruCell>));
  m.impl("gru.data", TORCH_FN(oneHiddenPacked<GruCell>));
  m.impl("rnn_tanh.input", TORCH_FN(oneHidden<SimpleCell<Tanh>>));
  m.impl("rnn_tanh.data", TORCH_FN(oneHiddenPacked<SimpleCell<Tanh>>));
  m.impl("rnn_relu.input", TORCH_FN(oneHidden<SimpleCell<Relu>>));
  m.impl("rnn_relu.data", TORCH_FN(oneHiddenPacked<SimpleCell<Relu>>));
  m.impl("lstm_cell", TORCH_FN(lstmCell));
  m.impl("gru_cell", TORCH_FN(gruCell));
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) { registerRnnKernels(m); }
TORCH_LIBRARY_IMPL(aten, AutogradPrivateUse1, m) { registerRnnKernels(m); }

}  // namespace
}  // namespace spyre
