// The CPU fallback: operators that run on the host, as one kernel of their core.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include <functional>
#include <string>

namespace torch_neuronx {

// The reason given for float64 operators (a dtype policy: one warning covers all of them).
extern const std::string kFloat64Reason;
// The reason given for operators on complex tensors (the chip has no complex arithmetic: the
// tensors are held in device memory, their operators run on the host, reported per operator).
extern const std::string kComplexReason;

// Checks and records a host execution of `op`: refuses quantized tensors and (in strict mode) any
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

// Runs `op` on the CPU for `reason`: note_fallback, then the CPU kernel as one kernel of the core.
void fallback_to_cpu(const c10::OperatorHandle& op, torch::jit::Stack* stack, const std::string& reason);

// Whether host execution is refused (TORCH_NEURONX_STRICT_FALLBACK).
void set_strict_fallback(bool strict);

}  // namespace torch_neuronx
