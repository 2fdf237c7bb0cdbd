#pragma once
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/Storage.h>

namespace torch_neuronx {
c10::DeviceAllocator* allocator();

// The storage a queued kernel works on for `storage`: the same memory, not owning it, so that
// the caller's last reference frees the block at once, in stream order (see neuron_rt::HbmPool);
// the block learns that the current stream uses it. Memory of no pool stays owned.
c10::Storage kernel_storage(const c10::Storage& storage);

// Tells the pool block of `storage` that the current stream's next kernel uses it (as
// kernel_storage does); false for memory of no pool, which the kernel must keep alive itself.
bool note_kernel_use(const c10::Storage& storage);
}  // namespace torch_neuronx
