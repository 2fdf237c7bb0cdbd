// What the profiler's session collects while it records, shared by the profiler's files
// (profiler.h is the shim's interface): the records of the kernels the cores report and the
// host-side events of the launching threads, linked to framework operators by correlation ids.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "profiler.h"

namespace torch_neuronx::profiler {

// Fallbacks get a lane of their own beside the core's streams.
constexpr int kFallbackLane = 1000;

struct Record {
  int device, lane;
  std::string name;
  uint64_t correlation;  // tagged (see untag) until the collector adds the record
  neuron_rt::Nanos start, end;
  uint64_t launch = 0;   // the launch's token, 0 for fallbacks
  std::string args;      // describe() of the kernel's tensors, when the launch had them
};

// A launch on a host thread (RUNTIME mode), or a synchronize wait (launch == 0).
struct HostEvent {
  int device;
  std::string name;
  int32_t thread;
  uint64_t correlation;
  neuron_rt::Nanos start, end = 0;
  uint64_t launch = 0;
  std::string args;  // a launch's description, handed to its kernel's record
};

// Set from the session's start to its stop.
extern std::atomic<bool> recording_now;
// Bumped by every session's start: the tag of the correlation ids pushed in it.
extern std::atomic<uint64_t> session_number;

// The framework operator (or user scope) entered and exited on this thread, as Kineto reports it.
void push_correlation(uint64_t id);
void pop_correlation();
// The id of a tagged correlation id, or 0 when it was pushed in another session.
uint64_t untag(uint64_t tagged);

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

Collector& collector();

// The kernel observer of a recording session: adds each kernel's record.
void on_kernel(int device, int stream, const neuron_rt::LaunchInfo& info, neuron_rt::Nanos start, neuron_rt::Nanos end);

}  // namespace torch_neuronx::profiler
