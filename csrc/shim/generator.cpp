#include "generator.h"

#include <mutex>
#include <vector>

#include "device.h"
#include "launch.h"

namespace torch_neuronx {

NeuronGeneratorImpl::NeuronGeneratorImpl(c10::DeviceIndex device, uint64_t seed)
    : c10::GeneratorImpl(c10::Device(kNeuron, device), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)),
      cpu_(at::make_generator<at::CPUGeneratorImpl>(seed)) {}

// Kernels draw from the generator when they execute, not when they are launched: reading or
// replacing its state waits for the kernels queued on its core (an explicit
// torch.Generator("neuron") as the default ones, whose Python functions synchronize first).
void NeuronGeneratorImpl::wait_for_draws() const {
  const auto index = device().index();
  if (neuron_rt::Runtime::get().core_initialized(index)) without_gil([&] { synchronize_device(index); });
}

void NeuronGeneratorImpl::set_current_seed(uint64_t seed) {
  wait_for_draws();
  std::lock_guard<std::mutex> lock(cpu_.mutex());
  cpu_.set_current_seed(seed);
}
void NeuronGeneratorImpl::set_offset(uint64_t offset) {
  wait_for_draws();
  std::lock_guard<std::mutex> lock(cpu_.mutex());
  cpu_.set_offset(offset);
}
// Readers take the generator's lock too: a kernel on the core's worker may be drawing.
uint64_t NeuronGeneratorImpl::get_offset() const {
  wait_for_draws();
  std::lock_guard<std::mutex> lock(cpu_.mutex());
  return cpu_.get_offset();
}
uint64_t NeuronGeneratorImpl::current_seed() const {
  std::lock_guard<std::mutex> lock(cpu_.mutex());
  return cpu_.current_seed();
}
uint64_t NeuronGeneratorImpl::seed() {
  wait_for_draws();
  std::lock_guard<std::mutex> lock(cpu_.mutex());
  return cpu_.seed();
}
void NeuronGeneratorImpl::set_state(const c10::TensorImpl& state) {
  wait_for_draws();
  std::lock_guard<std::mutex> lock(cpu_.mutex());
  cpu_.unsafeGetGeneratorImpl()->set_state(state);
}
c10::intrusive_ptr<c10::TensorImpl> NeuronGeneratorImpl::get_state() const {
  wait_for_draws();
  std::lock_guard<std::mutex> lock(cpu_.mutex());
  return cpu_.unsafeGetGeneratorImpl()->get_state();
}
NeuronGeneratorImpl* NeuronGeneratorImpl::clone_impl() const {
  wait_for_draws();
  auto* gen = new NeuronGeneratorImpl(device().index());
  std::lock_guard<std::mutex> lock(cpu_.mutex());
  gen->cpu_ = cpu_.clone();
  return gen;
}

const at::Generator& default_generator(c10::DeviceIndex device) {
  static std::once_flag once;
  static std::vector<at::Generator> generators;
  std::call_once(once, [] {
    const int n = neuron_rt::Runtime::get().device_count();
    for (int i = 0; i < n; ++i) {
      generators.push_back(at::make_generator<NeuronGeneratorImpl>(i));
      generators.back().set_current_seed(c10::default_rng_seed_val);
    }
  });
  const auto index = device < 0 ? current_device() : device;
  TORCH_CHECK_INDEX(index < static_cast<c10::DeviceIndex>(generators.size()), "neuron:", index,
                    " is not a visible NeuronCore");
  return generators[index];
}

at::Generator new_generator(c10::DeviceIndex device) {
  return at::make_generator<NeuronGeneratorImpl>(device < 0 ? current_device() : device);
}

at::Generator kernel_generator(const std::optional<at::Generator>& gen, c10::DeviceIndex device) {
  if (!gen.has_value() || !gen->defined())
    return at::check_generator<NeuronGeneratorImpl>(default_generator(device))->cpu_generator();
  TORCH_CHECK(gen->device().type() == kNeuron,
              "Expected a 'neuron' device type for generator "
              "but found '",
              gen->device().type(), "'");
  return at::check_generator<NeuronGeneratorImpl>(*gen)->cpu_generator();
}

}  // namespace torch_neuronx
