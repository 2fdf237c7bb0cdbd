// Kernels run on the launching thread while the core is idle (begin_inline / finish_inline).
#include "hardware_queue.h"
#include "hardware_queue_lock.h"

namespace neuron_rt {

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

}  // namespace neuron_rt
