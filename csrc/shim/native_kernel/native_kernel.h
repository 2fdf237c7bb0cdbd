// Eager execution of ATen operators on a core: the generic native kernel that the lowering
// table registers per operator (the CPU fallback for everything else is in fallback.h).
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include <functional>
#include <string>

namespace torch_neuronx {

// Register the native kernel for `op` ("aten::add.Tensor"). `sync`: the output shape depends
// on input values, so every launch waits for the result. `out_overload`: overload of the
// same operator that writes preallocated outputs (empty if none). `bool_index_sync`: launches
// with boolean index tensors are data-dependent (aten::index.Tensor).
void register_native_op(const std::string& op, bool sync, const std::string& out_overload, bool bool_index_sync);

// self.clone(memory_format) and a cast of self to `dtype` on its core, as planned calls of the
// native kernels of aten::clone and aten::_to_copy, which adaptive eager may hold in a segment
// (tensor_kernels.cpp's clone and _to_copy route there while the mode is on).
at::Tensor clone_as_planned_call(const at::Tensor& self, std::optional<c10::MemoryFormat> memory_format);
at::Tensor cast_as_planned_call(const at::Tensor& self, c10::ScalarType dtype, bool non_blocking,
                                std::optional<c10::MemoryFormat> memory_format);

// The operator's name as users see it ("aten::add.Tensor").
std::string full_name(const c10::OperatorName& name);
void set_retry_failed_kernels_on_cpu(bool retry);
// Make the next `count` executions of `op` raise inside the kernel (tests of error paths).
void inject_fault(const std::string& op, int count);

}  // namespace torch_neuronx
