// Events: markers in a stream that the worker (or an idle core at once) reaches, and waits for them.
#include "hardware_queue.h"
#include "hardware_queue_lock.h"
#include "runtime.h"

namespace neuron_rt {

void HardwareQueue::reach(Event& event, uint64_t version) {
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

void HardwareQueue::wait_event(const Event& event) {
  const uint64_t version = event.recorded.load();
  std::unique_lock<std::mutex> lock = lock_soon(mu_);
  waiters_++;
  done_cv_.wait(lock, [&] { return event.completed.load() >= version; });
  waiters_--;
}

}  // namespace neuron_rt
