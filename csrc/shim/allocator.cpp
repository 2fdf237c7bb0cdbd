// The c10::DeviceAllocator for neuron: hands out blocks of the current core's HBM pool, so
// `torch.accelerator.memory_*` and `torch.neuron.memory_*` read the pool's statistics.
#include <c10/core/CachingDeviceAllocator.h>

#include <cstring>

#include "allocator.h"
#include "device.h"

namespace torch_neuronx {

namespace {

void delete_block(void* ctx) {
  auto* block = static_cast<neuron_rt::Block*>(ctx);
  block->pool->free(block);
}

c10::CachingAllocator::Stat to_c10(const neuron_rt::Stat& s) {
  c10::CachingAllocator::Stat out;
  out.current = s.current;
  out.peak = s.peak;
  out.allocated = s.allocated;
  out.freed = s.freed;
  return out;
}

void fill(c10::CachingAllocator::StatArray& array, const neuron_rt::PoolStat& s) {
  using c10::CachingAllocator::StatType;
  array[static_cast<size_t>(StatType::AGGREGATE)] = to_c10(s.all);
  array[static_cast<size_t>(StatType::SMALL_POOL)] = to_c10(s.small_pool);
  array[static_cast<size_t>(StatType::LARGE_POOL)] = to_c10(s.large_pool);
}

class NeuronAllocator final : public c10::DeviceAllocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override {
    const auto device = current_device();
    const c10::Device dev(kNeuron, device);
    if (nbytes == 0) return c10::DataPtr(nullptr, dev);
    auto& c = core(device);
    neuron_rt::Block* block = nullptr;
    try {
      block = c.pool.allocate(nbytes);
    } catch (const neuron_rt::OutOfMemory& e) {
      TORCH_CHECK_WITH(OutOfMemoryError, false, e.what());
    }
    return c10::DataPtr(block->ptr, block, &delete_block, dev);
  }

  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    std::memcpy(dest, src, count);
  }

  bool initialized() override { return neuron_rt::Runtime::get().is_initialized(); }

  void emptyCache(c10::MempoolId_t) override {
    auto& rt = neuron_rt::Runtime::get();
    for (int i = 0; i < rt.device_count(); ++i)
      if (rt.core_initialized(i)) core(i).pool.empty_cache();
  }

  // Kernels hold references to every tensor they touch until they have executed, so a
  // block can never be reused while a stream still uses it: nothing to record.
  void recordStream(const c10::DataPtr&, c10::Stream) override {}

  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex device) override {
    c10::CachingDeviceAllocator::DeviceStats out;
    if (!neuron_rt::Runtime::get().core_initialized(device)) return out;
    const auto s = core(device).pool.stats();
    fill(out.allocation, s.allocation);
    fill(out.segment, s.segment);
    fill(out.active, s.active);
    fill(out.allocated_bytes, s.allocated_bytes);
    fill(out.reserved_bytes, s.reserved_bytes);
    fill(out.active_bytes, s.active_bytes);
    fill(out.requested_bytes, s.requested_bytes);
    out.num_alloc_retries = s.num_alloc_retries;
    out.num_ooms = s.num_ooms;
    out.num_device_alloc = s.num_device_alloc;
    out.num_device_free = s.num_device_free;
    return out;
  }

  void resetAccumulatedStats(c10::DeviceIndex device) override {
    if (neuron_rt::Runtime::get().core_initialized(device)) core(device).pool.reset_accumulated();
  }

  void resetPeakStats(c10::DeviceIndex device) override {
    if (neuron_rt::Runtime::get().core_initialized(device)) core(device).pool.reset_peak();
  }

  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) override {
    auto& pool = core(device).pool;
    const size_t capacity = pool.capacity(), reserved = pool.reserved();
    return {capacity > reserved ? capacity - reserved : 0, capacity};
  }
};

NeuronAllocator g_allocator;

}  // namespace

c10::DeviceAllocator* allocator() { return &g_allocator; }

REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, &g_allocator);

}  // namespace torch_neuronx
