// What the launching threads and the cores' workers hand the collector: correlation ids, the
// launches' host-side events, the kernels' records, CPU fallbacks and synchronize waits.
#include "collector.h"

#include <ThreadUtil.h>

namespace torch_neuronx::profiler {

std::atomic<bool> recording_now{false};

namespace {

thread_local std::vector<uint64_t> tls_correlation;
thread_local int tls_fallbacks = 0;         // live FallbackSpans on this thread

// Correlation id of the innermost framework operator on this thread while a profiler records
// (Kineto pushes it at operator entry), tagged with the session; 0 otherwise.
uint64_t correlation_id() {
  return recording_now.load(std::memory_order_relaxed) && !tls_correlation.empty() ? tls_correlation.back() : 0;
}

}  // namespace

// PyTorch numbers operators from 1 in every session: ids are tagged with the session they were
// pushed in, so a kernel launched in an earlier session (or under an operator whose exit Kineto
// never delivered) is reported unlinked rather than linked to an unrelated operator.
constexpr int kSessionShift = 40;
std::atomic<uint64_t> session_number{0};

uint64_t untag(uint64_t tagged) {
  return tagged >> kSessionShift == session_number.load() ? tagged & ((1ull << kSessionShift) - 1) : 0;
}

void push_correlation(uint64_t id) { tls_correlation.push_back(session_number.load() << kSessionShift | id); }
void pop_correlation() {
  if (!tls_correlation.empty()) tls_correlation.pop_back();
}

Collector& collector() {
  static auto* c = new Collector();
  return *c;
}

// The launch token of a CPU fallback's kernel: its FallbackSpan records it, on its own lane.
constexpr uint64_t kFallbackKernel = ~uint64_t{0};

void on_kernel(int device, int stream, const neuron_rt::LaunchInfo& info, neuron_rt::Nanos start,
               neuron_rt::Nanos end) {
  if (info.correlation == kFallbackKernel) return;
  collector().add({device, stream, info.name, 0, start, end, info.correlation, {}});
}

bool recording() { return recording_now.load(std::memory_order_relaxed); }

uint64_t on_launch(int device, std::string args) {
  if (!recording()) return 0;
  if (tls_fallbacks) return kFallbackKernel;
  auto& c = collector();
  std::lock_guard<std::mutex> lock(c.mu);
  if (!c.profiles(device)) return 0;
  // With DEVICE, launch events follow their (capped) kernels; without it, the cap applies to them.
  if (!c.modes.device && !c.take_slot(device)) return 0;
  const uint64_t token = ++c.next_launch;
  c.launches[token] = c.host_events.size();
  c.host_events.push_back({device, "neuronLaunchKernel", libkineto::systemThreadId(), correlation_id(),
                           neuron_rt::now_ns(), 0, token, std::move(args)});
  return token;
}

void on_enqueued(uint64_t token) {
  if (!token) return;
  auto& c = collector();
  std::lock_guard<std::mutex> lock(c.mu);  // a session may be starting: its modes change under it
  if (!c.modes.runtime) return;  // only RUNTIME's launch events need the end
  if (auto it = c.launches.find(token); it != c.launches.end()) c.host_events[it->second].end = neuron_rt::now_ns();
}

std::string describe_launch(c10::ArrayRef<c10::IValue> inputs, c10::ArrayRef<c10::IValue> outputs) {
  return recording() && !tls_fallbacks ? describe(inputs, outputs) : std::string();
}

FallbackSpan::FallbackSpan(int device, std::string name)
    : device_(device),
      name_(std::move(name)),
      correlation_(correlation_id()),
      start_(recording() ? neuron_rt::now_ns() : 0) {
  tls_fallbacks++;
}

FallbackSpan::~FallbackSpan() {
  tls_fallbacks--;
  if (start_ && recording())
    collector().add({device_, kFallbackLane, name_, correlation_, start_, neuron_rt::now_ns(), 0, std::move(args_)});
}

void FallbackSpan::set_args(c10::ArrayRef<c10::IValue> inputs, c10::ArrayRef<c10::IValue> outputs) {
  if (start_ && recording()) args_ = describe(inputs, outputs);
}

namespace {
bool records_runtime() {
  auto& c = collector();
  std::lock_guard<std::mutex> lock(c.mu);
  return c.modes.runtime;
}
}  // namespace

SyncSpan::SyncSpan(int device, const char* name)
    : device_(device), name_(name), start_(recording() && records_runtime() ? neuron_rt::now_ns() : 0) {}

SyncSpan::~SyncSpan() {
  if (!start_ || !recording()) return;
  auto& c = collector();
  std::lock_guard<std::mutex> lock(c.mu);
  c.host_events.push_back({device_, name_, libkineto::systemThreadId(), correlation_id(), start_, neuron_rt::now_ns()});
}

}  // namespace torch_neuronx::profiler
