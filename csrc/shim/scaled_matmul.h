// The device's scaled matmuls: one dequantizing kernel on every host (each operand to fp32 times
// its scale, an fp32 matmul, the bias in fp32, one rounding to the output dtype), as TensorE
// accumulates in fp32. Registered as torch_neuronx::scaled_mm / scaled_mm_v2 /
// scaled_grouped_mm with CPU kernels, which eager (host_substitutes.cpp) and compiled graphs
// (torch_neuronx/compile/lowering.py) both run on a core's memory:
//   - tensorwise and rowwise float32 scales: _scaled_mm_v2's CPU kernel (the host's _scaled_mm
//     takes oneDNN on AMX hosts and rounds differently);
//   - MX (blocks of 32 along K with E8M0 scales, swizzled as cuBLAS lays them out or not; MXFP8
//     and MXFP4 elements), which PyTorch's CPU build lacks: dequantized here, as the
//     kernel-language simulator's nc_matmul_mx does (nki/simulator/microscaling.py);
//   - grouped (MoE): group by group, each as _scaled_mm_v2's rowwise kernel.
// Before computing, each checks what the simulated generation's TensorE multiplies (chip facts
// are Python's, torch_neuronx/runtime/chips.py, handed over when the runtime is configured).
#pragma once

#include <ATen/ATen.h>

#include <string>
#include <vector>

namespace torch_neuronx {

void set_tensor_engine_formats(std::string generation, std::vector<at::ScalarType> float8, bool mx);

}  // namespace torch_neuronx
