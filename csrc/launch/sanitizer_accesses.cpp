// What an ATen-level operation reads and writes (sanitizer_accesses.h).
#include "launch/sanitizer_accesses.h"

#include <sstream>

#include <c10/core/ScalarType.h>

#include "launch/argument_writes.h"

namespace spyre::sanitizer {
namespace {

void addValue(std::vector<Access>& out, const c10::IValue& v, bool write) {
  if (v.isTensor()) {
    addTensor(out, v.toTensor(), write);
  } else if (v.isTensorList()) {
    for (const at::Tensor& t : v.toTensorList()) addTensor(out, t, write);
  } else if (v.isList()) {
    for (const c10::IValue& e : v.toListRef()) {
      if (e.isTensor()) addTensor(out, e.toTensor(), write);
    }
  }
}

}  // namespace

void addTensor(std::vector<Access>& out, const at::Tensor& t, bool write) {
  if (!t.defined() || !t.has_storage() || t.device().type() != c10::DeviceType::PrivateUse1 ||
      t.numel() == 0) {
    return;
  }
  addTensorBytes(out, t, write);
}

void addTensorBytes(std::vector<Access>& out, const at::Tensor& t, bool write) {
  Access& a = out.emplace_back();
  a.write = write;
  a.bytes.origin = reinterpret_cast<uintptr_t>(t.const_data_ptr());
  a.bytes.itemsize = static_cast<int64_t>(t.element_size());
  a.bytes.sizes.assign(t.sizes().begin(), t.sizes().end());
  a.bytes.strides.assign(t.strides().begin(), t.strides().end());
  std::ostringstream what;
  what << "tensor " << c10::getDtypeNames(t.scalar_type()).first << t.sizes();
  a.bytes.what = what.str();
}

std::vector<Access> opAccesses(const c10::FunctionSchema& schema, const torch::jit::Stack& args,
                               c10::ArrayRef<c10::IValue> new_outputs) {
  std::vector<Access> out;
  const auto& params = schema.arguments();
  for (size_t i = 0; i < args.size() && i < params.size(); ++i) {
    addValue(out, args[i], writesInPlace(schema, args, i));
  }
  for (const c10::IValue& v : new_outputs) addValue(out, v, true);
  return out;
}

std::string opName(const c10::OperatorHandle& op) {
  const c10::OperatorName& name = op.operator_name();
  return name.overload_name.empty() ? name.name : name.name + "." + name.overload_name;
}

}  // namespace spyre::sanitizer
