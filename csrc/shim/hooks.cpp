// PrivateUse1 hooks: what PyTorch asks of a backend outside the dispatcher (generators,
// pinned memory and the host allocator, storage resizing for FSDP2, device of a pointer).
#include <ATen/core/CachingHostAllocator.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/CPUAllocator.h>

#include <array>
#include <cstring>
#include <mutex>
#include <unordered_map>

#include "allocator.h"
#include "device.h"
#include "generator.h"

namespace torch_neuronx {

namespace {

// Page-locked host memory is only a bookkeeping notion here: the simulated device reads
// host memory directly. Track the pointers so `is_pinned()` is truthful. It is also the device's
// at::HostAllocator (torch.accelerator.empty_host_cache, which vLLM calls at shutdown): it keeps
// no cache, so there is nothing to empty, and a queued copy into pinned memory holds the storage
// it writes, so no event needs recording before a block is freed.
class PinnedAllocator final : public at::HostAllocator {
 public:
  static PinnedAllocator& instance() {
    static auto* allocator = new PinnedAllocator();
    return *allocator;
  }

  c10::DataPtr allocate(size_t n) override {
    auto ptr = c10::GetCPUAllocator()->allocate(n);
    void* data = ptr.get();
    if (data) {
      std::lock_guard<std::mutex> lock(mu_);
      pinned_.emplace(data, n);
      stats_.active_requests.increase(1);
      stats_.active_bytes.increase(n);
      stats_.allocations.increase(1);
      stats_.allocated_bytes.increase(n);
      ++stats_.num_host_alloc;
    }
    return {data, new c10::DataPtr(std::move(ptr)), &PinnedAllocator::release, c10::Device(c10::kCPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }
  void copy_data(void* dest, const void* src, std::size_t count) const override { std::memcpy(dest, src, count); }
  bool is_pinned(const void* p) {
    std::lock_guard<std::mutex> lock(mu_);
    return pinned_.count(p) != 0;
  }

  bool record_event(void* ptr, void* ctx, c10::Stream stream) override { return is_pinned(ptr); }
  void empty_cache() override {}
  at::HostStats get_stats() override {
    std::lock_guard<std::mutex> lock(mu_);
    return stats_;
  }
  void reset_accumulated_stats() override {
    std::lock_guard<std::mutex> lock(mu_);
    for (c10::CachingAllocator::Stat* stat : kept()) stat->reset_accumulated();
    stats_.num_host_alloc = stats_.num_host_free = 0;
  }
  void reset_peak_stats() override {
    std::lock_guard<std::mutex> lock(mu_);
    for (c10::CachingAllocator::Stat* stat : kept()) stat->reset_peak();
  }

 private:
  // The statistics kept (nothing is cached: every block is active).
  std::array<c10::CachingAllocator::Stat*, 4> kept() {
    return {&stats_.active_requests, &stats_.active_bytes, &stats_.allocations, &stats_.allocated_bytes};
  }

  static void release(void* ctx) {
    auto* ptr = static_cast<c10::DataPtr*>(ctx);
    {
      auto& self = instance();
      std::lock_guard<std::mutex> lock(self.mu_);
      // A zero-byte block has no pointer: it was never tracked.
      if (auto it = self.pinned_.find(ptr->get()); it != self.pinned_.end()) {
        self.stats_.active_requests.decrease(1);
        self.stats_.active_bytes.decrease(it->second);
        self.stats_.allocations.decrease(1);
        self.stats_.allocated_bytes.decrease(it->second);
        ++self.stats_.num_host_free;
        self.pinned_.erase(it);
      }
    }
    delete ptr;
  }

  std::mutex mu_;
  std::unordered_map<const void*, size_t> pinned_;  // pointer -> bytes
  at::HostStats stats_;
};

struct NeuronHooks final : public at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return neuron_rt::Runtime::get().device_count() > 0; }
  const at::Generator& getDefaultGenerator(c10::DeviceIndex device) const override { return default_generator(device); }
  at::Generator getNewGenerator(c10::DeviceIndex device) const override { return new_generator(device); }
  at::Device getDeviceFromPtr(void* data) const override {
    auto& rt = neuron_rt::Runtime::get();
    for (int i = 0; i < rt.device_count(); ++i)
      if (rt.core_initialized(i) && core(i).pool.owns(data)) return at::Device(kNeuron, i);
    TORCH_CHECK(false, "pointer ", data, " is not in the memory of any neuron device");
  }
  bool isPinnedPtr(const void* data) const override { return PinnedAllocator::instance().is_pinned(data); }
  at::Allocator* getPinnedMemoryAllocator() const override { return &PinnedAllocator::instance(); }
  bool hasPrimaryContext(c10::DeviceIndex device) const override {
    return neuron_rt::Runtime::get().core_initialized(device);
  }
  c10::DeviceIndex deviceCount() const override {
    return static_cast<c10::DeviceIndex>(neuron_rt::Runtime::get().device_count());
  }
  void setCurrentDevice(c10::DeviceIndex device) const override { set_current_device(device); }
  c10::DeviceIndex getCurrentDevice() const override { return current_device(); }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex device) const override {
    const auto old = current_device();
    set_current_device(device);
    return old;
  }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex device) const override { return exchangeDevice(device); }
  // FSDP2 frees and re-materializes parameter storage in place.
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t newsize) const override {
    const auto device = storage.device().index();
    synchronize_device(device);
    const c10::DeviceGuard guard(storage.device());
    c10::DataPtr fresh = allocator()->allocate(newsize);
    const size_t keep = std::min(newsize, storage.nbytes());
    if (keep) std::memcpy(fresh.get(), storage.data(), keep);
    const_cast<c10::Storage&>(storage).set_data_ptr_noswap(std::move(fresh));
    const_cast<c10::Storage&>(storage).set_nbytes(newsize);
  }
};

struct RegisterHooks {
  RegisterHooks() {
    at::RegisterPrivateUse1HooksInterface(new NeuronHooks());
    at::setHostAllocator(at::kPrivateUse1, &PinnedAllocator::instance());
  }
} register_hooks;

}  // namespace
}  // namespace torch_neuronx
