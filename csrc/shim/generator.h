// Per-core random number generators. A neuron generator wraps a CPU (mt19937) generator:
// kernels run PyTorch's CPU random kernels, which accept only CPU generators, so they are
// handed the inner one. Seeding a core therefore reproduces exactly the CPU sequence.
#pragma once

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Generator.h>

namespace torch_neuronx {

class NeuronGeneratorImpl final : public c10::GeneratorImpl {
 public:
  explicit NeuronGeneratorImpl(c10::DeviceIndex device, uint64_t seed = c10::default_rng_seed_val);
  void set_current_seed(uint64_t seed) override;
  void set_offset(uint64_t offset) override;
  uint64_t get_offset() const override;
  uint64_t current_seed() const override;
  uint64_t seed() override;
  void set_state(const c10::TensorImpl& state) override;
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override;
  static c10::DeviceType device_type() { return c10::DeviceType::PrivateUse1; }

  const at::Generator& cpu_generator() const { return cpu_; }

 private:
  void wait_for_draws() const;
  NeuronGeneratorImpl* clone_impl() const override;
  mutable at::Generator cpu_;  // mutable: reading a generator takes its lock
};

const at::Generator& default_generator(c10::DeviceIndex device);
at::Generator new_generator(c10::DeviceIndex device);

// The CPU generator a kernel on `device` must use for the given generator argument.
at::Generator kernel_generator(const std::optional<at::Generator>& gen, c10::DeviceIndex device);

}  // namespace torch_neuronx
