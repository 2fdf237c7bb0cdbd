// The operators every backend must provide itself: allocation, views, resize/set, copies
// across the host/device boundary and reading a scalar. Everything else goes through the
// lowering table (native_kernel/) or the CPU fallback.
#include <ATen/EmptyTensor.h>
#include <ATen/native/Resize.h>
#include <ATen/native/TensorFactories.h>
#include <ATen/ops/as_strided_cpu_dispatch.h>
#include <ATen/ops/set_cpu_dispatch.h>
#include <ATen/ops/set_native.h>
#include <ATen/ops/view_native.h>
#include <ATen/ops/unfold_native.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/_to_copy_native.h>
#include <ATen/ops/clone_native.h>
#include <ATen/ops/view_as_complex_native.h>
#include <ATen/ops/view_as_real_native.h>
#include <torch/library.h>

#include "adaptive/adaptive.h"
#include "allocator.h"
#include "device.h"
#include "host_aliases.h"
#include "launch.h"
#include "native_kernel/native_kernel.h"
#include "op_tracking.h"
#include "profiler/profiler.h"

namespace torch_neuronx {

namespace {

c10::DeviceIndex device_index_or_current(std::optional<c10::Device> device) {
  return device && device->has_index() ? device->index() : current_device();
}

void check_factory_args(std::optional<c10::Layout> layout, std::optional<bool> pin_memory, const char* op) {
  TORCH_CHECK(c10::layout_or_default(layout) == c10::Layout::Strided, op,
              ": the neuron device supports only strided tensors (got layout ", c10::layout_or_default(layout),
              "). Sparse tensors must stay on the CPU.");
  TORCH_CHECK(!c10::pinned_memory_or_default(pin_memory), op, ": pin_memory=True applies to CPU tensors only.");
}

at::Tensor empty_memory_format(c10::IntArrayRef size, std::optional<c10::ScalarType> dtype,
                               std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                               std::optional<bool> pin_memory, std::optional<c10::MemoryFormat> memory_format) {
  check_factory_args(layout, pin_memory, "aten::empty");
  const auto scalar_type = c10::dtype_or_default(dtype);
  check_supported_dtype(scalar_type, "aten::empty");
  const c10::DeviceGuard guard(c10::Device(kNeuron, device_index_or_current(device)));
  return at::detail::empty_generic(size, allocator(), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), scalar_type,
                                   memory_format);
}

at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride, std::optional<c10::ScalarType> dtype,
                         std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                         std::optional<bool> pin_memory) {
  check_factory_args(layout, pin_memory, "aten::empty_strided");
  const auto scalar_type = c10::dtype_or_default(dtype);
  check_supported_dtype(scalar_type, "aten::empty_strided");
  const c10::DeviceGuard guard(c10::Device(kNeuron, device_index_or_current(device)));
  return at::detail::empty_strided_generic(size, stride, allocator(),
                                           c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), scalar_type);
}

at::Tensor as_strided(const at::Tensor& self, c10::SymIntArrayRef size, c10::SymIntArrayRef stride,
                      std::optional<c10::SymInt> storage_offset) {
  return at::native::as_strided_tensorimpl(self, C10_AS_INTARRAYREF_SLOW(size), C10_AS_INTARRAYREF_SLOW(stride),
                                           storage_offset ? std::optional<int64_t>(storage_offset->expect_int())
                                                          : std::nullopt);
}

at::Tensor view(const at::Tensor& self, c10::SymIntArrayRef size) {
  return at::native::view(self, C10_AS_INTARRAYREF_SLOW(size));
}

at::Tensor reshape_alias(const at::Tensor& self, c10::SymIntArrayRef size, c10::SymIntArrayRef stride) {
  return at::native::_reshape_alias(self, C10_AS_INTARRAYREF_SLOW(size), C10_AS_INTARRAYREF_SLOW(stride));
}

at::Tensor unfold(const at::Tensor& self, int64_t dim, int64_t size, int64_t step) {
  return at::native::unfold(self, dim, size, step);
}

const at::Tensor& resize_(const at::Tensor& self, c10::SymIntArrayRef size,
                          std::optional<c10::MemoryFormat> memory_format) {
  const c10::DeviceGuard guard(self.device());
  // Growing a non-empty buffer reallocates and copies the old bytes on the host: queued
  // kernels must be done with the old buffer first.
  const auto sizes = C10_AS_INTARRAYREF_SLOW(size);
  const size_t needed = at::detail::computeStorageNbytesContiguous(sizes, self.dtype().itemsize(),
                                                                   self.storage_offset());
  if (self.storage().nbytes() > 0 && needed > self.storage().nbytes()) synchronize_device(self.device().index());
  return at::native::resize_(self, sizes, memory_format);
}

