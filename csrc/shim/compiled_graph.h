// Compiled graphs' calls (torch_neuronx/compile/executable.py): after the first call, a graph
// call — its device buffers and outputs, the kernel, the generated code's allocator — runs in
// C++: a graph returns tens of tensors and allocates tens of buffers per call.
#pragma once

#include <torch/extension.h>

namespace torch_neuronx {

void bind_compiled_graph(pybind11::module_& m);

}  // namespace torch_neuronx
