// Kineto child profiler for the neuron device (REGISTER_PRIVATEUSE1_PROFILER), and the legacy
// ProfilerStubs used by torch.autograd.profiler.profile(use_kineto=False).
//
// Kineto pushes each framework operator's correlation id on the operator's thread; launches
// carry the innermost one to the queue, whose worker reports each kernel's interval. The
// session turns those into CONCURRENT_KERNEL / GPU_MEMCPY activities (pid = core, tid =
// stream) linked to the launching operator, which is what key_averages' device columns use.
// Each activity carries its kernel's tensors (`inputs`, for the cost model). The NeuronConfig
// modes add host-side events: RUNTIME the launches (with flow arrows to their kernels) and
// synchronize waits; CPU_UTIL / HOST_MEMORY samples of /proc and of the HBM pools.
//
// Kineto's GenericTraceActivity::addMetadata formats with fmt, whose compiled part libtorch does
// not export: use fmt header-only in this file.
#define FMT_HEADER_ONLY
#include "profiler.h"

#include <IActivityProfiler.h>
#include <ThreadUtil.h>
#include <c10/util/ApproximateClock.h>
#include <libkineto.h>
#include <output_base.h>
#include <pybind11/pybind11.h>
#include <torch/csrc/profiler/standalone/privateuse1_profiler.h>
#include <torch/csrc/profiler/stubs/base.h>

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "adaptive.h"
#include "device.h"
#include "launch.h"

namespace torch_neuronx::profiler {

namespace {

using libkineto::ActivityType;
using neuron_rt::Nanos;

// Fallbacks get a lane of their own beside the core's streams.
constexpr int kFallbackLane = 1000;

struct Record {
  int device, lane;
  std::string name;
  uint64_t correlation;  // tagged (see untag) until the collector adds the record
  Nanos start, end;
  uint64_t launch = 0;   // the launch's token, 0 for fallbacks
  std::string args;      // describe() of the kernel's tensors, when the launch had them
};

// A launch on a host thread (RUNTIME mode), or a synchronize wait (launch == 0).
struct HostEvent {
  int device;
  std::string name;
  int32_t thread;
  uint64_t correlation;
  Nanos start, end = 0;
  uint64_t launch = 0;
  std::string args;  // a launch's description, handed to its kernel's record
};

thread_local std::vector<uint64_t> tls_correlation;
thread_local int tls_fallbacks = 0;         // live FallbackSpans on this thread
std::atomic<bool> recording_now{false};

// Correlation id of the innermost framework operator on this thread while a profiler records
// (Kineto pushes it at operator entry), tagged with the session; 0 otherwise.
uint64_t correlation_id() {
  return recording_now.load(std::memory_order_relaxed) && !tls_correlation.empty() ? tls_correlation.back() : 0;
}

// PyTorch numbers operators from 1 in every session: ids are tagged with the session they were
// pushed in, so a kernel launched in an earlier session (or under an operator whose exit Kineto
// never delivered) is reported unlinked rather than linked to an unrelated operator.
constexpr int kSessionShift = 40;
std::atomic<uint64_t> session_number{0};

uint64_t untag(uint64_t tagged) {
  return tagged >> kSessionShift == session_number.load() ? tagged & ((1ull << kSessionShift) - 1) : 0;
}

// The modes of NeuronConfig that the session records (DEVICE alone without a NeuronConfig).
struct Modes {
  bool device = true, runtime = false, cpu_util = false, host_memory = false;
};


// What the active session collects; one session records at a time (Kineto's rule too).
struct Collector {
  std::mutex mu;
  std::vector<Record> records;
  std::vector<HostEvent> host_events;
  std::unordered_map<uint64_t, size_t> launches;  // token -> index in host_events
  uint64_t next_launch = 0;
  std::set<int> cores;           // empty: every core
  size_t max_events_per_core = 0; // 0: unlimited
  Modes modes;
  std::map<int, size_t> counts;
  size_t dropped = 0;

