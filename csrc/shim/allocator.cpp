// The c10::DeviceAllocator for neuron: hands out blocks of the current core's HBM pool, so
// `torch.accelerator.memory_*` and `torch.neuron.memory_*` read the pool's statistics.
#include <c10/core/CachingDeviceAllocator.h>

#include <cstring>

#include "allocator.h"
#include "device.h"
#include "launch.h"

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

neuron_rt::Block* block_of(const c10::DataPtr& data) {
  return data.get_deleter() == &delete_block ? static_cast<neuron_rt::Block*>(data.get_context()) : nullptr;
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
    // A kernel allocating as it runs is on no stream of the host's; a host thread allocates for
    // its current stream, and waits for the queue when only memory queued kernels use is left.
    const bool in_kernel = neuron_rt::executing_device() >= 0;
    const int stream = in_kernel ? neuron_rt::kNoStream : static_cast<int>(current_stream(device).id());
    neuron_rt::Block* block = nullptr;
    try {
      block = c.pool.allocate(nbytes, stream, /*may_wait=*/!in_kernel);
      if (!block) {
        wait_for_queue(device);
        block = c.pool.allocate(nbytes, stream);
      }
    } catch (const neuron_rt::OutOfMemory& e) {
      TORCH_CHECK_WITH(OutOfMemoryError, false, e.what());
    }
    return c10::DataPtr(block->ptr, block, &delete_block, dev);
  }

  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }

  void copy_data(void* dest, const void* src, std::size_t count) const override { std::memcpy(dest, src, count); }

  bool initialized() override { return neuron_rt::Runtime::get().is_initialized(); }

  // As CUDA's, waits for the queued kernels first, so that the blocks they use are released too.
  void emptyCache(c10::MempoolId_t) override {
    auto& rt = neuron_rt::Runtime::get();
    for (int i = 0; i < rt.device_count(); ++i) {
      if (!rt.core_initialized(i)) continue;
      wait_for_queue(i);
      core(i).pool.empty_cache();
    }
  }

  void recordStream(const c10::DataPtr& data, c10::Stream stream) override {
    if (auto* block = block_of(data)) block->pool->note_use(block, static_cast<int>(stream.id()));
  }

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

bool note_kernel_use(const c10::Storage& storage) {
  const c10::DataPtr& data = storage.data_ptr();
  neuron_rt::Block* block = block_of(data);
  if (!block) return false;
  // A kernel running now (a fallback asking its core for more work) uses it before anything
  // queued after it: no stream to note.
  if (neuron_rt::executing_device() < 0)
    block->pool->note_use(block, static_cast<int>(current_stream(data.device().index()).id()));
  return true;
}

c10::Storage kernel_storage(const c10::Storage& storage) {
  const c10::DataPtr& data = storage.data_ptr();
  if (!note_kernel_use(storage)) return storage;  // memory of no pool (empty storages): the kernel keeps it alive
  return c10::Storage(c10::Storage::use_byte_size_t(), storage.nbytes(), c10::DataPtr(data.get(), data.device()),
                      nullptr, false);
}

REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, &g_allocator);

}  // namespace torch_neuronx
