#include "device.h"

#include <ATen/record_function.h>
#include <c10/core/AutogradState.h>
#include <c10/core/CPUAllocator.h>
#include <c10/util/Exception.h>
#include <dlfcn.h>
#include <pybind11/pybind11.h>

#include <atomic>
#include <mutex>
#include <optional>
#include <vector>

#include "allocator.h"
#include "op_tracking.h"
#include "profiler.h"

namespace torch_neuronx {

namespace {
thread_local c10::DeviceIndex tls_device = 0;
thread_local std::vector<c10::StreamId> tls_streams;  // current stream per device
std::atomic<bool> capture_stack{false};
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
  TORCH_CHECK_TYPE(!c10::isComplexType(dtype), op, ": the neuron device does not support complex "
                   "dtypes (got ", dtype, "). Keep complex tensors on the CPU, or represent them "
                   "as real tensors with a trailing dimension of 2.");
  TORCH_CHECK_TYPE(!c10::isQIntType(dtype), op, ": the neuron device does not support quantized "
                   "dtypes (got ", dtype, "). Keep quantized tensors on the CPU.");
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
  tls_streams[index] = stream.id();
}

void set_calling_thread_backward(bool enabled) { calling_thread_backward = enabled; }

neuron_rt::Core& core(c10::DeviceIndex index) {
  auto& c = translate_runtime_errors(
      [&]() -> neuron_rt::Core& { return neuron_rt::Runtime::get().core(index); });
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
    queued_warnings.push_back({neuron_rt::executing_device(),
                               c10::Warning(w.type(), w.source_location(),
                                            "neuron (queued kernel " + kernel + "): " + w.msg(), true)});
    have_queued_warnings = true;
  }
};

}  // namespace

