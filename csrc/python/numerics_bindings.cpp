// DLFloat16 numerics (device/numerics.h; docs/tensors.md, "DLFloat16"): the
// active setting, the overflow report, the conversion itself for the
// conformance table, and the rounding of what spyreccl's gloo wrote in place.
#include <torch/csrc/utils/pybind.h>

#include <ATen/ops/empty.h>

#include "launch/sanitizer_accesses.h"
#include "launch/stream_uses.h"
#include "launch/tensor_ref.h"
#include "device/dlfloat16.h"
#include "device/numerics.h"
#include "python/bindings.h"

namespace spyre::python {

void bindNumerics(py::module_& m) {
  m.def("_numerics", &numericsName);
  m.def("_numerics_report", [] {
    py::dict report;
    for (const auto& [op, count] : overflowReport()) report[py::str(op)] = count;
    return report;
  });
  m.def("_reset_numerics_report", &resetOverflowReport);
  m.def(
      "_dlfloat16_bits",
      [](const at::Tensor& values, const std::string& profile_name) {
        TORCH_CHECK_VALUE(values.is_cpu() && values.scalar_type() == c10::kFloat,
                          "_dlfloat16_bits: expected a CPU float32 tensor, got ",
                          values.scalar_type(), " on ", values.device());
        const dl16::Profile profile = profileNamed(profile_name);
        const at::Tensor dense = values.contiguous();
        at::Tensor bits = at::empty(dense.sizes(), dense.options().dtype(c10::kInt));
        const float* in = dense.const_data_ptr<float>();
        int32_t* out = bits.mutable_data_ptr<int32_t>();
        for (int64_t i = 0; i < dense.numel(); ++i) out[i] = dl16::encode(in[i], profile);
        return bits;
      },
      "float32 values as DLFloat16 bits (int32) under a profile: the conformance table's "
      "conversion (tests).");
  m.def(
      "_dlfloat16_values",
      [](const at::Tensor& bits, const std::string& profile_name) {
        TORCH_CHECK_VALUE(bits.is_cpu() && bits.scalar_type() == c10::kInt,
                          "_dlfloat16_values: expected a CPU int32 tensor, got ",
                          bits.scalar_type(), " on ", bits.device());
        const dl16::Profile profile = profileNamed(profile_name);
        const at::Tensor dense = bits.contiguous();
        at::Tensor values = at::empty(dense.sizes(), dense.options().dtype(c10::kFloat));
        const int32_t* in = dense.const_data_ptr<int32_t>();
        float* out = values.mutable_data_ptr<float>();
        for (int64_t i = 0; i < dense.numel(); ++i) {
          TORCH_CHECK_VALUE(in[i] >= 0 && in[i] <= 0xFFFF, "_dlfloat16_values: ", in[i],
                            " is not a 16-bit code");
          out[i] = dl16::widen(static_cast<uint16_t>(in[i]), profile);
        }
        return values;
      },
      "DLFloat16 bits (int32) as the float32 values they read back as under a profile (tests).");
  m.def(
      "_round_written_on",
      [](const at::Tensor& t, c10::StreamId id, int64_t device, const std::string& op) {
        if (!dl16Writes() || !isDl16Dtype(t.scalar_type()) || t.numel() == 0) return;
        const SpyreStream stream = fromKey(id, device);
        auto launch = [&] {
          stream.launchCompute(
              [ref = TensorRef::of(t), op] {
                const int64_t overflowed = roundToDl16(ref.cpuAlias());
                if (overflowed != 0) recordOverflow(op, overflowed);
              },
              "dl16 round", t.nbytes());
        };
        if (sanitizer::accessesWanted()) {  // a write like any op's, checked with the launch
          std::vector<sanitizer::Access> accesses;
          sanitizer::addTensor(accesses, t, /*write=*/true);
          sanitizer::onLaunch(stream.id(), op, accesses, launch);
        } else {
          launch();
        }
        recordUse(t, stream);
      },
      "Under DLFloat16 numerics, rounds spyre tensor t on a stream: what spyreccl's gloo wrote "
      "in place (its window comes first on that stream).");
}

}  // namespace spyre::python
