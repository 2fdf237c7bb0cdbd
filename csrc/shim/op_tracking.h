// Which operators ran on the device and which fell back to the CPU, by the names users call.
//
// A RecordFunction observer keeps each host thread's stack of the operators being called
// (composite ones included: aten::linear around aten::addmm). Device kernels, copies and CPU
// fallbacks mark the innermost; an operator leaving the stack is recorded as executed when
// everything inside it ran on the device, as a fallback when any part ran on the CPU. Operators
// that only make views or allocate run no kernel and are not recorded.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>

#include <cstdint>
#include <map>
#include <string>

namespace torch_neuronx {

// Starts the observer, once: at the first use of the device (torch.neuron._lazy_init runs
// before the first operator on it), so programs that never use the device are unaffected.
void start_op_tracking();

// Reported by the device kernel (on_cpu=false) or the CPU fallback (true) of `op`, on the
// thread that called it.
void track_kernel(const c10::OperatorHandle& op, bool on_cpu);

// A kernel launched from Python (a kernel-language operator's kernels, torch_neuronx.nki_op) on
// the thread calling an operator: the innermost operator being called ran on the device.
void track_python_kernel();

// True the first time since start or the last clear: for `op`'s fallback warning, and for the
// one warning that covers every float64 fallback.
bool first_fallback_warning(const std::string& op);
bool first_float64_fallback();

std::map<std::string, int64_t> executed_ops();
// `kernels_only`: the operators whose own kernel fell back, not the composites around them.
std::map<std::string, int64_t> fallback_ops(bool kernels_only);
void clear_op_tracking();

}  // namespace torch_neuronx
