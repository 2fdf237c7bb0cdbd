#include "launch.h"

#include <ATen/Parallel.h>
#include <ATen/record_function.h>
#include <pybind11/pybind11.h>

#include <atomic>
#include <memory>
#include <optional>

#include "adaptive/adaptive.h"
#include "device.h"
#include "openmp.h"
#include "profiler/profiler.h"

namespace torch_neuronx {

namespace {

std::atomic<bool> capture_stack{false};

// The launching Python stack, when stack capture is on (else empty).
std::string launch_stack() {
  if (!capture_stack || !Py_IsInitialized()) return {};
  pybind11::gil_scoped_acquire gil;
  try {
    auto frames = pybind11::module_::import("traceback").attr("format_stack")();
    std::string out;
    for (auto frame : frames) out += frame.cast<std::string>();
    return out;
  } catch (const pybind11::error_already_set&) {
    return {};
  }
}

// Runs `fn` on the calling thread as the next kernel of the current stream if the core takes it
// there (begin_inline), and says whether it did. `capture`: rethrow its error here rather than
// defer it.
bool run_if_idle(c10::DeviceIndex device, const std::function<void()>& fn, Launch& how, bool capture) {
  auto& c = core(device);
  const int stream = static_cast<int>(current_stream(device).id());
  const uint64_t seq = c.queue.begin_inline(stream, how.host);
  if (!seq) return false;
  auto error = capture ? std::make_shared<std::exception_ptr>() : nullptr;
  const uint64_t token = profiler::on_launch(device, std::move(how.described));
  const neuron_rt::LaunchInfo info{how.name, launch_stack(), token};
  profiler::on_enqueued(token);
  {
    // The kernel's own ATen calls stay out of the profiler's operator records, as on the worker.
    // Switching recording off rebuilds the thread's callback lists: only when a profiler records
    // on this thread (its callbacks are thread-local; op tracking's global one skips kernels).
    std::optional<at::RecordFunctionGuard> unrecorded;
    if (at::hasThreadLocalCallbacks()) unrecorded.emplace(false);
    const c10::impl::ForceDispatchKeyGuard as_on_a_worker(kernel_dispatch_state());
    c.queue.finish_inline(stream, seq, fn, info, error);
  }
  if (error && *error) std::rethrow_exception(*error);
  return true;
}

}  // namespace

c10::impl::LocalDispatchKeySet kernel_dispatch_state() {
  static const c10::impl::LocalDispatchKeySet state = [] {
    c10::impl::PODLocalDispatchKeySet pod;
    pod.set_included(c10::DispatchKeySet(c10::DispatchKey::BackendSelect));
    pod.set_excluded(
        c10::default_excluded_set | c10::autograd_dispatch_keyset_with_ADInplaceOrView | c10::autocast_dispatch_keyset |
        c10::python_ks | c10::functorch_transforms_ks |
        c10::DispatchKeySet({c10::DispatchKey::FuncTorchDynamicLayerFrontMode,
                             c10::DispatchKey::FuncTorchDynamicLayerBackMode, c10::DispatchKey::Functionalize,
                             c10::DispatchKey::PreDispatch, c10::DispatchKey::PythonDispatcher}));
    return c10::impl::LocalDispatchKeySet(pod);
  }();
  return state;
}

bool launch(c10::DeviceIndex device, std::function<void()> fn, Launch how) {
  // A kernel asking its own core for more work (a CPU fallback copying its arguments): every
  // earlier kernel has run and no later one has started, so the work runs here, in order.
  if (inside_kernel_of(device)) {
    fn();
    return true;
  }
  if (how.ends_segment) adaptive::end_segment(device);
  deliver_kernel_warnings(device);
  const bool blocking = how.completion == Launch::kWaited || neuron_rt::Runtime::get().topology().launch_blocking;
  if (run_if_idle(device, fn, how, blocking)) return true;
  if (how.completion == Launch::kInlineOnly) return false;
  auto& c = core(device);
  const int stream = static_cast<int>(current_stream(device).id());
  auto error = blocking ? std::make_shared<std::exception_ptr>() : nullptr;
  const uint64_t token = profiler::on_launch(device, std::move(how.described));
  neuron_rt::LaunchInfo info{std::move(how.name), launch_stack(), token, at::get_num_threads()};
  const auto seq = c.queue.launch(stream, std::move(fn), std::move(info), error);
  profiler::on_enqueued(token);
  if (!blocking) return true;
  release_host_openmp_threads();
  without_gil([&] { c.queue.wait_item(stream, seq); });
  if (*error) std::rethrow_exception(*error);
  return true;
}

void wait_for_queue(c10::DeviceIndex device) {
  if (inside_kernel_of(device)) return;
  adaptive::end_segment(device);
  release_host_openmp_threads();
  without_gil([&] { core(device).queue.synchronize(); });
}

void without_gil(const std::function<void()>& f) {
  if (Py_IsInitialized() && PyGILState_Check()) {
    pybind11::gil_scoped_release nogil;
    f();
  } else {
    f();
  }
}

void set_capture_stack(bool enabled) { capture_stack = enabled; }

}  // namespace torch_neuronx