at::Tensor& set_source_tensor(at::Tensor& self, const at::Tensor& source) {
  return at::native::set_tensor_(self, source);
}

at::Tensor& set_source_storage(at::Tensor& self, c10::Storage source) { return at::native::set_(self, source); }

at::Tensor& set_source_storage_offset(at::Tensor& self, c10::Storage storage, c10::SymInt offset,
                                      c10::SymIntArrayRef size, c10::SymIntArrayRef stride) {
  return at::cpu::set_(self, storage, offset.expect_int(), C10_AS_INTARRAYREF_SLOW(size),
                       C10_AS_INTARRAYREF_SLOW(stride));
}

at::Tensor& set_empty(at::Tensor& self) {
  const c10::DeviceGuard guard(self.device());
  c10::Storage storage(c10::Storage::use_byte_size_t(), 0, allocator(), true);
  return at::cpu::set_(self, storage, 0, {0}, {});
}

// Under adaptive eager a clone (contiguous, reshape of a transposed tensor) and a cast between
// float32, bfloat16 and float16 on one core are planned calls that a segment holds like the
// operators around them; otherwise, as PyTorch composes them, a new tensor and a copy into it (a
// copy ends a segment, and a fused kernel cannot take a tensor made inside it by anything but a
// call).
bool fusable_float(c10::ScalarType dtype) {
  return dtype == at::kFloat || dtype == at::kHalf || dtype == at::kBFloat16;
}

at::Tensor clone(const at::Tensor& self, std::optional<c10::MemoryFormat> memory_format) {
  if (adaptive::enabled() && !self.is_neg() && fusable_float(self.scalar_type()))
    return clone_as_planned_call(self, memory_format);
  return at::native::clone(self, memory_format);
}

at::Tensor to_copy(const at::Tensor& self, std::optional<at::ScalarType> dtype, std::optional<at::Layout> layout,
                   std::optional<at::Device> device, std::optional<bool> pin_memory, bool non_blocking,
                   std::optional<at::MemoryFormat> memory_format) {
  const auto target = dtype.value_or(self.scalar_type());
  if (adaptive::enabled() && !self.is_neg() && fusable_float(self.scalar_type()) && fusable_float(target) &&
      layout.value_or(at::kStrided) == at::kStrided && device.value_or(self.device()) == self.device() &&
      !pin_memory.value_or(false))
    return cast_as_planned_call(self, target, non_blocking, memory_format);
  return at::native::_to_copy(self, dtype, layout, device, pin_memory, non_blocking, memory_format);
}

// Copies between host and device, or between cores. Host to device stages the source so
// the caller may reuse its buffer at once and the copy stays ordered on the queue; device
// to host waits for the current stream, as a blocking cudaMemcpy does, except into pinned
// memory with non_blocking=True.
at::Tensor copy_from(const at::Tensor& src, const at::Tensor& dst, bool non_blocking) {
  static const c10::OperatorHandle copy_op = c10::Dispatcher::singleton().findSchemaOrThrow("aten::_copy_from", "");
  track_kernel(copy_op, /*on_cpu=*/false);
  // The one launch below carries the copy's description, while profiling.
  auto copy = [described = profiler::describe_launch({src}, {dst})](const char* name, neuron_rt::HostWork host,
                                                                    Launch::Completion completion = Launch::kQueued) {
    return Launch{.name = name, .host = host, .completion = completion, .described = described};
  };
  if (src.is_cpu()) {
    auto staging = src.clone();
    launch(dst.device().index(), [dst = snapshot(dst), staging] { host_alias(dst).copy_(staging); },
           copy("aten::_copy_from (host to device)", neuron_rt::HostWork::kFollow));
  } else if (dst.is_cpu() && non_blocking && dst.is_pinned()) {
    // As cudaMemcpyAsync into page-locked memory: queued on the current stream, the caller goes
    // on; the data is there once the stream is synchronized or an event recorded after it completes.
    // The kernel writes through its own tensor on dst's memory: dst's metadata is the caller's.
    launch(src.device().index(), [src = snapshot(src), dst = tensor_on(dst.storage(), c10::DispatchKey::CPU, dst)] {
      dst.copy_(host_alias(src));
    }, copy("aten::_copy_from (device to host, non-blocking)", neuron_rt::HostWork::kFollow));
  } else if (dst.is_cpu()) {
    const auto device = src.device().index();
    // Below ATen's parallel grain the copy runs on one thread: on an idle core, right here.
    const auto host = dst.numel() <= at::internal::GRAIN_SIZE ? neuron_rt::HostWork::kSerial
                                                              : neuron_rt::HostWork::kFollow;
    launch(device, [&] { dst.copy_(host_alias(src)); },
           copy("aten::_copy_from (device to host)", host, Launch::kWaited));
    raise_pending_error(core(device));
  } else if (src.device() == dst.device()) {
    Snapshots take;  // x.copy_(x) stays one tensor for the kernel
    launch(dst.device().index(), [src = take(src), dst = take(dst)] {
      HostAliases alias;
      alias(dst).copy_(alias(src));
    }, copy("aten::_copy_from (device to device)", neuron_rt::HostWork::kFollow));
  } else {
    // Core to core: the source core must have produced the data before the target reads it.
    synchronize_device(src.device().index());
    launch(dst.device().index(), [&] { host_alias(dst).copy_(host_alias(src)); },
           copy("aten::_copy_from (core to core)", neuron_rt::HostWork::kNever, Launch::kWaited));
  }
  return dst;
}

