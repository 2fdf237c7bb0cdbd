#include "hardware_queue.h"

#include <pthread.h>

#include <chrono>
#include <limits>
#include <sstream>
#include <stdexcept>

#include "float_controls.h"
#include "runtime.h"

namespace neuron_rt {

Nanos now_ns() {
  using namespace std::chrono;
  return duration_cast<nanoseconds>(steady_clock::now().time_since_epoch()).count();
}

namespace {
std::atomic<KernelObserver> kernel_observer{nullptr};
std::atomic<IdleRelease> idle_release{nullptr};
std::atomic<HostWait> host_wait{nullptr};
std::atomic<WorkerStart> worker_start{nullptr};
std::atomic<ComputeThreads> compute_threads_hook{nullptr};
thread_local bool tls_worker = false;
thread_local int tls_executing = -1;  // the core whose kernel this thread is executing
thread_local const LaunchInfo* tls_executing_info = nullptr;

// The queue's lock, as every thread takes it. It is held for well under a microsecond at a time;
// a thread that finds it held and sleeps is woken through the kernel while the other takes the
// lock again, and the launching thread and the worker fall into a convoy in which most launches
// sleep (measured: some processes ran a 20-token generate a third slower, the program's thread
// blocking on this lock about 2,000 times a second). Trying briefly before sleeping avoids it.
std::unique_lock<std::mutex> lock_soon(std::mutex& mu) {
  std::unique_lock<std::mutex> lock(mu, std::try_to_lock);
  for (int i = 0; i < 256 && !lock.owns_lock(); ++i) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
    lock.try_lock();
  }
  if (!lock.owns_lock()) lock.lock();
  return lock;
}
}  // namespace

bool on_worker_thread() { return tls_worker; }

int executing_device() { return tls_executing; }

const LaunchInfo* executing_info() { return tls_executing_info; }

void set_worker_start(WorkerStart start) { worker_start = start; }

void set_kernel_observer(KernelObserver observer) { kernel_observer = observer; }

void set_idle_release(IdleRelease release) { idle_release = release; }
void set_host_wait(HostWait wait) { host_wait = wait; }
void set_compute_threads(ComputeThreads threads) { compute_threads_hook = threads; }

HardwareQueue::HardwareQueue(int device, size_t max_inflight, bool inline_kernels)
    : device_(device), max_inflight_(max_inflight), inline_kernels_(inline_kernels) {
  streams_.push_back(Stream{0});  // stream 0: the default stream
  worker_ = std::thread([this] { run(); });
}

