// scaled_dot_product_attention picks its kernel through a dispatch stub, not the dispatcher.
// For the neuron device the stub makes the CPU's choice, so attention runs the CPU's fused kernel
// on the device (_scaled_dot_product_flash_attention_for_cpu, a lowering-table entry) and
// matches the CPU exactly: the math decomposition PyTorch uses for devices without a stub rounds
// bfloat16/float16 differently and turns a query row of NaNs into NaNs where the fused kernel
// gives zeros. Nested tensors keep the math path (their operators run on the host anyway).
//
// The operator itself has a kernel on the neuron device (AutogradPrivateUse1, and PrivateUse1 for
// inference mode, which skips autograd keys): the calls the kernel library's attention kernels may
// handle go to Python (attention_routing._sdpa decides and runs them), every other call takes the
// composite path directly, as without the kernel. Entering Python for every call cost ~50 us a
// call (a tenth of a small model's generate step).
#include "attention.h"

#include <ATen/ATen.h>
#include <ATen/SDPBackend.h>
#include <ATen/native/transformers/attention.h>
#include <ATen/ops/scaled_dot_product_attention_native.h>
#include <torch/library.h>

#include <memory>
#include <mutex>

#include "device.h"
#include "host_aliases.h"
#include "kernel_object.h"

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

struct Router {
  std::shared_ptr<KernelObject> route;  // attention_routing._sdpa
  int64_t min_keys = 0, max_keys = 0;
};
std::mutex router_mu;
// Never destroyed: its Python object cannot be released once the interpreter is gone at exit.
std::shared_ptr<const Router>& router = *new std::shared_ptr<const Router>();

// What every routed call has (a necessary condition of attention_routing.route, checked without
// Python): no mask, no dropout, 4-D dense tensors and a key length the kernels take. Symbolic shapes
// (tracing under torch.compile) are left to Python.
bool may_route(const Router& r, const at::Tensor& query, const at::Tensor& key,
               const std::optional<at::Tensor>& attn_mask, double dropout_p) {
  if ((attn_mask && attn_mask->defined()) || dropout_p > 0.0 || query.dim() != 4 || key.dim() != 4 ||
      query.is_nested() || key.is_nested())
    return false;
  if (key.unsafeGetTensorImpl()->has_symbolic_sizes_strides()) return true;
  return r.min_keys <= key.size(2) && key.size(2) <= r.max_keys;
}

at::Tensor sdpa(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                const std::optional<at::Tensor>& attn_mask, double dropout_p, bool is_causal,
                std::optional<double> scale, bool enable_gqa) {
  std::shared_ptr<const Router> r;
  {
    std::lock_guard<std::mutex> lock(router_mu);
    r = router;
  }
  if (r && may_route(*r, query, key, attn_mask, dropout_p)) {
    pybind11::gil_scoped_acquire gil;
    return r->route
        ->object(query, key, value, attn_mask, dropout_p, is_causal, pybind11::arg("scale") = scale,
                 pybind11::arg("enable_gqa") = enable_gqa)
        .cast<at::Tensor>();
  }
  return at::native::scaled_dot_product_attention(query, key, value, attn_mask, dropout_p, is_causal, scale,
                                                  enable_gqa);
}

}  // namespace

void bind_attention(pybind11::module_& m) {
  m.def("_set_sdpa_router", [](pybind11::object route, int64_t min_keys, int64_t max_keys) {
    auto r = std::make_shared<const Router>(
        Router{std::make_shared<KernelObject>(std::move(route)), min_keys, max_keys});
    std::lock_guard<std::mutex> lock(router_mu);
    router.swap(r);  // the old one (if any) is released after the lock, the interpreter lock held
  });
}

}  // namespace torch_neuronx

TORCH_LIBRARY_IMPL(aten, AutogradPrivateUse1, m) {
  m.impl("scaled_dot_product_attention", TORCH_FN(torch_neuronx::sdpa));
}
TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) { m.impl("scaled_dot_product_attention", TORCH_FN(torch_neuronx::sdpa)); }

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &torch_neuronx::fused_sdp_choice)
}  // namespace at::native
