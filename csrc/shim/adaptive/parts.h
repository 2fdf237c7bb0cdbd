// Adaptive eager's parts, shared by the files that implement it: a segment and the recording of
// its calls (segment_record.cpp), the tables of observed and compiled segments and the compile
// requests (compile_requests.cpp), the launch of what a segment holds (fused_launch.cpp), and the
// switch, the cores' segments and their boundaries (adaptive.cpp). adaptive.h is what the rest
// of the shim uses.
#pragma once

#include <c10/util/SmallVector.h>
#include <torch/csrc/utils/pybind.h>

#include <array>
#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "adaptive.h"
#include "fused_placement.h"
#include "../host_aliases.h"
#include "../kernel_object.h"

namespace torch_neuronx::adaptive {

inline uint64_t mix(uint64_t h, int64_t word) { return (h ^ static_cast<uint64_t>(word)) * 1099511628211ull; }
inline constexpr uint64_t kSeed = 1469598103934665603ull;

// A storage a segment has seen: an input from before it, or a fresh result of one of its calls.
struct SeenStorage {
  c10::weak_intrusive_ptr<c10::StorageImpl> storage;  // keeps the identity; liveness of results
  int producer = -1;                                  // the call that made it (-1: an input)
  const void* data = nullptr;                         // where its memory is (inputs)
};

// The C++ entry of a segment compiled with Inductor's C++ wrapper (kernel_source.py): it takes the
// host tensors as owned handles (new at::Tensor) and returns an error message or null. It needs
// no interpreter lock, so a fused kernel runs beside the program's Python thread.
using NativeEntry = const char* (*)(void** inputs);

// One compiled segment, installed by Python (torch_neuronx/adaptive/segments.py).
struct Fused {
  std::vector<int64_t> key;                        // the segment's words, checked on a hash match
  std::vector<bool> live;                          // which results it writes (those still held)
  std::vector<int> input_refs;                     // tensor references it reads, in its order
  std::vector<int> outputs;                        // results it writes, in its order
  std::vector<int> runtime_values;                 // scalar values it takes as 0-dim tensors
  std::vector<std::pair<int, c10::IValue>> fixed;  // scalar values compiled in, checked
  std::shared_ptr<KernelObject> kernel;            // kernel(list of host tensors)
  NativeEntry entry = nullptr;                     // the same code's C++ entry, when it has one
  std::string name, replaced;                      // in the queue and the profiler
};

// What Python needs to build a segment's graph (kept for every segment: the one that reaches
// the compile count has it when it ends). Per call, its operator and roles; the calls' arguments
// and returns follow each other in flat lists (a call has as many arguments as roles;
// `returns_end` ends each call's returns), so describing a call adds to lists that keep their
// memory from segment to segment (Segment::clear) instead of making lists of its own.
struct Description {
  std::vector<c10::OperatorHandle> ops;
  std::vector<const std::vector<Role>*> roles;
  std::vector<c10::IValue> args;     // tensors as reference numbers, scalars as value numbers
  std::vector<c10::IValue> returns;  // per return: storage number(s), or None
  std::vector<size_t> returns_end;
  std::vector<int64_t> refs;  // per reference: storage (-1: a CPU scalar), dtype, dim, sizes, strides, offset
  std::vector<int64_t> ref_at;    // where each reference starts in `refs`
  std::vector<int> producers;     // per storage: the call that made it, -1 for inputs
  std::vector<int> results;       // fresh results, by storage number
  std::vector<int64_t> layouts;   // per fresh result: dtype, dim, sizes, strides (as the kernel makes it)
  std::vector<int> reuses;        // per fresh result: the input whose freed memory it got, or -1

  void clear() {
    ops.clear(), roles.clear(), args.clear(), returns.clear(), returns_end.clear(), refs.clear(), ref_at.clear();
    producers.clear(), results.clear(), layouts.clear(), reuses.clear();
  }
};

struct Segment {
  int stream = -1;
  std::thread::id thread;
  std::chrono::steady_clock::time_point last;
  uint64_t hash = kSeed;
  std::vector<uint64_t> chain;  // hash after each call
  std::vector<int64_t> key;
  std::vector<c10::IValue> values;
  std::vector<SeenStorage> storages;
  std::unordered_map<const c10::StorageImpl*, int> storage_index;
  Description desc;
  bool matching = false;          // calls are held back: it may become a compiled segment
  std::vector<Call> held;
  // While held: per reference and per fresh result, its record (held call, index in its records)
  std::vector<std::pair<int, int64_t>> ref_records, result_records;
  size_t calls() const { return chain.size(); }

