// What the device's scaled matmuls (_scaled_mm, _scaled_mm_v2) accept, checked before they
// compute, in eager (host_substitutes.cpp) and by the compiler's lowering alike: the float8
// formats the simulated generation's TensorE multiplies (chip facts are Python's,
// torch_neuronx/runtime/chips.py, handed over when the runtime is configured), and no
// scale_result.
#pragma once

#include <ATen/ATen.h>

#include <string>
#include <vector>

namespace torch_neuronx {

void set_tensor_engine_float8(std::string generation, std::vector<at::ScalarType> dtypes);

void check_scaled_matmul(const char* op, const at::Tensor& a, const at::Tensor& b, bool scale_result);

}  // namespace torch_neuronx
