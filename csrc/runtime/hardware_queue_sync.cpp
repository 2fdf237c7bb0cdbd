// Synchronization points and the deferred-error slot they re-raise from.
#include "hardware_queue.h"

#include <sstream>
#include <stdexcept>

#include "hardware_queue_lock.h"

namespace neuron_rt {

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

void HardwareQueue::raise_pending_error() {
  std::optional<std::string> error;
  {
    std::lock_guard<std::mutex> lock(error_mu_);
    error.swap(error_);
  }
  if (error) throw std::runtime_error(*error);
}

}  // namespace neuron_rt
