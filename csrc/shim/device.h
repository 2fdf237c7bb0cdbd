// Shared pieces of the PyTorch shim: the current device/stream of this thread, access to
// the runtime core behind a neuron device, and host aliases of device memory.
#pragma once

#include <ATen/ATen.h>
#include <c10/core/Stream.h>

#include <functional>
#include <memory>
#include <string>

#include "../runtime/runtime.h"

namespace torch_neuronx {

constexpr c10::DeviceType kNeuron = c10::DeviceType::PrivateUse1;

c10::DeviceIndex current_device();
void set_current_device(c10::DeviceIndex index);
c10::Stream current_stream(c10::DeviceIndex index);
void set_current_stream(const c10::Stream& stream);

// Refuses dtypes the device does not hold (complex, quantized), naming the operation.
void check_supported_dtype(c10::ScalarType dtype, const std::string& op);

// The runtime core of a device; translates runtime exceptions into PyTorch errors. The first
// call switches autograd multithreading off for the calling thread, unless disabled below.
neuron_rt::Core& core(c10::DeviceIndex index);
void set_calling_thread_backward(bool enabled);

// Wait for `stream` (or the whole device) and raise any deferred kernel error.
void synchronize_stream(const c10::Stream& stream);
void synchronize_device(c10::DeviceIndex index);
void raise_pending_error(neuron_rt::Core& core);  // and deliver its queued kernels' warnings
// Re-raises, on the calling thread, the warnings kernels of `index` raised on its worker.
void deliver_kernel_warnings(c10::DeviceIndex index);
// Run by each core's worker thread when it starts (neuron_rt::set_worker_start): its kernels'
// warnings are kept for deliver_kernel_warnings.
void setup_worker_thread();

// Called by host threads about to wait for a core: releases the calling thread's idle OpenMP
// threads (see device.cpp), so kernels on the core's worker run at full speed.
void release_host_openmp_threads();

// The worker's counterpart, run when a host thread claims the compute threads (HostWork::kClaim).
void release_worker_openmp_threads();

// Launch a kernel on the current stream of `device`. Honors NEURON_LAUNCH_BLOCKING. `host`: when
// the kernel may run on the calling thread instead, if the core is idle — the same order and
// deferred errors, without the hand-off to the worker.
void launch(c10::DeviceIndex device, std::function<void()> fn, std::string name,
            neuron_rt::HostWork host = neuron_rt::HostWork::kNever);
// Run `fn` as a kernel on the calling thread if the core takes it there now (`host`), and say
// whether it did; if not, nothing was launched. For callers whose queued kernel needs more than
// the inline one (copies of what the caller may change), so they pay for it only when queued.
bool launch_inline(c10::DeviceIndex device, const std::function<void()>& fn, const std::string& name,
                   neuron_rt::HostWork host);
// Runs `f` with the interpreter lock released if the calling thread holds it: waiting on the
// queue must not hold it, as Python kernels (compiled graphs, kernel-language ops) take it to run.
void without_gil(const std::function<void()>& f);

// Launch and wait for that kernel; its exception is rethrown here rather than deferred.
void launch_and_wait(c10::DeviceIndex device, std::function<void()> fn, std::string name,
                     neuron_rt::HostWork host = neuron_rt::HostWork::kNever);

// The launching Python stack, when TORCH_NEURONX_ENABLE_STACK_TRACE=1 (else empty).
std::string launch_stack();
void set_capture_stack(bool enabled);

// A tensor of dispatch key `key` on `storage`, with `like`'s dtype, sizes, strides and offset.
at::Tensor tensor_on(c10::Storage storage, c10::DispatchKey key, const at::Tensor& like);

// A tensor on `t`'s memory with its current sizes, strides and offset, so a queued kernel sees
// the tensor as it was at launch even if the caller then changes its metadata in place
// (squeeze_, t_, as_strided_, set_). It does not own the memory (kernel_storage): the caller's
// `del` frees it at once, in stream order. Lists and other values pass through.
at::Tensor snapshot(const at::Tensor& t);

// snapshot() of every argument of one launch: an argument passed twice (add(x, y, out=x)) stays
// one tensor for the kernel, so PyTorch's identity checks see what the caller passed, and views
// of one storage share one, so its overlap checks see their aliasing.
class Snapshots {
 public:
  at::Tensor operator()(const at::Tensor& t);
  c10::IValue operator()(const c10::IValue& v);

 private:
  std::vector<std::pair<const c10::TensorImpl*, at::Tensor>> seen_;
  std::vector<std::pair<const c10::StorageImpl*, c10::Storage>> storages_;
};

// A CPU tensor viewing the same bytes as a device tensor. Only kernels (code running on
// the hardware queue, or on the host after a synchronization) may use it.
at::Tensor host_alias(const at::Tensor& device_tensor);

// Memoizes aliases per storage within one kernel, so aliasing between arguments (views of
// one buffer) stays visible to the CPU kernels' overlap checks, and per tensor, so an argument
// passed twice is one host tensor (PyTorch tells "the same tensor" from "overlapping views").
class HostAliases {
 public:
  // `resizable`: a kernel may grow an alias's storage, which then moves to host memory (the
  // caller copies it back to the device; see NativeKernel::build).
  explicit HostAliases(bool resizable = false) : resizable_(resizable) {}
  at::Tensor operator()(const at::Tensor& device_tensor);

 private:
  bool resizable_;
  at::Tensor alias_of(const at::Tensor& device_tensor);
  std::vector<std::pair<const c10::StorageImpl*, c10::Storage>> storages_;
  std::vector<std::pair<const c10::TensorImpl*, at::Tensor>> tensors_;
};

}  // namespace torch_neuronx
