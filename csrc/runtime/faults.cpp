#include "faults.h"

namespace neuron_rt {

void FaultInjector::inject(const std::string& kernel, int count) {
  std::lock_guard<std::mutex> lock(mu_);
  if (count > 0) pending_[kernel] = count;
  else pending_.erase(kernel);
  kernels_with_faults_ = static_cast<int>(pending_.size());
}

bool FaultInjector::pending(const std::string& kernel) const {
  if (kernels_with_faults_.load(std::memory_order_relaxed) == 0) return false;
  std::lock_guard<std::mutex> lock(mu_);
  return pending_.count(kernel) != 0;
}

void FaultInjector::check(const std::string& kernel) {
  if (kernels_with_faults_.load(std::memory_order_relaxed) == 0) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = pending_.find(kernel);
    if (it == pending_.end()) return;
    if (--it->second == 0) pending_.erase(it);
    kernels_with_faults_ = static_cast<int>(pending_.size());
  }
  throw InjectedFault("injected fault (torch_neuronx.runtime.inject_fault) in " + kernel);
}

}  // namespace neuron_rt
