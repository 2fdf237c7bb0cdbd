// Kineto child profiler for the neuron device (REGISTER_PRIVATEUSE1_PROFILER), and the legacy
// ProfilerStubs used by torch.autograd.profiler.profile(use_kineto=False).
//
// Kineto pushes each framework operator's correlation id on the operator's thread; launches
// carry the innermost one to the queue, whose worker reports each kernel's interval. The
// session turns those into CONCURRENT_KERNEL / GPU_MEMCPY activities (pid = core, tid =
// stream) linked to the launching operator, which is what key_averages' device columns use.
//
// Kineto's GenericTraceActivity::addMetadata formats with fmt, whose compiled part libtorch does
// not export: use fmt header-only in this file.
#define FMT_HEADER_ONLY
#include "profiler.h"

#include <IActivityProfiler.h>
#include <c10/util/ApproximateClock.h>
#include <libkineto.h>
#include <output_base.h>
#include <pybind11/pybind11.h>
#include <torch/csrc/profiler/standalone/privateuse1_profiler.h>
#include <torch/csrc/profiler/stubs/base.h>

#include <atomic>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <vector>

#include "device.h"

namespace torch_neuronx::profiler {

namespace {

using neuron_rt::Nanos;
using libkineto::ActivityType;

// Fallbacks get a lane of their own beside the core's streams.
constexpr int kFallbackLane = 1000;

struct Record {
  int device, lane;
  std::string name;
  uint64_t correlation;
  Nanos start, end;
};

thread_local std::vector<uint64_t> tls_correlation;
std::atomic<bool> recording{false};

// PyTorch numbers operators from 1 in every session: ids are tagged with the session they were
// pushed in, so a kernel launched in an earlier session (or under an operator whose exit Kineto
// never delivered) is reported unlinked rather than linked to an unrelated operator.
constexpr int kSessionShift = 40;
std::atomic<uint64_t> session_number{0};

uint64_t untag(uint64_t tagged) {
  return tagged >> kSessionShift == session_number.load() ? tagged & ((1ull << kSessionShift) - 1) : 0;
}

// What the active session collects; one session records at a time (Kineto's rule too).
struct Collector {
  std::mutex mu;
  std::vector<Record> records;
  std::set<int> cores;           // empty: every core
  size_t max_events_per_core = 0; // 0: unlimited
  std::map<int, size_t> counts;
  size_t dropped = 0;

  void add(Record r) {
    r.correlation = untag(r.correlation);
    std::lock_guard<std::mutex> lock(mu);
    if (!cores.empty() && !cores.count(r.device)) return;
    if (max_events_per_core && counts[r.device] >= max_events_per_core) {
      dropped++;
      return;
    }
    counts[r.device]++;
    records.push_back(std::move(r));
  }
};

Collector& collector() {
  static auto* c = new Collector();
  return *c;
}

void on_kernel(int device, int stream, const neuron_rt::LaunchInfo& info, Nanos start, Nanos end) {
  collector().add({device, stream, info.name, info.correlation, start, end});
}

bool is_copy(const std::string& name) {
  return name.find("host to device") != std::string::npos ||
         name.find("device to host") != std::string::npos ||
         name.find("core to core") != std::string::npos;
}

// "cores:0,2;max_events_per_nc:100": the CUSTOM_CONFIG value of the Kineto configuration that
// torch_neuronx.profiling.NeuronConfig writes.
void parse_custom_config(const std::string& text, Collector& c) {
  std::istringstream fields(text);
  std::string field;
  while (std::getline(fields, field, ';')) {
    const auto eq = field.find(':');
    if (eq == std::string::npos) continue;
    const std::string key = field.substr(0, eq), value = field.substr(eq + 1);
    if (key == "cores") {
      std::istringstream items(value);
      std::string item;
      while (std::getline(items, item, ',')) c.cores.insert(std::stoi(item));
    } else if (key == "max_events_per_nc") {
      c.max_events_per_core = std::stoull(value);
    }
  }
}

class Session final : public libkineto::IActivityProfilerSession {
 public:
  explicit Session(const libkineto::Config& config) {
    auto& c = collector();
    std::lock_guard<std::mutex> lock(c.mu);
    c.records.clear();
    c.counts.clear();
    c.cores.clear();
    c.max_events_per_core = 0;
    c.dropped = 0;
    parse_custom_config(config.getCustomConfig(), c);
  }

