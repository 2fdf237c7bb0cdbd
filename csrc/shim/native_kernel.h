// Eager execution of ATen operators on a core: the generic native kernel that the lowering
// table registers per operator, and the boxed CPU fallback for everything else.
#pragma once

#include <string>

namespace torch_neuronx {

// Register the native kernel for `op` ("aten::add.Tensor"). `sync`: the output shape depends
// on input values, so every launch waits for the result. `out_overload`: overload of the
// same operator that writes preallocated outputs (empty if none). `bool_index_sync`: launches
// with boolean index tensors are data-dependent (aten::index.Tensor).
void register_native_op(const std::string& op, bool sync, const std::string& out_overload,
                        bool bool_index_sync);

void set_strict_fallback(bool strict);
void set_retry_failed_kernels_on_cpu(bool retry);
// Make the next `count` executions of `op` raise inside the kernel (tests of error paths).
void inject_fault(const std::string& op, int count);

}  // namespace torch_neuronx
