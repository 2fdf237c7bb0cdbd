// Eager execution of ATen operators on a core: the generic native kernel that the lowering
// table registers per operator, and the boxed CPU fallback for everything else.
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
void register_native_op(const std::string& op, bool sync, const std::string& out_overload,
                        bool bool_index_sync);

// The operator's name as users see it ("aten::add.Tensor").
std::string full_name(const c10::OperatorName& name);
// Checks and records a host execution of `op`: refuses complex numbers and (in strict mode) any
// host execution, counts it in get_fallback_ops() and warns once per operator.
void note_fallback(const c10::OperatorHandle& op, const torch::jit::Stack& stack, const std::string& reason);

// The device of the first neuron tensor among the last `n` values of `stack` (the current
// device if there is none).
c10::DeviceIndex device_of(const torch::jit::Stack& stack, size_t n);

// Runs a CPU fallback of `op` — `body`: copies to the host, the CPU kernel, copies back, on the
// operator's arguments at the end of `stack` — as one kernel of `device`: on its worker, or on
// the calling thread when the compute threads are there (after a compiled graph), so that the
// worker's and the host's OpenMP teams are not used in turn (each switch cost ~1 ms). The copies
// the body asks for run inside it, in order; the caller's thread-local state (grad mode,
// autocast, dispatch modes, current device) goes with it, its warnings come back. Profiled as
// the operator's `cpu fallback` span.
void run_as_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack, c10::DeviceIndex device,
                   const std::function<void()>& body);

void set_strict_fallback(bool strict);
void set_retry_failed_kernels_on_cpu(bool retry);
// Make the next `count` executions of `op` raise inside the kernel (tests of error paths).
void inject_fault(const std::string& op, int count);

}  // namespace torch_neuronx
