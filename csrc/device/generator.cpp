#include "device/generator.h"

#include <pthread.h>

#include <deque>
#include <mutex>

#include <ATen/CPUGeneratorImpl.h>
#include <c10/util/Exception.h>

#include "runtime/runtime.h"

namespace spyre {
namespace {

class SpyreGeneratorImpl final : public c10::GeneratorImpl {
 public:
  explicit SpyreGeneratorImpl(c10::DeviceIndex device_index)
      : c10::GeneratorImpl(c10::Device(c10::DeviceType::PrivateUse1, device_index),
                           c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)),
        cpu_(at::make_generator<at::CPUGeneratorImpl>()) {}

  // Python locks this generator's mutex, CPU kernels drawing from cpu_ lock
  // cpu_'s: every access to cpu_ takes the latter so the two never race.
  void set_current_seed(uint64_t seed) override {
    std::lock_guard<std::mutex> lock(cpuMutex());
    cpu_.set_current_seed(seed);
  }
  void set_offset(uint64_t offset) override {
    std::lock_guard<std::mutex> lock(cpuMutex());
    cpu_.set_offset(offset);
  }
  uint64_t get_offset() const override {
    std::lock_guard<std::mutex> lock(cpuMutex());
    return cpu_.get_offset();
  }
  uint64_t current_seed() const override {
    std::lock_guard<std::mutex> lock(cpuMutex());
    return cpu_.current_seed();
  }
  uint64_t seed() override {
    std::lock_guard<std::mutex> lock(cpuMutex());
    return cpu_.seed();
  }
  void set_state(const c10::TensorImpl& new_state) override {
    std::lock_guard<std::mutex> lock(cpuMutex());
    cpu_.unsafeGetGeneratorImpl()->set_state(new_state);
  }
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override {
    std::lock_guard<std::mutex> lock(cpuMutex());
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
    std::lock_guard<std::mutex> lock(cpuMutex());
    copy->cpu_ = cpu_.clone();
    return copy;
  }

  std::mutex& cpuMutex() const {
    return cpu_.unsafeGetGeneratorImpl()->mutex_;
  }

  at::Generator cpu_;
};

c10::DeviceIndex checkedIndex(c10::DeviceIndex device_index) {
  if (device_index < 0) {
    device_index = currentDevice();
  }
  checkVisibleDevice(device_index);
  return device_index;
}

struct DefaultGenerators {
  std::mutex mutex;  // guards the deque, not the generators
  std::deque<at::Generator> generators;
};

DefaultGenerators& defaultGenerators() {
  static auto* defaults = new DefaultGenerators();  // leaked: outlives users
  return *defaults;
}

std::mutex& cpuMutexOf(const at::Generator& generator) {
  return static_cast<const SpyreGeneratorImpl*>(generator.unsafeGetGeneratorImpl())
      ->cpu()
      .unsafeGetGeneratorImpl()
      ->mutex_;
}

// fork() with the default generators' locks held (Python's order: the spyre
// generator's, then its CPU generator's, which a drawing thread holds), so a
// child can still seed them and read their state.
void lockGeneratorsForFork() {
  DefaultGenerators& defaults = defaultGenerators();
  defaults.mutex.lock();
  for (const at::Generator& generator : defaults.generators) {
    generator.unsafeGetGeneratorImpl()->mutex_.lock();
    cpuMutexOf(generator).lock();
  }
}

void unlockGeneratorsAfterFork() {
  DefaultGenerators& defaults = defaultGenerators();
  for (const at::Generator& generator : defaults.generators) {
    cpuMutexOf(generator).unlock();
    generator.unsafeGetGeneratorImpl()->mutex_.unlock();
  }
  defaults.mutex.unlock();
}

const bool registered = [] {
  pthread_atfork(lockGeneratorsForFork, unlockGeneratorsAfterFork, unlockGeneratorsAfterFork);
  return true;
}();

}  // namespace

const at::Generator& defaultGenerator(c10::DeviceIndex device_index) {
  DefaultGenerators& defaults = defaultGenerators();
  device_index = checkedIndex(device_index);
  std::lock_guard<std::mutex> lock(defaults.mutex);
  while (defaults.generators.size() <= static_cast<size_t>(device_index)) {
    defaults.generators.push_back(at::make_generator<SpyreGeneratorImpl>(
        static_cast<c10::DeviceIndex>(defaults.generators.size())));
  }
  return defaults.generators[device_index];
}

at::Generator newGenerator(c10::DeviceIndex device_index) {
  return at::make_generator<SpyreGeneratorImpl>(checkedIndex(device_index));
}

at::Generator cpuGeneratorOf(const std::optional<at::Generator>& generator,
                             c10::DeviceIndex device_index) {
  const at::Generator& spyre_generator =
      generator.has_value() && generator->defined() ? *generator : defaultGenerator(device_index);
  TORCH_CHECK(spyre_generator.device().type() == c10::DeviceType::PrivateUse1,
              "Expected a spyre generator, got one for device ", spyre_generator.device());
  return static_cast<const SpyreGeneratorImpl*>(spyre_generator.unsafeGetGeneratorImpl())->cpu();
}

}  // namespace spyre
