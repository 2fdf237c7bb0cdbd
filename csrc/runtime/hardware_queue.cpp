// The queue and its worker: streams, launches, the order the worker executes them in.
#include "hardware_queue.h"

#include <pthread.h>

#include <chrono>
#include <limits>

#include "float_controls.h"
#include "hardware_queue_lock.h"
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

}  // namespace neuron_rt