  void start() override {
    session_number++;
    recording = true;
    neuron_rt::set_kernel_observer(&on_kernel);
    status_ = libkineto::TraceStatus::RECORDING;
  }

  // Kernels still queued when recording stops are not reported: synchronize first, as with
  // CUDA (waiting here could deadlock on a Python kernel that needs the caller's GIL).
  void stop() override {
    neuron_rt::set_kernel_observer(nullptr);
    recording = false;
    auto& c = collector();
    std::lock_guard<std::mutex> lock(c.mu);
    records_.swap(c.records);
    dropped_ = c.dropped;
    status_ = libkineto::TraceStatus::PROCESSING;
  }

  std::vector<std::string> errors() override { return {}; }

  void processTrace(libkineto::ActivityLogger& logger) override {}

  void processTrace(libkineto::ActivityLogger& logger,
                    libkineto::getLinkedActivityCallback linked_activity, int64_t start_time,
                    int64_t end_time) override {
    buffer_ = std::make_unique<libkineto::CpuTraceBuffer>();
    buffer_->span = libkineto::TraceSpan(start_time, end_time, "neuron");
    std::map<int, std::set<int>> lanes;
    for (const Record& r : records_) {
      const bool fallback = r.lane == kFallbackLane;
      const auto type = is_copy(r.name) ? ActivityType::GPU_MEMCPY : ActivityType::CONCURRENT_KERNEL;
      buffer_->emplace_activity(buffer_->span, type, r.name);
      auto& a = *buffer_->activities.back();
      a.startTime = r.start;
      a.endTime = r.end;
      a.id = static_cast<int32_t>(r.correlation);
      a.device = r.device;
      a.resource = r.lane;
      a.threadId = r.lane;
      a.linked = r.correlation ? linked_activity(static_cast<int32_t>(r.correlation)) : nullptr;
      a.addMetadata("device", r.device);
      a.addMetadata("stream", fallback ? -1 : r.lane);
      a.addMetadata("correlation", r.correlation);
      a.addMetadataQuoted("kind", fallback ? "cpu_fallback" : type == ActivityType::GPU_MEMCPY ? "copy" : "kernel");
      a.addMetadataQuoted("timing", fallback ? "host (measured)" : "simulated core (measured)");
      lanes[r.device].insert(r.lane);
      logger.handleActivity(a);
    }
    for (const auto& [device, streams] : lanes) {
      logger.handleDeviceInfo({device, device + 0x1000000, "neuron:" + std::to_string(device),
                               "NeuronCore " + std::to_string(device)}, start_time);
      for (int lane : streams)
        logger.handleResourceInfo({lane, lane, device, lane == kFallbackLane
                                                           ? std::string("CPU fallback (host)")
                                                           : "stream " + std::to_string(lane)},
                                  start_time);
    }
  }

  // Non-null so that Kineto does not label the device lanes "GPU N".
  std::unique_ptr<libkineto::DeviceInfo> getDeviceInfo() override {
    return std::make_unique<libkineto::DeviceInfo>(
        libkineto::DeviceInfo{0, 0x1000000, "neuron:0", "NeuronCore 0"});
  }

  std::vector<libkineto::ResourceInfo> getResourceInfos() override { return {}; }

  std::unique_ptr<libkineto::CpuTraceBuffer> getTraceBuffer() override { return std::move(buffer_); }

  // Operators and user scopes (record_function, e.g. "Torch-Compiled Region") share one id
  // space: a kernel links to the innermost of either.
  void pushCorrelationId(uint64_t id) override { push(id); }
  void popCorrelationId() override { pop(); }
  void pushUserCorrelationId(uint64_t id) override { push(id); }
  void popUserCorrelationId() override { pop(); }

  std::unordered_map<std::string, std::string> getMetadata() override {
    return {{"neuron_simulated", "true"}, {"neuron_dropped_events", std::to_string(dropped_)}};
  }

 private:
  static void push(uint64_t id) { tls_correlation.push_back(session_number.load() << kSessionShift | id); }
  static void pop() {
    if (!tls_correlation.empty()) tls_correlation.pop_back();
  }

