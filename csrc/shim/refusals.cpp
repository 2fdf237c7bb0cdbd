// What the device refuses with one clear error before anything is computed: sparse layouts
// (at creation and conversion) and forward-mode automatic differentiation.
#include <ATen/ATen.h>
#include <torch/library.h>

#include "native_kernel/native_kernel.h"

namespace torch_neuronx {

namespace {

void refuse_layout(const c10::OperatorHandle& op, torch::jit::Stack*) {
  TORCH_CHECK_NOT_IMPLEMENTED(false, full_name(op.operator_name()),
                              ": sparse tensors are not "
                              "supported on the neuron device. Keep them on the CPU, or convert them "
                              "with .to_dense() before moving to neuron.");
}

at::Tensor refuse_forward_ad(const at::Tensor&, const at::Tensor&, int64_t) {
  TORCH_CHECK_NOT_IMPLEMENTED(false,
                              "aten::_make_dual: forward-mode automatic differentiation is "
                              "not supported on the neuron device. Use reverse mode "
                              "(loss.backward() / torch.autograd.grad), or run the jvp on the CPU.");
}

}  // namespace

TORCH_LIBRARY_IMPL(_, SparsePrivateUse1, m) { m.fallback(torch::CppFunction::makeFromBoxedFunction<&refuse_layout>()); }

TORCH_LIBRARY_IMPL(_, SparseCsrPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&refuse_layout>());
}

TORCH_LIBRARY_IMPL(aten, AutogradPrivateUse1, m) {
  m.impl("_make_dual", refuse_forward_ad);
  // The compressed-sparse constructors (torch.sparse_csr/csc/bsr/bsc_tensor(..., device="neuron")
  // all build through these): PyTorch makes the tensor without reaching a backend kernel, so the
  // refusal sits at the constructor.
  for (const char* ctor :
       {"sparse_compressed_tensor.comp_plain_value_size", "sparse_compressed_tensor.comp_plain_value"})
    m.impl(ctor, torch::CppFunction::makeFromBoxedFunction<&refuse_layout>());
}

// Dense-to-sparse conversions on the device are refused before they compute anything.
TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  for (const char* conversion :
       {"_to_sparse", "_to_sparse.sparse_dim", "_to_sparse_csr", "_to_sparse_csc", "_to_sparse_bsr", "_to_sparse_bsc"})
    m.impl(conversion, torch::CppFunction::makeFromBoxedFunction<&refuse_layout>());
}

}  // namespace torch_neuronx