  bool profiles(int device) const { return cores.empty() || cores.count(device); }

  // Whether one more event of `device` fits under max_events_per_core (counting it); the
  // caller holds `mu`.
  bool take_slot(int device) {
    if (max_events_per_core && counts[device] >= max_events_per_core) {
      dropped++;
      return false;
    }
    counts[device]++;
    return true;
  }

  void add(Record r) {
    std::lock_guard<std::mutex> lock(mu);
    if (auto it = launches.find(r.launch); it != launches.end()) {
      r.correlation = host_events[it->second].correlation;
      r.args = std::move(host_events[it->second].args);
    }
    r.correlation = untag(r.correlation);
    if (modes.device && profiles(r.device) && take_slot(r.device)) records.push_back(std::move(r));
  }
};

Collector& collector() {
  static auto* c = new Collector();
  return *c;
}

// The launch token of a CPU fallback's kernel: its FallbackSpan records it, on its own lane.
constexpr uint64_t kFallbackKernel = ~uint64_t{0};

void on_kernel(int device, int stream, const neuron_rt::LaunchInfo& info, Nanos start, Nanos end) {
  if (info.correlation == kFallbackKernel) return;
  collector().add({device, stream, info.name, 0, start, end, info.correlation, {}});
}

int64_t parse_field(const std::string& text, size_t index) {
  std::istringstream in(text);
  std::string word;
  for (size_t i = 0; i <= index && in >> word; ++i) {
  }
  return std::stoll(word);
}

Sample take_sample() {
  Sample s{neuron_rt::now_ns(), 0, 0, 0, 0, {}, {}};
  std::ifstream stat("/proc/self/stat"), system("/proc/stat"), statm("/proc/self/statm");
  std::string line;
  // /proc/self/stat: the command may contain spaces; utime and stime are fields 14 and 15.
  if (std::getline(stat, line)) {
    const std::string rest = line.substr(line.rfind(')') + 2);
    s.process_cpu_ticks = parse_field(rest, 11) + parse_field(rest, 12);
  }
  // /proc/stat "cpu user nice system idle iowait irq softirq steal": idle and iowait are not busy.
  if (std::getline(system, line)) {
    std::istringstream in(line.substr(3));
    int64_t v;
    for (int i = 0; i < 8 && in >> v; ++i) {
      s.system_total_ticks += v;
      if (i != 3 && i != 4) s.system_busy_ticks += v;
    }
  }
  int64_t size = 0, resident = 0;
  if (statm >> size >> resident) s.rss_bytes = resident * sysconf(_SC_PAGESIZE);
  auto& rt = neuron_rt::Runtime::get();
  for (int i = 0; i < rt.device_count(); ++i) {
    const bool used = rt.core_initialized(i);
    s.hbm_allocated_bytes.push_back(used ? rt.core(i).pool.stats().allocated_bytes.all.current : 0);
    s.hbm_reserved_bytes.push_back(used ? rt.core(i).pool.stats().reserved_bytes.all.current : 0);
  }
  return s;
}

// Samples every kSampleInterval while a session with CPU_UTIL or HOST_MEMORY records, and once
// at its start and stop, so even a short profile has an interval.
class Sampler {
 public:
  static constexpr auto kSampleInterval = std::chrono::milliseconds(10);

  void start() {
    samples_ = {take_sample()};
    stop_ = false;
    thread_ = std::thread([this] {
      std::unique_lock<std::mutex> lock(mu_);
      while (!cv_.wait_for(lock, kSampleInterval, [this] { return stop_; })) samples_.push_back(take_sample());
    });
  }

  // A session Kineto drops without stopping must not leave the thread running.
  ~Sampler() {
    if (thread_.joinable()) stop();
  }