void setup_worker_thread() {
  static WorkerWarnings handler;  // one for every worker; each thread points at it
  c10::WarningUtils::set_warning_handler(&handler);
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

// Kernels run on the core's worker thread, which keeps its own OpenMP team; a host thread that
// ever ran a parallel CPU op (model initialization, data preparation) keeps another for good.
// With more OpenMP threads than cores, libgomp throttles every team: threads spin ~100 times
// before sleeping, so each barrier of a kernel becomes futex round trips (measured: compiled
// TinyGPT graphs ran 2x slower). A host thread waiting for a core has no use for its team, so it
// releases it (omp_pause_resource_all); its next parallel CPU op re-creates it. Other OpenMP
// runtimes than libgomp are left alone.
static void pause_openmp_threads() {
  using Pause = int (*)(int);
  static const Pause pause = [] {
    void* gomp = dlopen("libgomp.so.1", RTLD_LAZY | RTLD_NOLOAD);
    return gomp ? reinterpret_cast<Pause>(dlsym(gomp, "omp_pause_resource_all")) : nullptr;
  }();
  constexpr int kPauseSoft = 1;  // omp_pause_soft
  if (pause) pause(kPauseSoft);
}

void release_host_openmp_threads() {
  if (!neuron_rt::on_worker_thread()) pause_openmp_threads();
}

void release_worker_openmp_threads() { pause_openmp_threads(); }

// Called from inside a kernel of the core (a CPU fallback resizing an output), a synchronization
// has nothing to wait for: the kernels before it have run, the ones after it cannot start.
static bool inside_kernel_of(c10::DeviceIndex index) { return neuron_rt::executing_device() == index; }

void synchronize_stream(const c10::Stream& stream) {
  if (inside_kernel_of(stream.device_index())) return;
  release_host_openmp_threads();
  auto& c = core(stream.device_index());
  const profiler::SyncSpan span(stream.device_index(), "neuronStreamSynchronize");
  c.queue.synchronize_stream(static_cast<int>(stream.id()));
  raise_pending_error(c);
}

void synchronize_device(c10::DeviceIndex index) {
  if (inside_kernel_of(index)) return;
  release_host_openmp_threads();
  auto& c = core(index);
  const profiler::SyncSpan span(index, "neuronDeviceSynchronize");
  c.queue.synchronize();
  raise_pending_error(c);
}

void set_capture_stack(bool enabled) { capture_stack = enabled; }

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
// defer it. The kernel's own ATen calls stay out of the profiler's operator records, as on the
// worker.
static bool run_if_idle(c10::DeviceIndex device, const std::function<void()>& fn, const std::string& name,
                        neuron_rt::HostWork host, bool capture) {
  auto& c = core(device);
  const int stream = static_cast<int>(current_stream(device).id());
  const uint64_t seq = c.queue.begin_inline(stream, host);
  if (!seq) return false;
  auto error = capture ? std::make_shared<std::exception_ptr>() : nullptr;
  const uint64_t token = profiler::on_launch(device);
  const neuron_rt::LaunchInfo info{name, launch_stack(), token};
  profiler::on_enqueued(token);
  {
    // Switching recording off rebuilds the thread's callback lists: only when a profiler records
    // on this thread (its callbacks are thread-local; op tracking's global one skips kernels).
    std::optional<at::RecordFunctionGuard> unrecorded;
    if (at::hasThreadLocalCallbacks()) unrecorded.emplace(false);
    c.queue.finish_inline(stream, seq, fn, info, error);
  }
  if (error && *error) std::rethrow_exception(*error);
  return true;
}

static void launch_impl(c10::DeviceIndex device, std::function<void()> fn, std::string name,
                        bool wait, neuron_rt::HostWork host) {
  // A kernel asking its own core for more work (a CPU fallback copying its arguments): every
  // earlier kernel has run and no later one has started, so the work runs here, in order.
  if (inside_kernel_of(device)) return fn();
  deliver_kernel_warnings(device);
  const bool blocking = wait || neuron_rt::Runtime::get().topology().launch_blocking;
  if (run_if_idle(device, fn, name, host, blocking)) return;
  auto& c = core(device);
  const int stream = static_cast<int>(current_stream(device).id());
  auto error = blocking ? std::make_shared<std::exception_ptr>() : nullptr;
  const uint64_t token = profiler::on_launch(device);
  neuron_rt::LaunchInfo info{std::move(name), launch_stack(), token};
  const auto seq = c.queue.launch(stream, std::move(fn), std::move(info), error);
  profiler::on_enqueued(token);
  if (!blocking) return;
  release_host_openmp_threads();
  c.queue.wait_item(stream, seq);
  if (*error) std::rethrow_exception(*error);
}

void launch(c10::DeviceIndex device, std::function<void()> fn, std::string name, neuron_rt::HostWork host) {
  launch_impl(device, std::move(fn), std::move(name), false, host);
}

bool launch_inline(c10::DeviceIndex device, const std::function<void()>& fn, const std::string& name,
                   neuron_rt::HostWork host) {
  return run_if_idle(device, fn, name, host, neuron_rt::Runtime::get().topology().launch_blocking);
}

void without_gil(const std::function<void()>& f) {
  if (Py_IsInitialized() && PyGILState_Check()) {
    pybind11::gil_scoped_release nogil;
    f();
  } else {
    f();
  }
}

void launch_and_wait(c10::DeviceIndex device, std::function<void()> fn, std::string name,
                     neuron_rt::HostWork host) {
  launch_impl(device, std::move(fn), std::move(name), true, host);
}

at::Tensor tensor_on(c10::Storage storage, c10::DispatchKey key, const at::Tensor& like) {
  auto impl = c10::make_intrusive<c10::TensorImpl>(std::move(storage), c10::DispatchKeySet(key), like.dtype());
  impl->set_sizes_and_strides(like.sizes(), like.strides(), like.storage_offset());
  return at::Tensor(std::move(impl));
}

at::Tensor snapshot(const at::Tensor& t) { return Snapshots()(t); }

at::Tensor Snapshots::operator()(const at::Tensor& t) {
  if (!t.defined() || t.device().type() != kNeuron) return t;
  for (const auto& [impl, taken] : seen_)
    if (impl == t.unsafeGetTensorImpl()) return taken;
  const c10::StorageImpl* key = t.storage().unsafeGetStorageImpl();
  const c10::Storage* storage = nullptr;
  for (const auto& [impl, s] : storages_)
    if (impl == key) storage = &s;
  if (!storage) {
    storages_.emplace_back(key, kernel_storage(t.storage()));
    storage = &storages_.back().second;
  }
  seen_.emplace_back(t.unsafeGetTensorImpl(), tensor_on(*storage, c10::DispatchKey::PrivateUse1, t));
  return seen_.back().second;
}

c10::IValue Snapshots::operator()(const c10::IValue& v) {
  if (v.isTensor()) return (*this)(v.toTensor());
  if (v.isTensorList()) {
    std::vector<at::Tensor> list;
    for (const at::Tensor& t : v.toTensorList()) list.push_back((*this)(t));
    return list;
  }
  if (v.isOptionalTensorList()) {
    c10::List<std::optional<at::Tensor>> list;
    for (const std::optional<at::Tensor>& t : v.toOptionalTensorList())
      list.push_back(t.has_value() ? std::optional<at::Tensor>((*this)(*t)) : std::nullopt);
    return list;
  }
  return v;
}

at::Tensor HostAliases::operator()(const at::Tensor& t) {
  if (!t.defined() || t.device().type() != kNeuron) return t;
  for (const auto& [impl, alias] : tensors_)
    if (impl == t.unsafeGetTensorImpl()) return alias;
  tensors_.emplace_back(t.unsafeGetTensorImpl(), alias_of(t));
  return tensors_.back().second;
}

// Empty tensors are aliases too (their storage and offset are what a kernel resizes from).
at::Tensor HostAliases::alias_of(const at::Tensor& t) {
  const c10::StorageImpl* key = t.storage().unsafeGetStorageImpl();
  c10::Storage* storage = nullptr;
  for (auto& [impl, s] : storages_)
    if (impl == key) storage = &s;
  if (!storage) {
    void* data = const_cast<void*>(t.storage().data());
    storages_.emplace_back(
        key, c10::Storage(c10::Storage::use_byte_size_t(), t.storage().nbytes(),
                          c10::DataPtr(data, c10::Device(at::kCPU)),
                          resizable_ ? c10::GetCPUAllocator() : nullptr, resizable_));
    storage = &storages_.back().second;
  }
  return tensor_on(*storage, c10::DispatchKey::CPU, t);
}

at::Tensor host_alias(const at::Tensor& t) { return HostAliases()(t); }

}  // namespace torch_neuronx
