// The CPU fallback: an operator without a device kernel (or with float64 tensors, or whose
// device kernel failed to build) runs PyTorch's CPU kernel on host copies of its arguments,
// as one kernel of its core; it is recorded, warned about once and refused in strict mode.
#include "fallback.h"

#include <pybind11/pybind11.h>
#include <frameobject.h>
#include <ATen/ThreadLocalState.h>
#include <ATen/native/CPUFallback.h>
#include <torch/library.h>

#include <atomic>
#include <string_view>

#include "device.h"
#include "launch.h"
#include "native_kernel/native_kernel.h"
#include "op_tracking.h"
#include "profiler/profiler.h"

namespace torch_neuronx {

const std::string kFloat64Reason = "float64 tensors live on the device but compute on the host";
const std::string kComplexReason = "complex tensors live on the device but compute on the host";

namespace {
std::atomic<bool> strict_fallback{false};
}  // namespace

c10::DeviceIndex device_of(const torch::jit::Stack& stack, size_t n) {
  for (size_t i = stack.size() - n; i < stack.size(); ++i) {
    const auto& v = stack[i];
    if (v.isTensor() && v.toTensor().device().type() == kNeuron) return v.toTensor().device().index();
    if (v.isTensorList())
      for (const at::Tensor& t : v.toTensorList())
        if (t.device().type() == kNeuron) return t.device().index();
  }
  return current_device();
}

void run_as_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack, c10::DeviceIndex device,
                   const std::function<void()>& body) {
  const std::string name = "cpu fallback: " + full_name(op.operator_name());
  profiler::FallbackSpan span(device, name);
  const std::vector<c10::IValue> inputs(stack->end() - static_cast<std::ptrdiff_t>(op.schema().arguments().size()),
                                        stack->end());
  raise_pending_error(core(device));
  const at::ThreadLocalState state;
  WarningCollector warnings;
  without_gil([&] {
    launch(device, [&] {
      const at::ThreadLocalStateGuard caller_state(state);
      const c10::WarningUtils::WarningHandlerGuard collect(&warnings);
      const c10::DeviceGuard guard(c10::Device(kNeuron, device));
      body();
    }, {.name = name, .host = neuron_rt::HostWork::kFollow, .completion = Launch::kWaited});
  });
  for (const auto& w : warnings.warnings) c10::warn(w);  // as if the CPU kernel ran on this thread
  span.set_args(inputs, torch::jit::last(*stack, op.schema().returns().size()));
}

// PyTorch's tensor printing (torch/_tensor_str.py) computes the format of any floating tensor
// in float64 on the tensor's device. Those operators are not the user's: they run on the host
// without a warning or a record, also in strict mode.
static bool called_by_tensor_printing() {
  // Operators called from Python run with the interpreter lock released; the calling thread's
  // Python state (and its innermost frame) comes back with it. Threads Python never saw have none.
  if (!Py_IsInitialized() || neuron_rt::on_worker_thread() || !PyGILState_GetThisThreadState()) return false;
  pybind11::gil_scoped_acquire gil;
  PyFrameObject* frame = PyEval_GetFrame();  // borrowed
  if (!frame) return false;
  PyCodeObject* code = PyFrame_GetCode(frame);  // new reference
  const char* file = PyUnicode_AsUTF8(code->co_filename);
  const bool printing = file && std::string_view(file).ends_with("torch/_tensor_str.py");
  Py_DECREF(code);
  return printing;
}

void note_fallback(const c10::OperatorHandle& op, const torch::jit::Stack& stack, const std::string& reason) {
  const std::string name = full_name(op.operator_name());
  const size_t n = op.schema().arguments().size();
  for (size_t i = stack.size() - n; i < stack.size(); ++i) {
    const auto& v = stack[i];
    if (v.isTensor() && v.toTensor().defined()) check_supported_dtype(v.toTensor().scalar_type(), name);
  }
  if ((reason == kFloat64Reason || reason == kComplexReason) && called_by_tensor_printing()) return;
  TORCH_CHECK(!strict_fallback, "neuron: operator '", name, "' would fall back to the CPU (", reason,
              ") but TORCH_NEURONX_STRICT_FALLBACK=1 forbids host execution. Unset it to allow the "
              "fallback, or keep this computation on the CPU.");
  // float64 is a dtype policy, not a missing kernel: one warning says it for every operator.
  const bool float64 = reason == kFloat64Reason;
  track_kernel(op, /*on_cpu=*/true);
  const bool first = first_fallback_warning(name);
  if (float64 ? first_float64_fallback() : first)
    TORCH_WARN("neuron: operator '", name, "' ran on the CPU (", reason,
               "): its inputs were copied "
               "to the host and its results back",
               float64 ? " (this warning covers every float64 "
                         "operator)"
                       : "",
               ". torch_neuronx.get_fallback_ops() lists every fallback; "
               "TORCH_NEURONX_STRICT_FALLBACK=1 turns them into errors.");
}

void fallback_to_cpu(const c10::OperatorHandle& op, torch::jit::Stack* stack, const std::string& reason) {
  note_fallback(op, *stack, reason);
  const auto device = device_of(*stack, op.schema().arguments().size());
  const size_t returns = op.schema().returns().size();
  run_as_kernel(op, stack, device, [&] {
    at::native::cpu_fallback(op, stack);
    // cpu_fallback returns results to the device of the first tensor argument, which is the CPU
    // when that is a scalar (`1 - x` is rsub(x, 1) = sub(scalar_tensor(1), x)).
    for (size_t i = stack->size() - returns; i < stack->size(); ++i) {
      auto& v = (*stack)[i];
      if (v.isTensor() && v.toTensor().defined() && v.toTensor().is_cpu())
        v = v.toTensor().to(c10::Device(kNeuron, device));
    }
  });
}

namespace {

void boxed_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  fallback_to_cpu(op, stack, "no device kernel in the lowering table");
}

}  // namespace

void set_strict_fallback(bool strict) { strict_fallback = strict; }

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) { m.fallback(torch::CppFunction::makeFromBoxedFunction<&boxed_fallback>()); }

}  // namespace torch_neuronx