  // Empty again, for the core's next segment: the containers keep their memory, which the
  // program's next segments, alike, reuse instead of growing new containers call by call.
  void clear() {
    stream = -1, hash = kSeed, matching = false;
    chain.clear(), key.clear(), values.clear(), storages.clear(), storage_index.clear(), desc.clear();
    held.clear(), ref_records.clear(), result_records.clear();
  }
};

struct Observation {
  int count = 0;
  enum State { kObserving, kCompiling, kInstalled, kFailed } state = kObserving;
  std::vector<c10::IValue> first_values;
  // Of the observation that asked for the compile:
  std::vector<c10::IValue> values;
  std::vector<int64_t> key;
  std::vector<bool> live;
  std::vector<uint64_t> chain;
};

struct Counters {
  int64_t segments_seen = 0, segments_compiled = 0, compile_failures = 0, fused_launches = 0, calls_fused = 0,
          calls_held_then_single = 0, fused_refused = 0;
};

inline std::mutex tables_mu;  // everything below
inline std::unordered_map<uint64_t, Observation> observations;
inline std::unordered_map<uint64_t, std::shared_ptr<const Fused>> fused_by_hash;
inline std::unordered_set<uint64_t> prefixes;
inline Counters counters;
inline std::shared_ptr<KernelObject> compiler;  // Python: compiler(segment_id, description)
inline std::atomic<FusedPlacement::Mode> placement_mode{FusedPlacement::Mode::kAuto};
inline std::atomic<uint64_t> installs{0};  // fused kernels installed so far

struct CoreSegment {
  std::mutex mu;
  Segment seg;
  FusedPlacement placement;
};
inline std::array<CoreSegment, 64> cores;

inline CoreSegment& core_segment(c10::DeviceIndex device) { return cores.at(static_cast<size_t>(device)); }

using Actions = std::vector<std::function<void()>>;

// --- recording a call into its segment (segment_record.cpp)
// The words `call` adds to the segment's key: its plan (operator and signature) and where each
// tensor comes from (which storage the segment has seen, at which offset). Results add only the
// input whose freed memory each got (the plan fixes the rest).
struct CallWords {
  c10::SmallVector<int64_t, 24> words;  // on the stack for a call's usual handful of tensors
  size_t reuses_at = 0;                 // the results' words: one per result tensor, in order
};

CallWords call_words(const Segment& s, const Call& call);
uint64_t hash_after(const Segment& s, c10::ArrayRef<int64_t> words);

// Records a call into the segment: its words, its description, its values — and, for a call the
// segment holds, where a fused kernel would find its tensors: the call's records, numbered as its
// references and results are (`held`: its index among the held calls, or -1).
void record(Segment& s, const Call& call, const CallWords& cw, int held);

// Which fresh results the program still holds, and the segment's identity with them: a compiled
// segment writes only those.
struct Liveness {
  std::vector<bool> live;
  uint64_t id = 0;
};

Liveness liveness(const Segment& s);

// --- launching what a segment holds (fused_launch.cpp)
void launch_alone(c10::DeviceIndex device, Call& call, Actions& actions);
// Launches what the segment holds: one fused kernel when one matches, else each call.
bool launch_held(c10::DeviceIndex device, Segment& s, const Liveness& l, Actions& actions);

// --- compiled segments (compile_requests.cpp)
// A compile request for a segment seen often enough: the description as Python objects.
void request_compile(uint64_t id, std::shared_ptr<Description> d, std::vector<c10::IValue> values,
                     std::vector<c10::IValue> first_values, std::vector<bool> live, Actions& actions);
// Installs the compiled kernel of segment `id` (asked for by request_compile).
void install(uint64_t id, pybind11::object kernel, const std::string& library, std::vector<int> input_refs,
             std::vector<int> outputs, std::vector<int> runtime_values, std::string name, std::string replaced);
void fail(uint64_t id);
pybind11::object dtype_object(c10::ScalarType dtype);

}  // namespace torch_neuronx::adaptive
