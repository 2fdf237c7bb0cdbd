// Per-call helpers of compiled graphs (torch_neuronx/compile/executable.py): a graph returns
// tens of tensors per call, and these batch what would otherwise be one Python call each.
#pragma once

#include <torch/extension.h>

namespace torch_neuronx {

void bind_compiled_graph(pybind11::module_& m);

}  // namespace torch_neuronx
