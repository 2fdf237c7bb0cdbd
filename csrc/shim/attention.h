// scaled_dot_product_attention on neuron tensors: the CPU's choice of fused kernel, and the
// routing of the calls the kernel library handles (torch_neuronx/ops/attention_routing.py).
#pragma once

#include <torch/csrc/utils/pybind.h>

namespace torch_neuronx {

// _C._set_sdpa_router(router, min_keys, max_keys): the Python function that runs routed calls.
void bind_attention(pybind11::module_& m);

}  // namespace torch_neuronx
