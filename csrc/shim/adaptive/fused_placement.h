// Where adaptive eager's fused kernels run, chosen by timing the program's own loop.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "../../runtime/runtime.h"

namespace torch_neuronx::adaptive {

// A fused kernel can run on the core's worker behind the queue (the program thread goes on
// dispatching while it computes) or on the program thread with the compute threads once the
// queue is empty (nothing competes for the cores; eager operators then follow it there). The
// first wins when dispatch is a large share of the loop and there are cores to spare, the second
// when the loop's kernels are short and the cores are busy. Neither the segment nor the machine
// says which (measured: the TinyGPT step is 15% faster on the program thread, the SwiGLU stack
// 13% slower), so the program's loop is timed both ways.
//
// The loop is the period of the sequence of fused kernels launched since the last install. The
// two placements then take turns two iterations at a time, the second of each timed (the first
// pays for the switch), until each was timed kTurns times; the one whose paired times have the
// lower median is kept, and timed again every kRecheck iterations (programs change phase). A
// launch that breaks the period starts over. Until a choice is made, and for programs without a
// loop, kernels run on the worker (as eager operators do).
class FusedPlacement {
 public:
  enum class Mode { kAuto, kWorker, kProgram };
  static constexpr int kTurns = 8;
  static constexpr int64_t kRecheck = 2000;

  // The host work of fused kernel `kernel` (its identity) launched now; `installs` counts the
  // fused kernels installed so far (a new one changes the loop).
  neuron_rt::HostWork place(const void* kernel, uint64_t installs, Mode mode);

  struct Report {
    std::string state;                // "finding the loop", "timing", "worker", "program thread"
    int64_t loop_launches = 0;        // fused launches per iteration (0: none found)
    double program_vs_worker = 0.0;   // median time ratio of the last timing (0: none yet)
  };
  Report report(Mode mode) const;
  bool placed_any() const { return placed_ > 0; }

 private:
  enum class State { kFinding, kTiming, kDecided };
  using Clock = std::chrono::steady_clock;

  void restart(uint64_t installs);
  void find_loop();
  void at_iteration(Clock::time_point now);
  void start_timing();

  int64_t placed_ = 0;
  State state_ = State::kFinding;
  uint64_t installs_ = ~0ull;
  std::vector<const void*> seen_;  // kFinding: the launches so far; after: one iteration's
  int64_t launches_ = 0;           // since the loop was found
  bool on_program_ = false;        // the current placement
  int64_t iterations_ = 0;         // since timing (or the choice) started
  Clock::time_point iteration_start_;
  std::vector<double> times_[2];   // per placement (worker, program): timed iterations, seconds
  double ratio_ = 0.0;
};

}  // namespace torch_neuronx::adaptive
