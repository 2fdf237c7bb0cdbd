#include "op_tracking.h"

#include <memory>
#include <mutex>
#include <utility>
#include <unordered_map>

namespace torch_neuronx {

namespace {
std::mutex mu;
std::unordered_map<std::string, std::unique_ptr<OpCounter>>& natives() {
  static auto* m = new std::unordered_map<std::string, std::unique_ptr<OpCounter>>();
  return *m;
}
bool float64_warned = false;
std::map<std::string, int64_t>& fallbacks() {
  static auto* m = new std::map<std::string, int64_t>();
  return *m;
}
}  // namespace

OpCounter& native_counter(const std::string& op) {
  std::lock_guard<std::mutex> lock(mu);
  auto& slot = natives()[op];
  if (!slot) slot = std::make_unique<OpCounter>();
  return *slot;
}

bool record_fallback(const std::string& op) {
  std::lock_guard<std::mutex> lock(mu);
  return fallbacks()[op]++ == 0;
}

bool first_float64_fallback() {
  std::lock_guard<std::mutex> lock(mu);
  return !std::exchange(float64_warned, true);
}

std::map<std::string, int64_t> executed_ops() {
  std::lock_guard<std::mutex> lock(mu);
  std::map<std::string, int64_t> out;
  for (const auto& [name, counter] : natives())
    if (const auto n = counter->launches.load()) out[name] = n;
  return out;
}

std::map<std::string, int64_t> fallback_ops() {
  std::lock_guard<std::mutex> lock(mu);
  return fallbacks();
}

void clear_op_tracking() {
  std::lock_guard<std::mutex> lock(mu);
  for (auto& [name, counter] : natives()) counter->launches = 0;
  fallbacks().clear();
  float64_warned = false;
}

}  // namespace torch_neuronx
