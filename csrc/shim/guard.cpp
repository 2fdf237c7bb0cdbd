// Device guard: current device and stream per thread, streams and events on the runtime's
// hardware queues. Everything generic in PyTorch (torch.Stream, torch.Event,
// torch.accelerator, autograd's device threads) reaches neuron through this class.
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <memory>
#include <mutex>
#include <vector>

#include "adaptive/adaptive.h"
#include "device.h"
#include "launch.h"
#include "openmp.h"

namespace torch_neuronx {

namespace {

using EventPtr = std::shared_ptr<neuron_rt::Event>;

// Streams come from a pool per device and priority, as CUDA's do (torch.Stream(),
// torch.neuron.Stream() and c10's getStreamFromGlobalPool alike): libraries create streams per
// call, and each stream of a core is scanned by its queue for as long as the process lives.
// A pool's streams are created on first use and handed out round-robin.
constexpr int kStreamsPerPool = 32;

c10::Stream pooled_stream(c10::Device d, bool high_priority) {
  if (!d.has_index()) d = c10::Device(kNeuron, current_device());
  auto& c = core(d.index());  // checks the index
  static std::mutex mu;
  static std::vector<std::vector<int>> pools[2];  // [priority][device] -> stream ids
  static std::vector<size_t> next[2];
  std::lock_guard<std::mutex> lock(mu);
  auto& pool = pools[high_priority];
  if (pool.size() <= static_cast<size_t>(d.index())) {
    pool.resize(d.index() + 1);
    next[high_priority].resize(d.index() + 1, 0);
  }
  auto& ids = pool[d.index()];
  const size_t slot = next[high_priority][d.index()]++ % kStreamsPerPool;
  if (slot == ids.size()) ids.push_back(c.queue.create_stream(high_priority ? -1 : 0));
  return c10::Stream(c10::Stream::UNSAFE, d, ids[slot]);
}

class NeuronGuardImpl final : public c10::impl::DeviceGuardImplInterface {
 public:
  c10::DeviceType type() const override { return kNeuron; }

  c10::Device exchangeDevice(c10::Device d) const override {
    const auto old = current_device();
    if (d.index() != old) set_current_device(d.index());
    return c10::Device(kNeuron, old);
  }
  c10::Device getDevice() const override { return c10::Device(kNeuron, current_device()); }
  void setDevice(c10::Device d) const override { set_current_device(d.index()); }
  void uncheckedSetDevice(c10::Device d) const noexcept override {
    try {
      set_current_device(d.index());
    } catch (...) {
    }
  }
  c10::DeviceIndex deviceCount() const noexcept override {
    return static_cast<c10::DeviceIndex>(neuron_rt::Runtime::get().device_count());
  }

  c10::Stream getStream(c10::Device d) const override {
    return current_stream(d.has_index() ? d.index() : current_device());
  }
  c10::Stream getDefaultStream(c10::Device d) const override {
    return c10::Stream(c10::Stream::UNSAFE, c10::Device(kNeuron, d.has_index() ? d.index() : current_device()), 0);
  }
  c10::Stream getNewStream(c10::Device d, int priority) const override { return pooled_stream(d, priority < 0); }
  c10::Stream getStreamFromGlobalPool(c10::Device d, bool high_priority) const override {
    return pooled_stream(d, high_priority);
  }
  c10::Stream exchangeStream(c10::Stream s) const override {
    const auto old = current_stream(s.device_index());
    set_current_stream(s);
    return old;
  }

  void record(void** event, const c10::Stream& stream, const c10::DeviceIndex device_index,
              const c10::EventFlag flag) const override {
    TORCH_CHECK(device_index == -1 || device_index == stream.device_index(), "Event device index ",
                static_cast<int>(device_index),
                " does not match recording "
                "stream's device index ",
                static_cast<int>(stream.device_index()), ".");
    auto*& holder = reinterpret_cast<EventPtr*&>(*event);
    if (!holder)
      holder = new EventPtr(
          std::make_shared<neuron_rt::Event>(stream.device_index(), flag == c10::EventFlag::BACKEND_DEFAULT));
    TORCH_CHECK((*holder)->device == stream.device_index(), "Event recorded on neuron:", (*holder)->device,
                " cannot be recorded on a stream of neuron:", static_cast<int>(stream.device_index()));
    adaptive::end_segment(stream.device_index());
    core(stream.device_index()).queue.record(static_cast<int>(stream.id()), *holder);
  }
  void block(void* event, const c10::Stream& stream) const override {
    if (!event) return;
    adaptive::end_segment(stream.device_index());
    core(stream.device_index()).queue.wait(static_cast<int>(stream.id()), *static_cast<EventPtr*>(event));
  }
  bool queryEvent(void* event) const override { return !event || (*static_cast<EventPtr*>(event))->query(); }
  void synchronizeEvent(void* event) const override {
    if (!event) return;
    const auto& e = *static_cast<EventPtr*>(event);
    auto& c = core(e->device);
    adaptive::end_segment(static_cast<c10::DeviceIndex>(e->device));
    release_host_openmp_threads();
    without_gil([&] { c.queue.wait_event(*e); });
    raise_pending_error(c);
  }
  void destroyEvent(void* event, const c10::DeviceIndex) const noexcept override {
    delete static_cast<EventPtr*>(event);
  }
  double elapsedTime(void* start, void* end, const c10::DeviceIndex) const override {
    TORCH_CHECK(start && end, "Both events must be recorded before calculating elapsed time.");
    const auto& a = *static_cast<EventPtr*>(start);
    const auto& b = *static_cast<EventPtr*>(end);
    TORCH_CHECK(a->timing && b->timing, "Both events must be created with argument 'enable_timing=True'.");
    TORCH_CHECK(a->query() && b->query(),
                "Both events must be completed before calculating elapsed time; call "
                "event.synchronize() first.");
    return static_cast<double>(b->timestamp.load() - a->timestamp.load()) / 1e6;
  }

  bool queryStream(const c10::Stream& stream) const override {
    adaptive::end_segment(stream.device_index());
    return core(stream.device_index()).queue.query_stream(static_cast<int>(stream.id()));
  }
  void synchronizeStream(const c10::Stream& stream) const override { synchronize_stream(stream); }
  void synchronizeDevice(const c10::DeviceIndex index) const override {
    synchronize_device(index < 0 ? current_device() : index);
  }
  void recordDataPtrOnStream(const c10::DataPtr&, const c10::Stream&) const override {}
};

}  // namespace

C10_REGISTER_GUARD_IMPL(PrivateUse1, NeuronGuardImpl);

}  // namespace torch_neuronx
