// Adaptive eager's switch and settings, each core's current segment and its boundaries (close:
// launch what it holds, count it, ask for its compile), and the _C functions (adaptive.h).
#include "adaptive.h"

#include <algorithm>
#include <map>

#include "parts.h"
#include "../device.h"

namespace py = pybind11;

namespace torch_neuronx::adaptive {

namespace {

std::atomic<bool> on{false};
std::atomic<int> compile_after{2};  // a segment seen this many times is compiled
// A segment ends after this many calls (its fused kernel then runs while the host goes on) ...
std::atomic<int> max_calls{32};
std::atomic<int64_t> idle_limit_us{100000};  // ... or when the host sends nothing for this long
// Shorter segments are not compiled: a fused kernel for one or two calls saves less than holding
// them back and calling into Python costs.
constexpr size_t kMinCalls = 3;
constexpr size_t kMaxObservations = 1 << 16;  // segments only observed, kept at most

// Ends the segment: launches what it holds, counts it, asks for its compile.
void close(c10::DeviceIndex device, Segment& s, Actions& actions) {
  if (s.calls() == 0) return;
  const bool observed = s.calls() >= kMinCalls;
  if (s.held.empty() && !observed) {  // nothing to launch or count: the live mask is not needed
    s.clear();
    return;
  }
  const Liveness l = liveness(s);
  const bool fused = launch_held(device, s, l, actions);
  if (!fused && observed) {
    const uint64_t id = l.id;
    bool ask = false;
    std::vector<c10::IValue> first;
    {
      std::lock_guard<std::mutex> lock(tables_mu);
      ++counters.segments_seen;
      // A program whose segments never repeat (shapes changing every step) would grow the table
      // without end: past the limit, the segments only observed so far are forgotten.
      if (observations.size() >= kMaxObservations)
        std::erase_if(observations, [](const auto& entry) { return entry.second.state == Observation::kObserving; });
      auto& o = observations[id];
      if (o.count++ == 0) o.first_values = s.values;
      if (o.state == Observation::kObserving && o.count >= compile_after.load() && compiler) {
        o.state = Observation::kCompiling;
        ask = true;
        first = o.first_values;
        o.values = s.values;
        o.key = s.key;
        o.live = l.live;
        o.chain = s.chain;
      }
    }
    if (ask)
      request_compile(id, std::make_shared<Description>(std::move(s.desc)), std::move(s.values), std::move(first),
                      l.live, actions);
  }
  s.clear();
}

void run(Actions& actions) {
  for (auto& a : actions) a();
}

bool any_prefix(uint64_t h) {
  std::lock_guard<std::mutex> lock(tables_mu);
  return prefixes.count(h) > 0;
}

}  // namespace

bool enabled() { return on.load(std::memory_order_relaxed); }

namespace {
void end_all_segments() {
  for (size_t i = 0; i < cores.size(); ++i)
    if (neuron_rt::Runtime::get().core_initialized(static_cast<int>(i))) end_segment(static_cast<c10::DeviceIndex>(i));
}
}  // namespace

void set_enabled(bool enable) {
  if (!enable) end_all_segments();
  on = enable;
}

void submit(c10::DeviceIndex device, Call call) {
  Actions actions;
  {
    auto& cs = core_segment(device);
    std::lock_guard<std::mutex> lock(cs.mu);
    Segment& s = cs.seg;
    const int stream = static_cast<int>(current_stream(device).id());
    const auto now = std::chrono::steady_clock::now();
    if (s.calls() && (stream != s.stream || std::this_thread::get_id() != s.thread ||
                      s.calls() >= static_cast<size_t>(max_calls.load()) ||
                      now - s.last > std::chrono::microseconds(idle_limit_us.load())))
      close(device, s, actions);
    while (true) {
      if (!s.calls()) {
        s.stream = stream;
        s.thread = std::this_thread::get_id();
        std::lock_guard<std::mutex> lock(tables_mu);
        s.matching = !prefixes.empty();
      }
      s.last = now;
      const CallWords words = call_words(s, call);
      if (s.matching && any_prefix(hash_after(s, words.words))) {  // may still become a compiled segment
        record(s, call, words, static_cast<int>(s.held.size()));
        call.args.clear();  // the caller's tensors: holding them would keep its results alive
        call.outputs.clear();
        s.held.push_back(std::move(call));
        break;
      }
      // It leaves every compiled segment: the calls held so far may be one by themselves, and
      // this call starts the next segment.
      if (s.matching && !s.held.empty() && launch_held(device, s, liveness(s), actions)) {
        s.clear();
        continue;
      }
      s.matching = false;  // the held calls went one by one: the segment goes on, observed
      record(s, call, words, /*held=*/-1);
      launch_alone(device, call, actions);
      break;
    }
  }
  run(actions);
}

void end_segment(c10::DeviceIndex device) {
  if (!enabled() || device < 0) return;
  Actions actions;
  {
    auto& cs = core_segment(device);
    std::lock_guard<std::mutex> lock(cs.mu);
    close(device, cs.seg, actions);
  }
  run(actions);
}

namespace {

// Forgets every segment, compiled or observed, and the counters (tests; a new compiler).
void reset() {
  end_all_segments();
  std::unordered_map<uint64_t, std::shared_ptr<const Fused>> dropped;  // released without the lock
  {
    std::lock_guard<std::mutex> lock(tables_mu);
    observations.clear();
    dropped.swap(fused_by_hash);
    prefixes.clear();
    counters = Counters();
  }
  for (auto& cs : cores) {
    std::lock_guard<std::mutex> lock(cs.mu);
    cs.placement = FusedPlacement();
  }
}

const std::array<std::pair<const char*, FusedPlacement::Mode>, 3> kPlacementModes{{
    {"auto", FusedPlacement::Mode::kAuto},
    {"worker", FusedPlacement::Mode::kWorker},
    {"program", FusedPlacement::Mode::kProgram},
}};

}  // namespace

void bind(py::module_& m) {
  m.def("_adaptive_set_enabled", &set_enabled, py::call_guard<py::gil_scoped_release>());
  m.def("_adaptive_enabled", &enabled);
  m.def("_adaptive_configure", [](int after, int calls, int64_t idle_us) {
    compile_after = std::max(1, after);
    max_calls = std::max(1, calls);
    idle_limit_us = std::max<int64_t>(0, idle_us);
  });
  m.def("_adaptive_set_compiler", [](py::object f) {
    auto holder = f.is_none() ? nullptr : std::make_shared<KernelObject>(std::move(f));
    py::gil_scoped_release nogil;  // the old one is released under the lock it takes
    std::lock_guard<std::mutex> lock(tables_mu);
    compiler.swap(holder);
  });
  m.def("_adaptive_install", &install);
  m.def("_adaptive_dtype", [](int64_t scalar_type) { return dtype_object(static_cast<c10::ScalarType>(scalar_type)); });
  m.def("_adaptive_failed", &fail);
  m.def("_adaptive_reset", &reset, py::call_guard<py::gil_scoped_release>());
  m.def("_adaptive_set_placement", [](const std::string& name) {
    for (const auto& [known, mode] : kPlacementModes)
      if (name == known) return placement_mode.store(mode);
    TORCH_CHECK_VALUE(false, "adaptive eager: fused placement must be 'auto', 'worker' or 'program', got '", name, "'");
  });
  m.def("_adaptive_placement", [] {
    for (const auto& [name, mode] : kPlacementModes)
      if (mode == placement_mode.load()) return std::string(name);
    return std::string();
  });
  // Per core that launched fused kernels: where they run now and what the last timing found.
  m.def("_adaptive_placements", [] {
    std::map<int, FusedPlacement::Report> reports;
    {
      py::gil_scoped_release nogil;  // a core's lock is held by launches that may wait for the interpreter
      for (size_t i = 0; i < cores.size(); ++i) {
        std::lock_guard<std::mutex> lock(cores[i].mu);
        if (cores[i].placement.placed_any())
          reports[static_cast<int>(i)] = cores[i].placement.report(placement_mode.load());
      }
    }
    py::dict out;
    for (const auto& [core, r] : reports)
      out[py::int_(core)] = py::dict(py::arg("state") = r.state, py::arg("loop_launches") = r.loop_launches,
                                     py::arg("program_vs_worker") = r.program_vs_worker);
    return out;
  });
  m.def("_adaptive_counters", [] {
    std::lock_guard<std::mutex> lock(tables_mu);
    const Counters& c = counters;
    return std::map<std::string, int64_t>{{"segments_seen", c.segments_seen},
                                          {"segments_compiled", c.segments_compiled},
                                          {"compile_failures", c.compile_failures},
                                          {"fused_launches", c.fused_launches},
                                          {"calls_fused", c.calls_fused},
                                          {"calls_held_then_single", c.calls_held_then_single},
                                          {"fused_refused", c.fused_refused}};
  });
}

}  // namespace torch_neuronx::adaptive