HardwareQueue::~HardwareQueue() {
  {
    std::unique_lock<std::mutex> lock = lock_soon(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  if (worker_.joinable()) worker_.join();
}

int HardwareQueue::create_stream(int priority) {
  std::unique_lock<std::mutex> lock = lock_soon(mu_);
  streams_.push_back(Stream{priority});
  return static_cast<int>(streams_.size()) - 1;
}

int HardwareQueue::stream_priority(int stream) const {
  std::unique_lock<std::mutex> lock = lock_soon(mu_);
  return streams_.at(stream).priority;
}

void HardwareQueue::drain_retired() {
  std::vector<std::function<void()>> retired;
  {
    std::unique_lock<std::mutex> lock = lock_soon(mu_);
    retired.swap(retired_);
  }
}

uint64_t HardwareQueue::push(int stream, Item item) {
  drain_retired();
  uint64_t seq;
  bool wake;
  {
    std::unique_lock<std::mutex> lock = lock_soon(mu_);
    // Like a hardware launch queue, the queue has a depth: the host blocks when it runs too
    // far ahead, which also bounds the memory that pending kernels keep alive. The wait runs
    // in the host-wait hook without our lock held (the hook may take the interpreter lock
    // back afterwards, which a kernel holding our lock could be waiting for).
    while (pending_ >= max_inflight_) {
      lock.unlock();
      auto room = [this] {
        std::unique_lock<std::mutex> inner(mu_);
        waiters_++;
        done_cv_.wait(inner, [&] { return pending_ < max_inflight_; });
        waiters_--;
      };
      if (HostWait wait = host_wait.load()) wait(room);
      else room();
      lock.lock();
    }
    Stream& s = streams_.at(stream);
    seq = item.seq = next_seq_++;
    s.items.push_back(std::move(item));
    s.enqueued++;
    pending_++;
    wake = sleeping_;
    generation_++;
  }
  if (wake) work_cv_.notify_one();
  return seq;
}

uint64_t HardwareQueue::launch(int stream, std::function<void()> fn, LaunchInfo info,
                               std::shared_ptr<std::exception_ptr> capture) {
  Item item;
  item.fn = std::move(fn);
  item.info = std::move(info);
  item.float_controls = float_controls();
  item.capture = std::move(capture);
  return push(stream, std::move(item));
}

// The queue reached an event's marker: timestamp and complete that recorded version.
static void reach(Event& event, uint64_t version) {
  event.timestamp = now_ns();
  event.completed = version;
}

void HardwareQueue::record(int stream, const std::shared_ptr<Event>& event) {
  bool reached = false;
  {
    // An idle core reaches the marker at once (as its worker would right away): complete it here.
    std::unique_lock<std::mutex> lock = lock_soon(mu_);
    if (inline_kernels_ && pending_ == 0) {
      reach(*event, ++event->recorded);
      reached = true;
    }
  }
  if (reached) {
    Runtime::get().notify_all_queues();
    return;
  }
  Item item;
  item.record_event = event;
  item.record_version = ++event->recorded;
  push(stream, std::move(item));
}

void HardwareQueue::wait(int stream, const std::shared_ptr<Event>& event) {
  const uint64_t version = event->recorded.load();
  if (version == 0) return;  // never recorded: nothing to wait for (CUDA semantics)
  if (event->completed.load() >= version) return;  // nothing to wait for either
  Item item;
  item.wait_event = event;
  item.wait_version = version;
  push(stream, std::move(item));
}

void HardwareQueue::complete_locked(int stream, uint64_t seq) {
  Stream& s = streams_[stream];
  s.completed++;
  s.last_seq_done = seq;
  pending_--;
}

int HardwareQueue::pick_locked() const {
  int best = -1;
  if (inline_) return best;  // a host thread has the core
  for (int i = 0; i < static_cast<int>(streams_.size()); ++i) {
    const Stream& s = streams_[i];
    if (s.items.empty()) continue;
    const Item& head = s.items.front();
    if (head.wait_event && head.wait_event->completed.load() < head.wait_version) continue;
    if (best < 0) {
      best = i;
      continue;
    }
    const Stream& b = streams_[best];
    if (s.priority < b.priority || (s.priority == b.priority && head.seq < b.items.front().seq)) best = i;
  }
  return best;
}

void HardwareQueue::store_error(const LaunchInfo& info, const std::shared_ptr<std::exception_ptr>& capture,
                                std::exception_ptr error) {
  if (capture) {
    *capture = error;
    return;
  }
  std::string what;
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    what = e.what();
  } catch (...) {
    what = "unknown error";
  }
  std::lock_guard<std::mutex> lock(error_mu_);
  if (error_) return;  // the earliest error wins
  std::ostringstream msg;
  msg << "neuron:" << device_ << ": device kernel '" << info.name << "' failed: " << what
      << "\nDevice errors are reported at the next synchronization point, so the Python line "
         "above may not be the one that launched the kernel. Set NEURON_LAUNCH_BLOCKING=1 to "
         "raise at the launching operation";
  if (info.launch_stack.empty()) msg << ", or TORCH_NEURONX_ENABLE_STACK_TRACE=1 to record the launching Python stack.";
  else msg << ".\nKernel launched from (most recent call last):\n" << info.launch_stack;
  error_ = msg.str();
}

// Runs a kernel body: its error is stored (or captured), and the kernel observer sees it.
void HardwareQueue::execute(int stream, const std::function<void()>& fn, const LaunchInfo& info,
                            const std::shared_ptr<std::exception_ptr>& capture) {
  const KernelObserver observer = kernel_observer.load();
  const Nanos start = observer ? now_ns() : 0;
  const int outer = tls_executing;
  const LaunchInfo* outer_info = tls_executing_info;
  tls_executing = device_;
  tls_executing_info = &info;
  try {
    fn();
  } catch (...) {
    store_error(info, capture, std::current_exception());
  }
  tls_executing = outer;
  tls_executing_info = outer_info;
  if (observer) observer(device_, stream, info, start, now_ns());
}

void HardwareQueue::run() {
  tls_worker = true;
  // Named for `top -H`, py-spy and debuggers; its OpenMP threads inherit the name.
  pthread_setname_np(pthread_self(), ("neuron-core" + std::to_string(device_)).c_str());
  if (WorkerStart start = worker_start.load()) start();
  uint64_t controls = float_controls();  // the worker's now: a kernel gets its launcher's
  for (;;) {
    Item item;
    int stream;
    {
      std::unique_lock<std::mutex> lock = lock_soon(mu_);
      if (!stop_ && pick_locked() < 0) {
        // A launching thread usually sends the next kernel within microseconds: watch for it
        // briefly before sleeping, so launches need not wake the worker through the kernel.
        const uint64_t seen = generation_;
        lock.unlock();
        const Nanos until = now_ns() + kSpinNs;
        while (generation_.load(std::memory_order_acquire) == seen && now_ns() < until) std::this_thread::yield();
        lock.lock();
        sleeping_ = true;
        work_cv_.wait(lock, [&] { return stop_ || pick_locked() >= 0 || (release_requested_ && worker_warm_); });
        sleeping_ = false;
        if (!stop_ && pick_locked() < 0) {  // woken to release the compute threads
          lock.unlock();
          if (IdleRelease release = idle_release.load()) release();
          lock.lock();
          release_requested_ = worker_warm_ = false;
          lock.unlock();
          done_cv_.notify_all();
          continue;
        }
      }
      if (stop_) return;
      stream = pick_locked();
      item = std::move(streams_[stream].items.front());
      streams_[stream].items.pop_front();
      running_ = true;
    }
    if (item.fn) {
      if (item.float_controls != controls) set_float_controls(controls = item.float_controls);
      if (ComputeThreads threads = compute_threads_hook.load(); threads && item.info.compute_threads > 0)
        threads(item.info.compute_threads);
      execute(stream, item.fn, item.info, item.capture);
    }
    if (item.record_event) {
      reach(*item.record_event, item.record_version);
      Runtime::get().notify_all_queues();
    }
    {
      std::unique_lock<std::mutex> lock = lock_soon(mu_);
      complete_locked(stream, item.seq);
      running_ = false;
      // The kernel's captures may own the last reference to objects whose release needs the
      // launching thread's interpreter: launching threads destroy them (see drain_retired).
      if (item.fn) {
        retired_.push_back(std::move(item.fn));
        worker_warm_ = true;
        host_compute_ = false;
        kernels_on_worker_++;
      }
      if (waiters_ == 0) continue;
    }
    done_cv_.notify_all();
  }
}

uint64_t HardwareQueue::begin_inline(int stream, HostWork work) {
  if (!inline_kernels_ || work == HostWork::kNever) return 0;
  // Read again under the lock: this read only spares most eager launches the lock.
  if (work == HostWork::kFollow && !host_compute_.load(std::memory_order_relaxed)) return 0;
  std::unique_lock<std::mutex> lock = lock_soon(mu_);
  if (work == HostWork::kClaim) {
    // Wait for the queued kernels (a graph holds the interpreter lock while it computes, so
    // queueing it behind them would gain little) and for the worker to release its compute
    // threads. Not for a stream blocked on an event: the host may be the one to record it.
    waiters_++;
    for (;;) {
      const bool blocked = pending_ > 0 && !running_ && !inline_ && pick_locked() < 0;
      if (blocked || (pending_ == 0 && !inline_ && !worker_warm_)) break;
      if (pending_ == 0 && !inline_ && !release_requested_) {  // the worker still has its threads
        release_requested_ = true;
        generation_++;  // ends the worker's watch for launches
        if (sleeping_) work_cv_.notify_one();
      }
      done_cv_.wait(lock);
    }
    waiters_--;
  }
  if (pending_ != 0 || inline_) return 0;
  if (work == HostWork::kFollow && !host_compute_) return 0;
  if (work == HostWork::kClaim) host_compute_ = true;
  Stream& s = streams_.at(stream);
  inline_ = true;
  s.enqueued++;
  pending_++;
  return next_seq_++;
}

void HardwareQueue::finish_inline(int stream, uint64_t seq, const std::function<void()>& fn, const LaunchInfo& info,
                                  const std::shared_ptr<std::exception_ptr>& capture) {
  execute(stream, fn, info, capture);
  bool wake, notify;
  {
    std::unique_lock<std::mutex> lock = lock_soon(mu_);
    complete_locked(stream, seq);
    inline_ = false;
    kernels_on_host_++;
    wake = sleeping_ && pending_ > 0;  // launches from other threads waited for the core
    notify = waiters_ > 0;
  }
  if (wake) work_cv_.notify_one();
  if (notify) done_cv_.notify_all();
}

std::pair<uint64_t, uint64_t> HardwareQueue::kernel_counts() const {
  std::unique_lock<std::mutex> lock = lock_soon(mu_);
  return {kernels_on_worker_, kernels_on_host_};
}

size_t HardwareQueue::pending() const {
  std::unique_lock<std::mutex> lock = lock_soon(mu_);
  return pending_;
}

void HardwareQueue::notify() {
  {
    std::unique_lock<std::mutex> lock = lock_soon(mu_);
    generation_++;
  }
  work_cv_.notify_one();
}

bool HardwareQueue::query_stream(int stream) const {
  std::unique_lock<std::mutex> lock = lock_soon(mu_);
  const Stream& s = streams_.at(stream);
  return s.completed == s.enqueued;
}

int HardwareQueue::stream_count() const {
  std::unique_lock<std::mutex> lock = lock_soon(mu_);
  return static_cast<int>(streams_.size());
}

StreamPosition HardwareQueue::position(int stream) const {
  std::unique_lock<std::mutex> lock = lock_soon(mu_);
  const Stream& s = streams_.at(stream);
  return {s.enqueued, s.completed};
}

void HardwareQueue::wait_item(int stream, uint64_t seq) {
  std::unique_lock<std::mutex> lock = lock_soon(mu_);
  waiters_++;
  done_cv_.wait(lock, [&] {
    const Stream& s = streams_[stream];
    return s.last_seq_done >= seq || s.completed == s.enqueued;
  });
  waiters_--;
  lock.unlock();
  drain_retired();
}

void HardwareQueue::synchronize_stream(int stream) {
  std::unique_lock<std::mutex> lock = lock_soon(mu_);
  const uint64_t target = streams_.at(stream).enqueued;
  waiters_++;
  done_cv_.wait(lock, [&] { return streams_[stream].completed >= target; });
  waiters_--;
  lock.unlock();
  drain_retired();
}

void HardwareQueue::synchronize() {
  std::unique_lock<std::mutex> lock = lock_soon(mu_);
  std::vector<uint64_t> targets;
  for (const Stream& s : streams_) targets.push_back(s.enqueued);
  waiters_++;
  done_cv_.wait(lock, [&] {
    for (size_t i = 0; i < targets.size(); ++i)
      if (streams_[i].completed < targets[i]) return false;
    return true;
  });
  waiters_--;
  lock.unlock();
  drain_retired();
}

void HardwareQueue::wait_event(const Event& event) {
  const uint64_t version = event.recorded.load();
  std::unique_lock<std::mutex> lock = lock_soon(mu_);
  waiters_++;
  done_cv_.wait(lock, [&] { return event.completed.load() >= version; });
  waiters_--;
}

void HardwareQueue::raise_pending_error() {
  std::optional<std::string> error;
  {
    std::lock_guard<std::mutex> lock(error_mu_);
    error.swap(error_);
  }
  if (error) throw std::runtime_error(*error);
}

}  // namespace neuron_rt
