// The fused LSTM/GRU cells. PyTorch's RNN code sends a PrivateUse1 device to the fused cell
// operators (aten/src/ATen/native/RNN.cpp), which only CUDA implements; these host functions
// compute what the CUDA kernels compute (aten/src/ATen/native/cuda/RNN.cu), workspace layouts
// included, since the backward operators read the workspace the forward left.
#pragma once

#include <ATen/core/stack.h>
#include <c10/core/Device.h>

namespace torch_neuronx {

// Each replaces the operator's host arguments on the stack with its results.
void fused_lstm_cell(torch::jit::Stack& s, c10::DeviceIndex);
void fused_lstm_cell_backward(torch::jit::Stack& s, c10::DeviceIndex);
void fused_gru_cell(torch::jit::Stack& s, c10::DeviceIndex);
void fused_gru_cell_backward(torch::jit::Stack& s, c10::DeviceIndex);

}  // namespace torch_neuronx
