#include "runtime.h"

#include <pthread.h>

#include <stdexcept>
#include <string>

namespace neuron_rt {

Runtime& Runtime::get() {
  // Never destroyed: worker threads and tensor deleters may outlive static destruction.
  static Runtime* runtime = new Runtime();
  return *runtime;
}

Runtime::Runtime() { pthread_atfork(nullptr, nullptr, &Runtime::on_fork_child); }

void Runtime::on_fork_child() {
  Runtime& rt = get();
  if (!rt.initialized_) return;
  // The worker threads did not survive the fork and the pools' locks may be held: the child
  // must not touch any of it.
  rt.bad_fork_ = true;
}

void Runtime::configure(Topology topology) {
  std::lock_guard<std::mutex> lock(mu_);
  if (initialized_)
    throw std::runtime_error(
        "the NeuronCore runtime is already initialized; set NEURON_RT_* variables before the "
        "first use of a neuron device");
  if (static_cast<int>(topology.visible_cores.size()) > kMaxCores)
    throw std::runtime_error("too many visible NeuronCores (at most 128)");
  topology_ = std::move(topology);
}

void Runtime::check_index(int index) const {
  if (index < 0 || index >= device_count())
    throw std::out_of_range("neuron:" + std::to_string(index) + " is not a visible NeuronCore (" +
                            std::to_string(device_count()) +
                            " visible; see NEURON_RT_VISIBLE_CORES / NEURON_RT_NUM_CORES)");
}

Core& Runtime::core(int index) {
  if (bad_fork_)
    throw std::runtime_error(
        "Cannot re-initialize the NeuronCore runtime in a forked subprocess. To use the neuron "
        "device with multiprocessing, you must use the 'spawn' start method");
  check_index(index);
  Core* core = cores_[index].load(std::memory_order_acquire);
  if (core) return *core;
  std::lock_guard<std::mutex> lock(mu_);
  core = cores_[index].load();
  if (!core) {
    core = new Core(index, topology_);
    cores_[index].store(core, std::memory_order_release);
    initialized_ = true;
  }
  return *core;
}

bool Runtime::core_initialized(int index) const {
  return index >= 0 && index < kMaxCores && cores_[index].load() != nullptr;
}

void Runtime::notify_all_queues() {
  for (auto& slot : cores_)
    if (Core* core = slot.load()) core->queue.notify();
}

}  // namespace neuron_rt
