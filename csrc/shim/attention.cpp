// scaled_dot_product_attention picks its kernel through a dispatch stub, not the dispatcher.
// For the neuron device the stub makes the CPU's choice, so attention runs the CPU's fused kernel
// on the device (_scaled_dot_product_flash_attention_for_cpu, a lowering-table entry) and
// matches the CPU exactly: the math decomposition PyTorch uses for devices without a stub rounds
// bfloat16/float16 differently and turns a query row of NaNs into NaNs where the fused kernel
// gives zeros. Nested tensors keep the math path (their operators run on the host anyway).
#include <ATen/ATen.h>
#include <ATen/SDPBackend.h>
#include <ATen/native/transformers/attention.h>

#include "device.h"
#include "host_aliases.h"

namespace torch_neuronx {
namespace {

// A CPU tensor with `t`'s metadata and no memory: the CPU's choice reads nothing else, and
// asking it this way neither waits for the queue nor touches device memory.
at::Tensor metadata_only(const at::Tensor& t) {
  c10::Storage storage(c10::Storage::use_byte_size_t(), t.storage().nbytes(),
                       c10::DataPtr(nullptr, c10::Device(at::kCPU)), nullptr, false);
  at::Tensor cpu = tensor_on(std::move(storage), c10::DispatchKey::CPU, t);
  if (t.requires_grad()) cpu.set_requires_grad(true);
  return cpu;
}

int64_t fused_sdp_choice(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                         const std::optional<at::Tensor>& attn_mask, double dropout_p, bool is_causal,
                         std::optional<double> scale, bool enable_gqa) {
  const bool nested = query.is_nested() || key.is_nested() || value.is_nested() ||
                      (attn_mask && attn_mask->defined() && attn_mask->is_nested());
  if (nested) return static_cast<int64_t>(at::SDPBackend::math);
  std::optional<at::Tensor> mask;
  if (attn_mask && attn_mask->defined()) mask = metadata_only(*attn_mask);
  // Past any Python dispatch mode: under Dynamo's fake tensors the mode would be handed these
  // plain CPU tensors and refuse them.
  c10::impl::ExcludeDispatchKeyGuard no_python(
      c10::DispatchKeySet({c10::DispatchKey::Python, c10::DispatchKey::PythonTLSSnapshot}));
  return at::_fused_sdp_choice(metadata_only(query), metadata_only(key), metadata_only(value), mask, dropout_p,
                               is_causal, scale, enable_gqa);
}

}  // namespace
}  // namespace torch_neuronx

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &torch_neuronx::fused_sdp_choice)
}  // namespace at::native
