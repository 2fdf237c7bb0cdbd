// Fault injection, for tests of error handling: the next `count` fault points of a kernel fail
// as a hardware fault would. Kernels name their fault points (the shim's eager kernels check
// before computing); faults are keyed by kernel name.
#pragma once

#include <atomic>
#include <mutex>
#include <stdexcept>
#include <string>
#include <unordered_map>

namespace neuron_rt {

class InjectedFault : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class FaultInjector {
 public:
  // The next `count` fault points of `kernel` fail (0 clears).
  void inject(const std::string& kernel, int count);
  bool pending(const std::string& kernel) const;
  // A fault point of `kernel`: throws InjectedFault when a fault is pending for it.
  void check(const std::string& kernel);

 private:
  std::atomic<int> kernels_with_faults_{0};  // kernels are checked without the lock while none has one
  mutable std::mutex mu_;
  std::unordered_map<std::string, int> pending_;
};

}  // namespace neuron_rt