// The CPU fallback's way back for out= arguments. An output the CPU kernel resized ends with the
// layout the kernel chose (LAPACK operators make theirs column-major); otherwise it keeps its
// own strides (it may be a view into a larger tensor).
at::Tensor copy_from_and_resize(const at::Tensor& src, const at::Tensor& dst) {
  if (dst.sizes() != src.sizes()) {  // the kernel resized the output: adopt its layout too
    resize_(dst, src.sym_sizes(), std::nullopt);
    if (src.is_non_overlapping_and_dense()) {
      if (dst.strides() != src.strides())
        const_cast<at::Tensor&>(dst).as_strided_(src.sizes(), src.strides(), dst.storage_offset());
    } else {  // a view into a larger buffer (linalg_lstsq's solution in LAPACK's workspace)
      const c10::SymInt numel(static_cast<int64_t>(src.storage().nbytes() / src.itemsize()));
      if (dst.storage().nbytes() < src.storage().nbytes()) resize_(dst, {numel}, std::nullopt);
      const_cast<at::Tensor&>(dst).as_strided_(src.sizes(), src.strides(), src.storage_offset());
    }
  }
  return copy_from(src, dst, false);
}

at::Scalar local_scalar_dense(const at::Tensor& self) {
  const auto device = self.device().index();
  at::Scalar value;
  launch(device, [&] { value = at::_local_scalar_dense(host_alias(self)); },
         {.name = "aten::_local_scalar_dense", .host = neuron_rt::HostWork::kSerial, .completion = Launch::kWaited});
  raise_pending_error(core(device));
  return value;
}

// Lets `module.to("neuron")` swap parameter data in place (`param.data = ...`), as for CUDA,
// so tied parameters stay tied. PyTorch's built-in rule knows only its own dense backends.
bool has_compatible_shallow_copy_type(const at::Tensor& self, const at::Tensor& from) {
  auto dense = [](const at::Tensor& t) {
    return t.layout() == at::kStrided && (t.is_cpu() || t.device().type() == kNeuron);
  };
  return dense(self) && dense(from);
}

// As on CUDA: the block waits for `stream`'s kernels too when it is freed. Launches note the
// streams that use a block by themselves, so this is needed only for work the shim does not see.
void record_stream(at::Tensor& self, c10::Stream stream) {
  allocator()->recordStream(self.storage().data_ptr(), stream);
}

}  // namespace

// The copies honour a lazy conjugate or negation themselves (the host aliases carry the bits), as
// copy_ does: without this PyTorch's fallback for those bits resolves the source by cloning it,
// which copies it again, without end.
TORCH_LIBRARY_IMPL(aten, Conjugate, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(aten, Negative, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("record_stream", record_stream);
  m.impl("_has_compatible_shallow_copy_type", has_compatible_shallow_copy_type);
  m.impl("empty.memory_format", empty_memory_format);
  m.impl("empty_strided", empty_strided);
  m.impl("as_strided", as_strided);
  m.impl("view", view);
  m.impl("_reshape_alias", reshape_alias);
  m.impl("unfold", unfold);
  m.impl("view_as_real", at::native::view_as_real);
  m.impl("view_as_complex", at::native::view_as_complex);
  m.impl("resize_", resize_);
  m.impl("set_.source_Tensor", set_source_tensor);
  m.impl("set_.source_Storage", set_source_storage);
  m.impl("set_.source_Storage_storage_offset", set_source_storage_offset);
  m.impl("set_", set_empty);
  m.impl("clone", clone);
  m.impl("_to_copy", to_copy);
  m.impl("_copy_from", copy_from);
  m.impl("_copy_from_and_resize", copy_from_and_resize);
  m.impl("_local_scalar_dense", local_scalar_dense);
}

}  // namespace torch_neuronx
