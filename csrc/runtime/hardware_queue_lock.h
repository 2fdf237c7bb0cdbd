// The lock of a hardware queue, shared by the queue's files.
#pragma once

#include <mutex>

namespace neuron_rt {

// The queue's lock, as every thread takes it. It is held for well under a microsecond at a time;
// a thread that finds it held and sleeps is woken through the kernel while the other takes the
// lock again, and the launching thread and the worker fall into a convoy in which most launches
// sleep (measured: some processes ran a 20-token generate a third slower, the program's thread
// blocking on this lock about 2,000 times a second). Trying briefly before sleeping avoids it.
inline std::unique_lock<std::mutex> lock_soon(std::mutex& mu) {
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

}  // namespace neuron_rt
