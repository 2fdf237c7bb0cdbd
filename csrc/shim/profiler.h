// Device activity for torch.profiler: a Kineto child profiler that reports every kernel the
// hardware queues execute, linked to the framework operator that launched it.
#pragma once

#include <cstdint>
#include <string>

#include "../runtime/hardware_queue.h"

namespace torch_neuronx::profiler {

// Correlation id of the innermost framework operator on this thread while a profiler
// records (Kineto pushes it at operator entry), tagged with the session; 0 otherwise.
uint64_t correlation_id();

// Records a CPU fallback's host execution as an activity on the core's fallback lane: the
// device is idle meanwhile, and the time is the fallback's cost.
class FallbackSpan {
 public:
  FallbackSpan(int device, std::string name);
  ~FallbackSpan();

 private:
  int device_;
  std::string name_;
  uint64_t correlation_;
  neuron_rt::Nanos start_;
};

}  // namespace torch_neuronx::profiler
