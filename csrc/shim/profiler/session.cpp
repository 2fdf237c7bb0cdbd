// Kineto child profiler for the neuron device (REGISTER_PRIVATEUSE1_PROFILER).
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
#include "collector.h"
#include "sampler.h"

#include <IActivityProfiler.h>
#include <ThreadUtil.h>
#include <c10/util/ApproximateClock.h>
#include <libkineto.h>
#include <output_base.h>
#include <torch/csrc/profiler/standalone/privateuse1_profiler.h>

#include <memory>
#include <sstream>

#include "../launch.h"

namespace torch_neuronx::profiler {

namespace {

using libkineto::ActivityType;
using neuron_rt::Nanos;

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
  void pushCorrelationId(uint64_t id) override { push_correlation(id); }
  void popCorrelationId() override { pop_correlation(); }
  void pushUserCorrelationId(uint64_t id) override { push_correlation(id); }
  void popUserCorrelationId() override { pop_correlation(); }

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

}  // namespace

std::vector<KernelArgs> last_kernel_args() {
  std::lock_guard<std::mutex> lock(last_mu);
  return last_args;
}

std::vector<Sample> last_samples() {
  std::lock_guard<std::mutex> lock(last_mu);
  return last_samples_;
}

}  // namespace torch_neuronx::profiler
