#include "fused_placement.h"

#include <algorithm>

namespace torch_neuronx::adaptive {

namespace {

// The sequence is checked for a loop when this many launches were seen, then at each doubling
// up to kMaxSeen (loops of up to kMaxSeen / 3 fused launches); past it the older half is dropped.
constexpr size_t kFirstCheck = 24;
constexpr size_t kMaxSeen = 768;

// Whether `seen` ends in a stretch of period `p`: its last max(3p, half) launches, so that runs
// of one kernel (identical layers) inside a longer loop are not taken for the loop.
bool ends_periodic(const std::vector<const void*>& seen, size_t p) {
  const size_t n = seen.size(), length = std::max(3 * p, n / 2);
  for (size_t i = n - length; i + p < n; ++i)
    if (seen[i] != seen[i + p]) return false;
  return true;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
}

}  // namespace

neuron_rt::HostWork FusedPlacement::place(const void* kernel, uint64_t installs, Mode mode) {
  placed_++;
  if (mode != Mode::kAuto) return mode == Mode::kProgram ? neuron_rt::HostWork::kClaim : neuron_rt::HostWork::kNever;
  if (installs != installs_) restart(installs);
  if (state_ != State::kFinding) {
    const size_t at = static_cast<size_t>(launches_ % static_cast<int64_t>(seen_.size()));
    if (seen_[at] != kernel) {
      restart(installs);  // the program left the loop
    } else {
      if (at == 0) at_iteration(Clock::now());
      launches_++;
    }
  }
  if (state_ == State::kFinding) {
    seen_.push_back(kernel);
    find_loop();
  }
  return on_program_ ? neuron_rt::HostWork::kClaim : neuron_rt::HostWork::kNever;
}

void FusedPlacement::restart(uint64_t installs) {
  installs_ = installs;
  state_ = State::kFinding;
  seen_.clear();
  launches_ = 0;
  on_program_ = false;
}

void FusedPlacement::find_loop() {
  const size_t n = seen_.size(), checks = n / kFirstCheck;
  if (n % kFirstCheck != 0 || (checks & (checks - 1)) != 0) return;  // n = kFirstCheck * 2^k
  for (size_t p = 1; p <= n / 3; ++p) {
    if (!ends_periodic(seen_, p)) continue;
    seen_.erase(seen_.begin(), seen_.end() - static_cast<std::ptrdiff_t>(p));  // one iteration, from the next launch
    launches_ = 0;
    start_timing();
    return;
  }
  if (n >= kMaxSeen) seen_.erase(seen_.begin(), seen_.begin() + static_cast<std::ptrdiff_t>(n / 2));
}

void FusedPlacement::start_timing() {
  state_ = State::kTiming;
  iterations_ = 0;
  times_[0].clear();
  times_[1].clear();
}

void FusedPlacement::at_iteration(Clock::time_point now) {
  if (state_ == State::kDecided && iterations_ >= kRecheck) start_timing();
  if (state_ == State::kTiming && iterations_ > 0) {
    // Iteration k runs on placement (k / 2) % 2 and is timed when k is odd.
    const int64_t ended = iterations_ - 1;
    if (ended % 2 == 1)
      times_[(ended / 2) % 2].push_back(std::chrono::duration<double>(now - iteration_start_).count());
    if (times_[1].size() == static_cast<size_t>(kTurns)) {
      std::vector<double> ratios;
      for (int i = 0; i < kTurns; ++i) ratios.push_back(times_[1][i] / times_[0][i]);
      ratio_ = median(std::move(ratios));
      on_program_ = ratio_ < 1.0;
      state_ = State::kDecided;
      iterations_ = 0;
    }
  }
  if (state_ == State::kTiming) on_program_ = (iterations_ / 2) % 2 == 1;
  iteration_start_ = now;
  iterations_++;
}

FusedPlacement::Report FusedPlacement::report(Mode mode) const {
  Report r;
  r.state = mode == Mode::kWorker       ? "worker"
            : mode == Mode::kProgram    ? "program thread"
            : state_ == State::kFinding ? "finding the loop"
            : state_ == State::kTiming  ? "timing"
            : on_program_               ? "program thread"
                                        : "worker";
  r.loop_launches = state_ == State::kFinding ? 0 : static_cast<int64_t>(seen_.size());
  r.program_vs_worker = ratio_;
  return r;
}

}  // namespace torch_neuronx::adaptive
