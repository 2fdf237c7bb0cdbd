// Device activity for torch.profiler: a Kineto child profiler that reports every kernel the
// hardware queues execute, linked to the framework operator that launched it.
#pragma once

#include <ATen/core/ivalue.h>

#include <cstdint>
#include <string>
#include <vector>

#include "../../runtime/runtime.h"

namespace torch_neuronx::profiler {

// True while a profiler session records.
bool recording();

// Called by every launch: the token the launch carries in LaunchInfo::correlation, which links
// its kernel to the innermost framework operator on this thread and to the launch's host-side
// event, with `args` (describe_launch); 0 when not recording.
uint64_t on_launch(int device, std::string args);
// The launch of `token` is enqueued (ends its host-side event).
void on_enqueued(uint64_t token);

// The tensors and arguments of a call, as the JSON the cost model of torch_neuronx.profiling
// reads: {"inputs": [...], "outputs": [...]}, a tensor being {"shape": [...], "dtype": "float",
// "bytes": n}, a tensor list a list of those, a number or bool itself, anything else null.
std::string describe(c10::ArrayRef<c10::IValue> inputs, c10::ArrayRef<c10::IValue> outputs);

// describe(inputs, outputs) for a launch (Launch::described) while a profiler records, else
// empty; also empty inside a CPU fallback (its copies' transfer is part of the fallback's estimate).
std::string describe_launch(c10::ArrayRef<c10::IValue> inputs, c10::ArrayRef<c10::IValue> outputs);

// What the last finished session leaves for torch_neuronx.profiling: the arguments of its
// kernels (by core and start time, as in the activities) and its host samples.
struct KernelArgs {
  int device;
  neuron_rt::Nanos start;
  std::string args;
};
std::vector<KernelArgs> last_kernel_args();

// /proc readings and HBM pool usage at one instant (CPU_UTIL / HOST_MEMORY modes).
struct Sample {
  neuron_rt::Nanos time;
  int64_t process_cpu_ticks, system_busy_ticks, system_total_ticks, rss_bytes;
  std::vector<int64_t> hbm_allocated_bytes, hbm_reserved_bytes;  // per core, 0 before first use
};
std::vector<Sample> last_samples();

// Records a CPU fallback's host execution as an activity on the core's fallback lane: the
// device is idle meanwhile, and the time is the fallback's cost. Launches on this thread while
// it is alive (the fallback's copies) are not described (see describe_launch).
class FallbackSpan {
 public:
  FallbackSpan(int device, std::string name);
  ~FallbackSpan();
  void set_args(c10::ArrayRef<c10::IValue> inputs, c10::ArrayRef<c10::IValue> outputs);

 private:
  int device_;
  std::string name_, args_;
  uint64_t correlation_;
  neuron_rt::Nanos start_;
};

// A host thread waiting for a core (synchronize), recorded as a runtime event in RUNTIME mode.
class SyncSpan {
 public:
  SyncSpan(int device, const char* name);
  ~SyncSpan();

 private:
  int device_;
  const char* name_;
  neuron_rt::Nanos start_;
};

}  // namespace torch_neuronx::profiler
