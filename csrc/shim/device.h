// The neuron device as PyTorch sees it: the current device/stream of this thread, access to the
// runtime core behind a device, synchronization and the deferred errors and warnings of kernels.
#pragma once

#include <ATen/ATen.h>
#include <c10/core/Stream.h>

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

// Whether the calling thread is running a kernel of `index` (a CPU fallback resizing an output).
// Then a synchronization has nothing to wait for: the kernels before it have run, the ones after
// it cannot start; and more work for the core runs at once, in order.
bool inside_kernel_of(c10::DeviceIndex index);

// Wait for `stream` (or the whole device) and raise any deferred kernel error.
void synchronize_stream(const c10::Stream& stream);
void synchronize_device(c10::DeviceIndex index);
void raise_pending_error(neuron_rt::Core& core);  // and deliver its queued kernels' warnings
// Re-raises, on the calling thread, the warnings kernels of `index` raised on its worker.
void deliver_kernel_warnings(c10::DeviceIndex index);
// Run by each core's worker thread when it starts (neuron_rt::set_worker_start): its kernels'
// warnings are kept for deliver_kernel_warnings.
void setup_worker_thread();

}  // namespace torch_neuronx
