// The legacy ProfilerStubs used by torch.autograd.profiler.profile(use_kineto=False).
#include <c10/util/ApproximateClock.h>
#include <torch/csrc/profiler/stubs/base.h>

#include <functional>
#include <memory>

#include "../adaptive/adaptive.h"
#include "../device.h"
#include "../launch.h"

namespace torch_neuronx::profiler {

namespace {

// The legacy (non-Kineto) profiler brackets each operator with timed events on the current
// stream, as it does with CUDA events.
struct NeuronStubs final : torch::profiler::impl::ProfilerStubs {
  void record(c10::DeviceIndex* device, torch::profiler::impl::ProfilerVoidEventStub* event,
              int64_t* cpu_ns) const override {
    const auto index = current_device();
    if (device) *device = index;
    auto e = std::make_shared<neuron_rt::Event>(index, true);
    adaptive::end_segment(index);
    core(index).queue.record(static_cast<int>(current_stream(index).id()), e);
    if (cpu_ns) *cpu_ns = c10::getTime();
    *event = std::static_pointer_cast<void>(e);
  }

  float elapsed(const torch::profiler::impl::ProfilerVoidEventStub* a,
                const torch::profiler::impl::ProfilerVoidEventStub* b) const override {
    auto* start = static_cast<neuron_rt::Event*>(a->get());
    auto* end = static_cast<neuron_rt::Event*>(b->get());
    without_gil([&] {
      core(start->device).queue.wait_event(*start);
      core(end->device).queue.wait_event(*end);
    });
    return static_cast<float>(end->timestamp.load() - start->timestamp.load()) / 1e3f;  // us, as PyTorch reads it
  }

  void mark(const char*) const override {}
  void rangePush(const char*) const override {}
  void rangePop() const override {}
  bool enabled() const override { return true; }

  void onEachDevice(std::function<void(int)> op) const override {
    const auto previous = current_device();
    for (int i = 0; i < neuron_rt::Runtime::get().device_count(); ++i) {
      set_current_device(static_cast<c10::DeviceIndex>(i));
      op(i);
    }
    set_current_device(previous);
  }

  void synchronize() const override {
    auto& rt = neuron_rt::Runtime::get();
    for (int i = 0; i < rt.device_count(); ++i)
      if (rt.core_initialized(i)) wait_for_queue(i);
  }
};

const bool stubs_registered = [] {
  static NeuronStubs stubs;
  torch::profiler::impl::registerPrivateUse1Methods(&stubs);
  return true;
}();

}  // namespace

}  // namespace torch_neuronx::profiler
