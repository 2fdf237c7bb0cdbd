// Operators without a suitable CPU kernel: they run another operator on the host (`host_op`,
// after `adapt` rewrites the arguments) or a host function of their own (`run`).
#pragma once

#include <ATen/core/stack.h>
#include <c10/core/Device.h>

#include <string>
#include <unordered_map>

namespace torch_neuronx {

// An optional tensor argument of a host function's stack: undefined for None.
inline at::Tensor opt_tensor(const c10::IValue& v) { return v.isNone() ? at::Tensor() : v.toTensor(); }

struct HostSubstitute {
  const char* host_op;
  void (*adapt)(torch::jit::Stack&);
  void (*run)(torch::jit::Stack&, c10::DeviceIndex);
};

// By operator name ("aten::native_dropout").
const std::unordered_map<std::string, HostSubstitute>& host_substitutes();

}  // namespace torch_neuronx
