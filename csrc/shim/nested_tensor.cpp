// Nested tensors (torch.nested, strided layout) on the device. A nested tensor's buffer lives in
// device memory, its sizes, strides and offsets in host tensors as on the CPU and CUDA. Operators
// that only read or rearrange the metadata (views: unbind, select, narrow, transpose, values, ...)
// run PyTorch's own nested kernels on it, so views alias as they do on the CPU; moves between devices copy the buffer; every other operator runs on the host (its
// arguments copied there, its results back, mutated arguments written back) and is reported as
// a CPU fallback: the device has no nested kernels yet. This is what nn.TransformerEncoder's
// inference fast path needs with a padding mask.
#include "nested_tensor.h"

#include <ATen/NestedTensorImpl.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/native/nested/NestedTensorUtils.h>
#include <torch/library.h>

#include <optional>
#include <string>
#include <unordered_set>
#include <vector>

#include "device.h"
#include "host_aliases.h"
#include "fallback.h"
#include "native_kernel/native_kernel.h"

namespace torch_neuronx {
namespace {

const c10::DispatchKeySet kNestedCpuKeys(c10::DispatchKey::NestedTensorCPU);

// A copy of `t` on `device` with elements of `dtype`: a nested tensor's whole storage is copied,
// its sizes, strides and offsets stay as they are.
at::Tensor converted(const at::Tensor& t, c10::Device device, c10::ScalarType dtype) {
  if (!t.is_nested()) return t.to(device, dtype, /*non_blocking=*/false, /*copy=*/true);
  const auto* impl = at::native::get_nested_tensor_impl(t);
  return at::native::wrap_buffer(impl->get_unsafe_storage_as_tensor().to(device, dtype, false, true),
                                 impl->get_nested_sizes().clone(), impl->get_nested_strides().clone(),
                                 impl->get_storage_offsets().clone());
}

c10::IValue moved(const c10::IValue& v, c10::Device device) {
  if (v.isTensor()) {
    const at::Tensor& t = v.toTensor();
    return t.defined() && t.device() != device ? converted(t, device, t.scalar_type()) : t;
  }
  if (v.isList()) {  // Tensor[] and Tensor?[]
    auto list = v.toList();
    c10::impl::GenericList out(list.elementType());
    for (const c10::IValue& element : list) out.push_back(moved(element, device));
    return out;
  }
  return v;
}

c10::Device with_index(c10::Device device) {
  return device.type() == kNeuron && !device.has_index() ? c10::Device(kNeuron, current_device()) : device;
}

// Views, and the accessors of a nested tensor's metadata (host tensors on every device): PyTorch's
// nested kernels touch no element on the device.
bool runs_as_on_the_cpu(const c10::FunctionSchema& schema) {
  static const std::unordered_set<std::string> metadata{"aten::_nested_tensor_size", "aten::_nested_tensor_strides",
                                                        "aten::_nested_tensor_storage_offsets"};
  if (metadata.count(schema.operator_name().name)) return true;
  for (const auto& arg : schema.arguments())
    if (arg.alias_info() && !arg.alias_info()->isWrite()) return true;
  return false;
}

// aten::_to_copy(self, dtype, layout, device, pin_memory, non_blocking, memory_format). PyTorch's
// nested _to_copy sends a copy to another device to the destination's nested kernel, so a move
// from the CPU arrives here too.
void to_copy(torch::jit::Stack* stack) {
  const auto args = torch::jit::last(*stack, 7);
  const at::Tensor self = args[0].toTensor();
  const auto dtype = args[1].toOptional<c10::ScalarType>().value_or(self.scalar_type());
  const auto device = with_index(args[3].toOptional<c10::Device>().value_or(self.device()));
  const auto format = args[6].toOptional<c10::MemoryFormat>().value_or(c10::MemoryFormat::Preserve);
  TORCH_CHECK(format == c10::MemoryFormat::Preserve || format == c10::MemoryFormat::Contiguous,
              "aten::_to_copy: nested tensors support the preserve and contiguous memory formats, "
              "not ",
              format);
  at::Tensor copy = converted(self, device, dtype);
  if (format == c10::MemoryFormat::Contiguous) copy = copy.contiguous();
  torch::jit::drop(*stack, 7);
  stack->emplace_back(std::move(copy));
}

// The operator on the host, as one kernel of the core (see run_as_kernel): arguments moved there
// (a `device` argument too), results moved to the device the operator named or else to the
// arguments' device, mutated arguments written back.
void run_on_host(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const auto& schema = op.schema();
  const size_t n = schema.arguments().size();
  const size_t returns = schema.returns().size();
  note_fallback(op, *stack, "nested tensors compute on the host");
  const std::vector<c10::IValue> originals(stack->end() - static_cast<std::ptrdiff_t>(n), stack->end());
  const auto index = device_of(*stack, n);
  run_as_kernel(op, stack, index, [&] {
    c10::Device target(kNeuron, index);
    std::vector<c10::IValue> host(n);
    for (size_t i = 0; i < n; ++i) {
      const auto& v = originals[i];
      if (schema.arguments()[i].name() == "device" && v.isDevice()) {
        target = with_index(v.toDevice());
        host[i] = c10::Device(c10::kCPU);
      } else {
        host[i] = moved(v, c10::kCPU);
      }
    }
    torch::jit::drop(*stack, n);
    stack->insert(stack->end(), host.begin(), host.end());
    op.redispatchBoxed(kNestedCpuKeys, stack);
    for (size_t j = 0; j < returns; ++j) {
      auto& result = (*stack)[stack->size() - returns + j];
      const auto* alias = schema.returns()[j].alias_info();
      std::optional<size_t> written;
      for (size_t i = 0; alias && alias->isWrite() && i < n; ++i) {
        const auto* arg_alias = schema.arguments()[i].alias_info();
        if (arg_alias && arg_alias->isWrite() && arg_alias->beforeSets() == alias->beforeSets()) written = i;
      }
      result = written ? originals[*written] : moved(result, target);
    }
    // In-place and out= operators wrote the host copies; their contents go back to the originals.
    for (size_t i = 0; i < n; ++i) {
      const auto* alias = schema.arguments()[i].alias_info();
      if (!alias || !alias->isWrite() || !originals[i].isTensor() || originals[i].toTensor().is_cpu()) continue;
      const at::Tensor& original = originals[i].toTensor();
      const at::Tensor& host_copy = host[i].toTensor();
      if (!original.is_nested()) {
        original.copy_(host_copy);
        continue;
      }
      at::native::get_nested_tensor_impl(original)->get_unsafe_storage_as_tensor().copy_(
          at::native::get_nested_tensor_impl(host_copy)->get_unsafe_storage_as_tensor());
    }
  });
}

void nested_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  if (op.schema().operator_name().name == "aten::_to_copy") return to_copy(stack);
  if (runs_as_on_the_cpu(op.schema())) return op.redispatchBoxed(kNestedCpuKeys, stack);
  run_on_host(op, stack);
}

}  // namespace

void register_nested_kernels() {
  static auto* lib = new torch::Library(torch::Library::IMPL, "aten", c10::DispatchKey::NestedTensorPrivateUse1,
                                        __FILE__, __LINE__);
  auto& dispatcher = c10::Dispatcher::singleton();
  for (const auto& name : dispatcher.getAllOpNames()) {
    const auto op = dispatcher.findOp(name);
    if (name.name.rfind("aten::", 0) != 0 || !op->hasKernelForDispatchKey(c10::DispatchKey::NestedTensorCPU) ||
        !op->hasKernelForDispatchKey(c10::DispatchKey::CompositeImplicitAutograd))
      continue;
    lib->impl(full_name(name).substr(6).c_str(), torch::CppFunction::makeFromBoxedFunction<&nested_kernel>());
  }
}

TORCH_LIBRARY_IMPL(_, NestedTensorPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&nested_kernel>());
}

}  // namespace torch_neuronx
