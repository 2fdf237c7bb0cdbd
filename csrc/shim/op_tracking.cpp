#include "op_tracking.h"

#include <ATen/record_function.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <set>
#include <unordered_map>
#include <utility>
#include <vector>

#include "../runtime/runtime.h"
#include "native_kernel/native_kernel.h"

namespace torch_neuronx {

namespace {

struct Record {
  std::atomic<int64_t> executed{0}, fallbacks{0};
  std::atomic<bool> kernel_fell_back{false};  // its own kernel, not only a part of it
};

// One operator being called on this thread. `name` is the schema's name (stable, one per
// overload), which both RecordFunction and the kernels' operator handles point at.
struct Frame {
  const char* name;
  bool device = false, on_cpu = false, kernel_on_cpu = false;
};

std::mutex mu;
std::unordered_map<std::string, std::unique_ptr<Record>>& records() {  // by full name
  static auto* m = new std::unordered_map<std::string, std::unique_ptr<Record>>();
  return *m;
}
std::set<std::string>& warned() {
  static auto* s = new std::set<std::string>();
  return *s;
}
bool float64_warned = false;

thread_local std::vector<Frame> frames;
thread_local std::unordered_map<const char*, Record*> record_of_name;  // this thread's lookups

Record& record_named(const std::string& full) {
  std::lock_guard<std::mutex> lock(mu);
  auto& slot = records()[full];
  if (!slot) slot = std::make_unique<Record>();
  return *slot;
}

void count(Record& r, bool on_cpu, bool kernel_on_cpu) {
  (on_cpu ? r.fallbacks : r.executed).fetch_add(1, std::memory_order_relaxed);
  if (kernel_on_cpu) r.kernel_fell_back = true;
}

// Operators run by a kernel itself (on a core's worker, or on the calling thread while it runs
// a kernel there) are the kernel's implementation, not the user's calls.
bool in_kernel() { return neuron_rt::executing_device() >= 0; }

std::unique_ptr<at::ObserverContext> enter(const at::RecordFunction& fn) {
  if (!in_kernel()) frames.push_back({fn.name()});
  return nullptr;
}

void leave(const at::RecordFunction& fn, at::ObserverContext*) {
  if (in_kernel() || frames.empty()) return;
  const Frame top = frames.back();
  frames.pop_back();
  if (!top.device) return;
  if (!frames.empty()) {
    frames.back().device = true;
    frames.back().on_cpu |= top.on_cpu;
  }
  Record*& r = record_of_name[top.name];
  if (!r) {
    const auto op = fn.operator_name();
    if (!op) return;  // a named C++ scope (RECORD_FUNCTION), not an operator
    r = &record_named(full_name(*op));
  }
  count(*r, top.on_cpu, top.kernel_on_cpu);
}

}  // namespace

void start_op_tracking() {
  static std::once_flag once;
  std::call_once(once, [] {
    at::addGlobalCallback(at::RecordFunctionCallback(&enter, &leave).scopes({at::RecordScope::FUNCTION}));
  });
}

void track_kernel(const c10::OperatorHandle& op, bool on_cpu) {
  if (!frames.empty() && frames.back().name == op.schema().name().c_str()) {
    Frame& own = frames.back();
    own.device = true;
    own.on_cpu |= on_cpu;
    own.kernel_on_cpu |= on_cpu;
    return;
  }
  // Reached without a frame of its own (recording switched off, or called from a kernel).
  count(record_named(full_name(op.operator_name())), on_cpu, on_cpu);
  if (!frames.empty()) {
    frames.back().device = true;
    frames.back().on_cpu |= on_cpu;
  }
}

void track_python_kernel() {
  if (!in_kernel() && !frames.empty()) frames.back().device = true;
}

bool first_fallback_warning(const std::string& op) {
  std::lock_guard<std::mutex> lock(mu);
  return warned().insert(op).second;
}

bool first_float64_fallback() {
  std::lock_guard<std::mutex> lock(mu);
  return !std::exchange(float64_warned, true);
}

std::map<std::string, int64_t> executed_ops() {
  std::lock_guard<std::mutex> lock(mu);
  std::map<std::string, int64_t> out;
  for (const auto& [name, r] : records())
    if (const auto n = r->executed.load()) out[name] = n;
  return out;
}

std::map<std::string, int64_t> fallback_ops(bool kernels_only) {
  std::lock_guard<std::mutex> lock(mu);
  std::map<std::string, int64_t> out;
  for (const auto& [name, r] : records())
    if (const auto n = r->fallbacks.load(); n && (!kernels_only || r->kernel_fell_back)) out[name] = n;
  return out;
}

void clear_op_tracking() {
  std::lock_guard<std::mutex> lock(mu);
  for (auto& [name, r] : records()) {
    r->executed = r->fallbacks = 0;
    r->kernel_fell_back = false;
  }
  warned().clear();
  float64_warned = false;
}

}  // namespace torch_neuronx