  std::vector<Sample> stop() {
    if (!thread_.joinable()) return {};
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
    samples_.push_back(take_sample());
    return std::move(samples_);
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::vector<Sample> samples_;
  std::thread thread_;
};

// What the last finished session leaves for torch_neuronx.profiling (read after the profile).
std::mutex last_mu;
std::vector<KernelArgs> last_args;
std::vector<Sample> last_samples_;

bool is_copy(const std::string& name) {
  return name.find("host to device") != std::string::npos || name.find("device to host") != std::string::npos ||
         name.find("device to device") != std::string::npos || name.find("core to core") != std::string::npos;
}

// "cores:0,2;max_events_per_nc:100;modes:device,runtime": the CUSTOM_CONFIG value of the Kineto configuration that
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
    } else if (key == "modes") {
      c.modes = {value.find("device") != std::string::npos, value.find("runtime") != std::string::npos,
                 value.find("cpu_util") != std::string::npos, value.find("host_memory") != std::string::npos};
    }
  }
}

class Session final : public libkineto::IActivityProfilerSession {
 public:
  explicit Session(const libkineto::Config& config) {
    auto& c = collector();
    std::lock_guard<std::mutex> lock(c.mu);
    c.records.clear();
    c.host_events.clear();
    c.launches.clear();
    c.counts.clear();
    c.cores.clear();
    c.max_events_per_core = 0;
    c.modes = {};
    c.dropped = 0;
    parse_custom_config(config.getCustomConfig(), c);
    modes_ = c.modes;
    cores_ = c.cores;
  }

  void start() override {
    session_number++;
    // The runtime times kernels on a monotonic clock; the trace uses the profiler's (wall) clock.
    clock_offset_ = c10::getTime() - neuron_rt::now_ns();
    if (modes_.cpu_util || modes_.host_memory) sampler_.start();
    recording_now = true;
    neuron_rt::set_kernel_observer(&on_kernel);
    status_ = libkineto::TraceStatus::RECORDING;
  }

  // Everything launched inside the profile is reported: wait for the profiled cores first
  // (without the GIL, which kernel-language and compiled-graph kernels take to run).
  void stop() override {
    auto& rt = neuron_rt::Runtime::get();
    for (int i = 0; i < rt.device_count(); ++i)
      if (rt.core_initialized(i) && (cores_.empty() || cores_.count(i))) wait_for_queue(i);
    neuron_rt::set_kernel_observer(nullptr);
    recording_now = false;
    std::vector<Sample> samples;
    if (modes_.cpu_util || modes_.host_memory) samples = sampler_.stop();
    auto& c = collector();
    {
      std::lock_guard<std::mutex> lock(c.mu);
      records_.swap(c.records);
      host_events_.swap(c.host_events);
      c.launches.clear();
      dropped_ = c.dropped;
    }
    std::vector<KernelArgs> args;
    for (const Record& r : records_)
      if (!r.args.empty()) args.push_back({r.device, r.start + clock_offset_, r.args});
    for (Sample& sample : samples) sample.time += clock_offset_;
    std::lock_guard<std::mutex> lock(last_mu);
    last_args = std::move(args);
    last_samples_ = std::move(samples);
    status_ = libkineto::TraceStatus::PROCESSING;
  }

  std::vector<std::string> errors() override { return {}; }

  void processTrace(libkineto::ActivityLogger& logger) override {}

