// The batch-norm statistics operators of SyncBatchNorm (torch/nn/modules/_functions.py), which
// only CUDA implements (aten/src/ATen/native/cuda/Normalization.cu): per-channel statistics of
// this rank's batch, their merge over the ranks' counts, and the elementwise forward and backward.
// These host functions compute what the CUDA kernels compute, in the operator's accumulate type
// (float for bfloat16/float16, as CUDA), with the CUDA kernels' output dtypes.
#pragma once

#include <ATen/core/stack.h>
#include <c10/core/Device.h>

namespace torch_neuronx {

// Each replaces the operator's host arguments on the stack with its results.
void batch_norm_stats(torch::jit::Stack& s, c10::DeviceIndex);
void batch_norm_elemt(torch::jit::Stack& s, c10::DeviceIndex);
void batch_norm_gather_stats_with_counts(torch::jit::Stack& s, c10::DeviceIndex);
void batch_norm_backward_reduce(torch::jit::Stack& s, c10::DeviceIndex);
void batch_norm_backward_elemt(torch::jit::Stack& s, c10::DeviceIndex);

}  // namespace torch_neuronx
