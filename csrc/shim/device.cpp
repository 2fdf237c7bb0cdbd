#include "device.h"

#include <c10/core/AutogradState.h>
#include <c10/util/Exception.h>

#include <atomic>
#include <mutex>
#include <vector>

#include "adaptive/adaptive.h"
#include "launch.h"
#include "op_tracking.h"
#include "openmp.h"
#include "profiler/profiler.h"

namespace torch_neuronx {

namespace {
thread_local c10::DeviceIndex tls_device = 0;
thread_local std::vector<c10::StreamId> tls_streams;  // current stream per device
std::atomic<bool> calling_thread_backward{true};
std::once_flag first_use;

template <class F>
auto translate_runtime_errors(F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const neuron_rt::OutOfMemory& e) {
    TORCH_CHECK_WITH(OutOfMemoryError, false, e.what());
  } catch (const std::out_of_range& e) {
    TORCH_CHECK_INDEX(false, e.what());
  } catch (const c10::Error&) {
    throw;
  } catch (const std::runtime_error& e) {
    TORCH_CHECK(false, e.what());
  }
}
}  // namespace

void check_supported_dtype(c10::ScalarType dtype, const std::string& op) {
  TORCH_CHECK_TYPE(!c10::isQIntType(dtype), op,
                   ": the neuron device does not support quantized "
                   "dtypes (got ",
                   dtype, "). Keep quantized tensors on the CPU.");
}

c10::DeviceIndex current_device() { return tls_device; }

void set_current_device(c10::DeviceIndex index) {
  translate_runtime_errors([&] { neuron_rt::Runtime::get().check_index(index); });
  tls_device = index;
}

c10::Stream current_stream(c10::DeviceIndex index) {
  const auto id = index < static_cast<c10::DeviceIndex>(tls_streams.size()) ? tls_streams[index] : 0;
  return c10::Stream(c10::Stream::UNSAFE, c10::Device(kNeuron, index), id);
}

void set_current_stream(const c10::Stream& stream) {
  const auto index = stream.device_index();
  if (index >= static_cast<c10::DeviceIndex>(tls_streams.size())) tls_streams.resize(index + 1, 0);
  if (tls_streams[index] != stream.id() && adaptive::enabled()) adaptive::end_segment(index);
  tls_streams[index] = stream.id();
}

void set_calling_thread_backward(bool enabled) { calling_thread_backward = enabled; }

neuron_rt::Core& core(c10::DeviceIndex index) {
  auto& c = translate_runtime_errors([&]() -> neuron_rt::Core& { return neuron_rt::Runtime::get().core(index); });
  // The autograd engine hands the backward of every non-CPU device to a thread per device; our
  // kernels are queued to the core's worker anyway, so that thread only adds two hand-offs per
  // backward node (docs/architecture.md). The thread that first uses a neuron device runs
  // backward on itself instead, as the CPU's does. It is a thread-local setting, made here and
  // not at import, so programs that never use the device keep PyTorch's behaviour.
  std::call_once(first_use, [] {
    start_op_tracking();  // already started by torch.neuron._lazy_init when Python is the caller
    if (calling_thread_backward) c10::AutogradState::get_tls_state().set_multithreading_enabled(false);
  });
  return c;
}

// Warnings of kernels run by a worker: kept until the next launch or synchronization on a
// host thread, which re-raises them there, so they reach Python's warnings system (filters,
// -W error, pytest) like the warnings of kernels run on the calling thread.
namespace {
struct QueuedWarning {
  int device;
  c10::Warning warning;
};
std::mutex queued_warnings_mu;
std::vector<QueuedWarning> queued_warnings;
std::atomic<bool> have_queued_warnings{false};

struct WorkerWarnings final : c10::WarningHandler {
  void process(const c10::Warning& w) override {
    const neuron_rt::LaunchInfo* info = neuron_rt::executing_info();
    const std::string kernel = info ? info->name : "a queued kernel";
    std::lock_guard<std::mutex> lock(queued_warnings_mu);
    queued_warnings.push_back(
        {neuron_rt::executing_device(),
         c10::Warning(w.type(), w.source_location(), "neuron (queued kernel " + kernel + "): " + w.msg(), true)});
    have_queued_warnings = true;
  }
};

}  // namespace

void setup_worker_thread() {
  static WorkerWarnings handler;  // one for every worker; each thread points at it
  c10::WarningUtils::set_warning_handler(&handler);
  c10::impl::_force_tls_local_dispatch_key_set(kernel_dispatch_state());  // a worker runs kernels only
}

void deliver_kernel_warnings(c10::DeviceIndex index) {
  if (!have_queued_warnings.load(std::memory_order_relaxed) || neuron_rt::on_worker_thread()) return;
  std::vector<c10::Warning> mine;
  {
    std::lock_guard<std::mutex> lock(queued_warnings_mu);
    auto kept = queued_warnings.begin();
    for (auto& q : queued_warnings) {
      if (q.device == index) mine.push_back(std::move(q.warning));
      else *kept++ = std::move(q);
    }
    queued_warnings.erase(kept, queued_warnings.end());
    have_queued_warnings = !queued_warnings.empty();
  }
  for (const auto& w : mine) c10::warn(w);
}

void raise_pending_error(neuron_rt::Core& c) {
  translate_runtime_errors([&] { c.queue.raise_pending_error(); });
  deliver_kernel_warnings(static_cast<c10::DeviceIndex>(c.pool.device()));
}

bool inside_kernel_of(c10::DeviceIndex index) { return neuron_rt::executing_device() == index; }

void synchronize_stream(const c10::Stream& stream) {
  if (inside_kernel_of(stream.device_index())) return;
  adaptive::end_segment(stream.device_index());
  release_host_openmp_threads();
  auto& c = core(stream.device_index());
  const profiler::SyncSpan span(stream.device_index(), "neuronStreamSynchronize");
  without_gil([&] { c.queue.synchronize_stream(static_cast<int>(stream.id())); });
  raise_pending_error(c);
}

void synchronize_device(c10::DeviceIndex index) {
  if (inside_kernel_of(index)) return;
  adaptive::end_segment(index);
  release_host_openmp_threads();
  auto& c = core(index);
  const profiler::SyncSpan span(index, "neuronDeviceSynchronize");
  // Without the interpreter lock: Python kernels on the queue (compiled graphs, kernel-language
  // ops, collectives) take it to run. Callers such as a storage resize hold it.
  without_gil([&] { c.queue.synchronize(); });
  raise_pending_error(c);
}

}  // namespace torch_neuronx
