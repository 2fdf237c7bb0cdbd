// The simulated interconnect between the cores of processes on one host: the ranks of a process
// group meet in a shared-memory segment (created and mapped by the Python layer,
// torch_neuronx/distributed/shared_memory.py) whose first page is a LinkControl. The barrier is
// how a rank knows its peers have written (or read) their slots of the segment; it names a peer
// that died or did not come in time instead of waiting forever.
#pragma once

#include <atomic>
#include <cstdint>

namespace neuron_rt {

constexpr int kMaxLinkRanks = 64;

struct LinkControl {
  std::atomic<uint32_t> arrived;     // ranks at the current barrier
  std::atomic<uint32_t> generation;  // futex word: bumped by the last rank to arrive
  std::atomic<uint32_t> failed;      // set by a rank that gave up: every later barrier fails
  uint32_t failed_rank;
  std::atomic<int32_t> pids[kMaxLinkRanks];
  std::atomic<uint64_t> arrivals[kMaxLinkRanks];  // barriers each rank has entered
};
static_assert(sizeof(LinkControl) <= 4096, "the control block is the segment's first page");

// Whether process `pid` is gone or a zombie (exited, not yet reaped by its launcher).
bool process_exited(int pid);

// Records the calling process as `rank` (the segment starts zeroed).
void link_join(void* control, int rank);

// Returns once all `size` ranks have entered the barrier. Throws std::runtime_error naming the
// missing ranks when one of them exited, when `timeout_seconds` pass, or when another rank
// gave up (the link is then broken for good).
void link_barrier(void* control, int rank, int size, double timeout_seconds);

}  // namespace neuron_rt