  void processTrace(libkineto::ActivityLogger& logger, libkineto::getLinkedActivityCallback linked_activity,
                    int64_t start_time, int64_t end_time) override {
    buffer_ = std::make_unique<libkineto::CpuTraceBuffer>();
    buffer_->span = libkineto::TraceSpan(start_time, end_time, "neuron");
    std::set<uint64_t> reported_launches;
    std::map<int, std::set<int>> lanes;
    for (const Record& r : records_) {
      const bool fallback = r.lane == kFallbackLane;
      const auto type = is_copy(r.name) ? ActivityType::GPU_MEMCPY : ActivityType::CONCURRENT_KERNEL;
      auto& a = add_activity(type, r.name, r.start, r.end, r.correlation, linked_activity);
      a.device = r.device;
      a.resource = r.lane;
      a.threadId = r.lane;
      a.addMetadata("device", r.device);
      a.addMetadata("stream", fallback ? -1 : r.lane);
      a.addMetadata("correlation", r.correlation);
      a.addMetadataQuoted("kind", fallback ? "cpu_fallback" : type == ActivityType::GPU_MEMCPY ? "copy" : "kernel");
      a.addMetadataQuoted("timing", fallback ? "host (measured)" : "simulated core (measured)");
      if (!r.args.empty()) a.addMetadata("inputs", r.args);
      if (modes_.runtime && r.launch) {  // flow arrow from the host-side launch
        a.flow = flow(r.launch, false);
        reported_launches.insert(r.launch);
      }
      lanes[r.device].insert(r.lane);
      logger.handleActivity(a);
    }
    for (const HostEvent& h : host_events_) {
      const bool kernel_reported = reported_launches.count(h.launch) > 0;
      if (h.launch && modes_.device && !kernel_reported) continue;  // its kernel was dropped (cores, cap)
      auto& a = add_activity(ActivityType::PRIVATEUSE1_RUNTIME, h.name, h.start, std::max(h.end, h.start),
                             untag(h.correlation), linked_activity);
      a.id = 0;  // not an operator: the correlation id space belongs to the CPU operators
      a.device = libkineto::processId();
      a.resource = h.thread;
      a.threadId = h.thread;
      a.addMetadata("device", h.device);
      if (kernel_reported) a.flow = flow(h.launch, true);
      logger.handleActivity(a);
    }
    for (const auto& [device, streams] : lanes) {
      logger.handleDeviceInfo({device, device + 0x1000000, "neuron:" + std::to_string(device),
                               "NeuronCore " + std::to_string(device)},
                              start_time);
      for (int lane : streams)
        logger.handleResourceInfo({lane, lane, device,
                                   lane == kFallbackLane ? std::string("CPU fallback (host)")
                                                         : "stream " + std::to_string(lane)},
                                  start_time);
    }
  }

  // Non-null so that Kineto does not label the device lanes "GPU N".
  std::unique_ptr<libkineto::DeviceInfo> getDeviceInfo() override {
    return std::make_unique<libkineto::DeviceInfo>(libkineto::DeviceInfo{0, 0x1000000, "neuron:0", "NeuronCore 0"});
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
  libkineto::GenericTraceActivity& add_activity(ActivityType type, const std::string& name, Nanos start, Nanos end,
                                                uint64_t correlation,
                                                libkineto::getLinkedActivityCallback& linked_activity) {
    buffer_->emplace_activity(buffer_->span, type, name);
    auto& a = *buffer_->activities.back();
    a.startTime = start + clock_offset_;
    a.endTime = end + clock_offset_;
    a.id = static_cast<int32_t>(correlation);
    a.linked = correlation ? linked_activity(static_cast<int32_t>(correlation)) : nullptr;
    return a;
  }

  static libkineto::GenericTraceActivity::Flow flow(uint64_t launch, bool start) {
    libkineto::GenericTraceActivity::Flow f;
    f.id = static_cast<uint32_t>(launch);
    f.type = libkineto::kLinkAsyncCpuGpu;
    f.start = start;
    return f;
  }

  static void push(uint64_t id) { tls_correlation.push_back(session_number.load() << kSessionShift | id); }
  static void pop() {
    if (!tls_correlation.empty()) tls_correlation.pop_back();
  }

  Modes modes_;
  std::set<int> cores_;
  Sampler sampler_;
  std::vector<Record> records_;
  std::vector<HostEvent> host_events_;
  size_t dropped_ = 0;
  Nanos clock_offset_ = 0;  // profiler clock - runtime clock, taken at start()
  std::unique_ptr<libkineto::CpuTraceBuffer> buffer_;
};

class NeuronActivityProfiler final : public libkineto::IActivityProfiler {
 public:
  const std::string& name() const override { return name_; }

