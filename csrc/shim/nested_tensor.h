// Nested tensors (torch.nested, strided layout) on the device.
#pragma once

namespace torch_neuronx {

// PyTorch runs an operator's decomposition (CompositeImplicitAutograd) on a backend without a
// kernel of its own, before any fallback; the operators whose decomposition does not hold for
// nested tensors have nested kernels for the CPU (nested_linear, ...). This registers the
// device's nested kernel for each of them.
void register_nested_kernels();

}  // namespace torch_neuronx
