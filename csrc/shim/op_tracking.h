// Which operators ran as device kernels and which fell back to the CPU.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <string>

namespace torch_neuronx {

struct OpCounter {
  std::atomic<int64_t> launches{0};
};

// Counter of device-kernel launches for an operator (stable address, created on first use).
OpCounter& native_counter(const std::string& op);
// Records one CPU fallback of an operator; returns true the first time for that operator.
bool record_fallback(const std::string& op);
// True for the first float64 fallback since start or the last clear.
bool first_float64_fallback();

std::map<std::string, int64_t> executed_ops();
std::map<std::string, int64_t> fallback_ops();
void clear_op_tracking();

}  // namespace torch_neuronx
