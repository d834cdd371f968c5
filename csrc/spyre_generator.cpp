#include "spyre_generator.h"

#include <deque>
#include <mutex>

#include <ATen/CPUGeneratorImpl.h>
#include <c10/util/Exception.h>

#include "spyre_runtime.h"

namespace spyre {
namespace {

class SpyreGeneratorImpl final : public c10::GeneratorImpl {
 public:
  explicit SpyreGeneratorImpl(c10::DeviceIndex device_index)
      : c10::GeneratorImpl(c10::Device(c10::DeviceType::PrivateUse1, device_index),
                           c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)),
        cpu_(at::make_generator<at::CPUGeneratorImpl>()) {}

  void set_current_seed(uint64_t seed) override {
    cpu_.set_current_seed(seed);
  }
  void set_offset(uint64_t offset) override {
    cpu_.set_offset(offset);
  }
  uint64_t get_offset() const override {
    return cpu_.get_offset();
  }
  uint64_t current_seed() const override {
    return cpu_.current_seed();
  }
  uint64_t seed() override {
    return cpu_.seed();
  }
  void set_state(const c10::TensorImpl& new_state) override {
    cpu_.unsafeGetGeneratorImpl()->set_state(new_state);
  }
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override {
    return cpu_.unsafeGetGeneratorImpl()->get_state();
  }
  static c10::DeviceType device_type() {
    return c10::DeviceType::PrivateUse1;
  }

  const at::Generator& cpu() const {
    return cpu_;
  }

 private:
  SpyreGeneratorImpl* clone_impl() const override {
    auto* copy = new SpyreGeneratorImpl(device().index());
    copy->cpu_ = cpu_.clone();
    return copy;
  }

  at::Generator cpu_;
};

c10::DeviceIndex checkedIndex(c10::DeviceIndex device_index) {
  if (device_index < 0) {
    device_index = currentDevice();
  }
  const c10::DeviceIndex count = deviceCount();
  TORCH_CHECK(device_index >= 0 && device_index < count, "Invalid device index ",
              static_cast<int>(device_index), " for a spyre generator: out of range for ",
              static_cast<int>(count), " visible Spyre device(s)");
  return device_index;
}

}  // namespace

const at::Generator& defaultGenerator(c10::DeviceIndex device_index) {
  static std::mutex mutex;
  static auto* generators = new std::deque<at::Generator>();  // leaked: outlives users
  device_index = checkedIndex(device_index);
  std::lock_guard<std::mutex> lock(mutex);
  while (generators->size() <= static_cast<size_t>(device_index)) {
    generators->push_back(
        at::make_generator<SpyreGeneratorImpl>(static_cast<c10::DeviceIndex>(generators->size())));
  }
  return (*generators)[device_index];
}

at::Generator newGenerator(c10::DeviceIndex device_index) {
  return at::make_generator<SpyreGeneratorImpl>(checkedIndex(device_index));
}

at::Generator cpuGeneratorOf(const std::optional<at::Generator>& generator) {
  const at::Generator& spyre_generator =
      generator.has_value() && generator->defined() ? *generator : defaultGenerator(-1);
  TORCH_CHECK(spyre_generator.device().type() == c10::DeviceType::PrivateUse1,
              "Expected a spyre generator, got one for device ", spyre_generator.device());
  return static_cast<const SpyreGeneratorImpl*>(spyre_generator.unsafeGetGeneratorImpl())->cpu();
}

}  // namespace spyre