  const std::set<ActivityType>& availableActivities() const override { return activities_; }

  std::unique_ptr<libkineto::IActivityProfilerSession> configure(const std::set<ActivityType>& activity_types,
                                                                 const libkineto::Config& config) override {
    if (!activity_types.count(ActivityType::CONCURRENT_KERNEL)) return nullptr;
    return std::make_unique<Session>(config);
  }

  std::unique_ptr<libkineto::IActivityProfilerSession>
  configure(int64_t, int64_t, const std::set<ActivityType>& activity_types, const libkineto::Config& config) override {
    return configure(activity_types, config);
  }

 private:
  const std::string name_ = "neuron";
  const std::set<ActivityType> activities_ = {ActivityType::CONCURRENT_KERNEL, ActivityType::GPU_MEMCPY};
};

REGISTER_PRIVATEUSE1_PROFILER(NeuronActivityProfiler);

// The legacy (non-Kineto) profiler brackets each operator with timed events on the current
// stream, as it does with CUDA events.
struct NeuronStubs final : torch::profiler::impl::ProfilerStubs {
  void record(c10::DeviceIndex* device, torch::profiler::impl::ProfilerVoidEventStub* event,
              int64_t* cpu_ns) const override {
    const auto index = current_device();
    if (device) *device = index;
    auto e = std::make_shared<neuron_rt::Event>(index, true);
    adaptive::end_segment(index);
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
    for (int i = 0; i < rt.device_count(); ++i)
      if (rt.core_initialized(i)) wait_for_queue(i);
  }
};

const bool stubs_registered = [] {
  static NeuronStubs stubs;
  torch::profiler::impl::registerPrivateUse1Methods(&stubs);
  return true;
}();

}  // namespace

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

namespace {
void describe_value(const c10::IValue& v, std::string& out);

void describe_tensor(const at::Tensor& t, std::string& out) {
  if (!t.defined()) {
    out += "null";
    return;
  }
  out += "{\"shape\": [";
  for (size_t i = 0; i < t.sizes().size(); ++i) (out += i ? ", " : "") += std::to_string(t.sizes()[i]);
  ((out += "], \"dtype\": \"") += c10::toString(t.scalar_type())) += "\", \"bytes\": ";
  (out += std::to_string(t.numel() * t.itemsize())) += "}";
}

void describe_list(c10::ArrayRef<c10::IValue> values, std::string& out) {
  out += "[";
  for (size_t i = 0; i < values.size(); ++i) {
    if (i) out += ", ";
    describe_value(values[i], out);
  }
  out += "]";
}

void describe_value(const c10::IValue& v, std::string& out) {
  if (v.isTensor()) describe_tensor(v.toTensor(), out);
  else if (v.isTensorList() || v.isOptionalTensorList() || v.isIntList() || v.isDoubleList() || v.isBoolList())
    describe_list(v.toListRef(), out);
  else if (v.isBool()) out += v.toBool() ? "true" : "false";
  else if (v.isInt()) out += std::to_string(v.toInt());
  else if (v.isDouble() && std::isfinite(v.toDouble())) out += std::to_string(v.toDouble());
  else out += "null";
}
}  // namespace

// Built by appending to one string: it runs for every native call while a profiler records.
std::string describe(c10::ArrayRef<c10::IValue> inputs, c10::ArrayRef<c10::IValue> outputs) {
  std::string out = "{\"inputs\": ";
  out.reserve(256);
  describe_list(inputs, out);
  out += ", \"outputs\": ";
  describe_list(outputs, out);
  out += "}";
  return out;
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

std::vector<KernelArgs> last_kernel_args() {
  std::lock_guard<std::mutex> lock(last_mu);
  return last_args;
}

std::vector<Sample> last_samples() {
  std::lock_guard<std::mutex> lock(last_mu);
  return last_samples_;
}

}  // namespace torch_neuronx::profiler
