#include "shared_link.h"

#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <fstream>
#include <stdexcept>
#include <string>

namespace neuron_rt {
namespace {

using Clock = std::chrono::steady_clock;
// A wait sleeps in slices this long, between which it looks for dead peers.
constexpr auto kSlice = std::chrono::milliseconds(20);
// Yields before sleeping: a peer that is a few microseconds behind is met without a syscall.
constexpr int kYields = 64;

// Not FUTEX_PRIVATE: the word is shared between processes.
void futex_wait(std::atomic<uint32_t>* word, uint32_t expected, std::chrono::nanoseconds for_at_most) {
  timespec ts{static_cast<time_t>(for_at_most.count() / 1000000000),
              static_cast<long>(for_at_most.count() % 1000000000)};
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, expected, &ts, nullptr, 0);
}

void futex_wake_all(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

}  // namespace

bool process_exited(int pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return true;
  auto close = line.rfind(')');
  return close == std::string::npos || close + 2 >= line.size() || line[close + 2] == 'Z' || line[close + 2] == 'X';
}

namespace {

std::string missing_ranks(LinkControl* c, int rank, int size, bool dead_only) {
  std::string out;
  uint64_t mine = c->arrivals[rank].load();
  for (int r = 0; r < size; ++r) {
    if (c->arrivals[r].load() >= mine) continue;
    int pid = c->pids[r].load();
    if (dead_only && (pid == 0 || !process_exited(pid))) continue;
    out += (out.empty() ? "" : ", ") + std::to_string(r) + " (pid " + std::to_string(pid) + ")";
  }
  return out;
}

[[noreturn]] void give_up(LinkControl* c, int rank, const std::string& why) {
  if (c->failed.exchange(1) == 0) c->failed_rank = static_cast<uint32_t>(rank);
  futex_wake_all(&c->generation);
  throw std::runtime_error(why);
}

}  // namespace

void link_join(void* control, int rank) {
  static_cast<LinkControl*>(control)->pids[rank].store(static_cast<int32_t>(getpid()));
}

void link_barrier(void* control, int rank, int size, double timeout_seconds) {
  auto* c = static_cast<LinkControl*>(control);
  auto broken = [c] {
    return std::runtime_error("the group's shared-memory link is broken since rank " + std::to_string(c->failed_rank) +
                              " gave up on a collective; create a new process group");
  };
  if (c->failed.load()) throw broken();
  uint32_t generation = c->generation.load(std::memory_order_acquire);
  c->arrivals[rank].fetch_add(1);
  if (c->arrived.fetch_add(1, std::memory_order_acq_rel) + 1 == static_cast<uint32_t>(size)) {
    c->arrived.store(0);  // before the bump: a rank released by it may enter the next barrier
    c->generation.fetch_add(1, std::memory_order_release);
    futex_wake_all(&c->generation);
    return;
  }
  auto released = [&] { return c->generation.load(std::memory_order_acquire) != generation; };
  for (int i = 0; i < kYields; ++i) {
    if (released()) return;
    sched_yield();
  }
  auto deadline = Clock::now() +
                  std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_seconds));
  while (!released()) {
    if (c->failed.load()) throw broken();
    auto dead = missing_ranks(c, rank, size, /*dead_only=*/true);
    if (!dead.empty()) give_up(c, rank, "rank(s) " + dead + " exited before reaching the collective");
    auto now = Clock::now();
    if (now >= deadline) {
      give_up(c, rank,
              "timed out after " + std::to_string(timeout_seconds) + " s waiting for rank(s) " +
                  missing_ranks(c, rank, size, /*dead_only=*/false));
    }
    futex_wait(&c->generation, generation, std::min<Clock::duration>(kSlice, deadline - now));
  }
}

}  // namespace neuron_rt