  std::vector<Record> records_;
  size_t dropped_ = 0;
  std::unique_ptr<libkineto::CpuTraceBuffer> buffer_;
};

class NeuronActivityProfiler final : public libkineto::IActivityProfiler {
 public:
  const std::string& name() const override { return name_; }

  const std::set<ActivityType>& availableActivities() const override { return activities_; }

  std::unique_ptr<libkineto::IActivityProfilerSession> configure(
      const std::set<ActivityType>& activity_types, const libkineto::Config& config) override {
    if (!activity_types.count(ActivityType::CONCURRENT_KERNEL)) return nullptr;
    return std::make_unique<Session>(config);
  }

  std::unique_ptr<libkineto::IActivityProfilerSession> configure(
      int64_t, int64_t, const std::set<ActivityType>& activity_types,
      const libkineto::Config& config) override {
    return configure(activity_types, config);
  }

 private:
  const std::string name_ = "neuron";
  const std::set<ActivityType> activities_ = {ActivityType::CONCURRENT_KERNEL, ActivityType::GPU_MEMCPY};
};

REGISTER_PRIVATEUSE1_PROFILER(NeuronActivityProfiler);

// Waiting on the queue must not hold the GIL: Python kernels (compiled graphs, kernel-language
// ops) take it to run.
template <class F>
void without_gil(F&& f) {
  if (Py_IsInitialized() && PyGILState_Check()) {
    pybind11::gil_scoped_release nogil;
    f();
  } else {
    f();
  }
}

// The legacy (non-Kineto) profiler brackets each operator with timed events on the current
// stream, as it does with CUDA events.
struct NeuronStubs final : torch::profiler::impl::ProfilerStubs {
  void record(c10::DeviceIndex* device, torch::profiler::impl::ProfilerVoidEventStub* event,
              int64_t* cpu_ns) const override {
    const auto index = current_device();
    if (device) *device = index;
    auto e = std::make_shared<neuron_rt::Event>(index, true);
    core(index).queue.record(static_cast<int>(current_stream(index).id()), e);
    if (cpu_ns) *cpu_ns = c10::getTime();
    *event = std::static_pointer_cast<void>(e);
  }

  float elapsed(const torch::profiler::impl::ProfilerVoidEventStub* a,
                const torch::profiler::impl::ProfilerVoidEventStub* b) const override {
    auto* start = static_cast<neuron_rt::Event*>(a->get());
    auto* end = static_cast<neuron_rt::Event*>(b->get());
    without_gil([&] {
      core(start->device).queue.wait_event(*start);
      core(end->device).queue.wait_event(*end);
    });
    return static_cast<float>(end->timestamp.load() - start->timestamp.load()) / 1e3f;  // us, as PyTorch reads it
  }

  void mark(const char*) const override {}
  void rangePush(const char*) const override {}
  void rangePop() const override {}
  bool enabled() const override { return true; }

  void onEachDevice(std::function<void(int)> op) const override {
    const auto previous = current_device();
    for (int i = 0; i < neuron_rt::Runtime::get().device_count(); ++i) {
      set_current_device(static_cast<c10::DeviceIndex>(i));
      op(i);
    }
    set_current_device(previous);
  }

  void synchronize() const override {
    auto& rt = neuron_rt::Runtime::get();
    without_gil([&] {
      for (int i = 0; i < rt.device_count(); ++i)
        if (rt.core_initialized(i)) rt.core(i).queue.synchronize();
    });
  }
};

const bool stubs_registered = [] {
  static NeuronStubs stubs;
  torch::profiler::impl::registerPrivateUse1Methods(&stubs);
  return true;
}();

}  // namespace

uint64_t correlation_id() {
  return recording.load(std::memory_order_relaxed) && !tls_correlation.empty() ? tls_correlation.back() : 0;
}

FallbackSpan::FallbackSpan(int device, std::string name)
    : device_(device),
      name_(std::move(name)),
      correlation_(correlation_id()),
      start_(recording ? neuron_rt::now_ns() : 0) {}

FallbackSpan::~FallbackSpan() {
  if (start_ && recording) collector().add({device_, kFallbackLane, name_, correlation_, start_, neuron_rt::now_ns()});
}

}  // namespace torch_neuronx::profiler
