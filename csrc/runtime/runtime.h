// The simulated NeuronCore runtime's API, the one header its users include: topology, per
// visible core an HBM pool and a hardware queue (launch, streams, events, deferred errors), and
// fault injection. This is the boundary a hardware runtime would replace; it knows nothing
// about PyTorch.
#pragma once

#include <atomic>
#include <mutex>
#include <string>
#include <vector>

#include "faults.h"
#include "hardware_queue.h"
#include "hbm_pool.h"

namespace neuron_rt {

// What configure() sets. No chip facts here: the Python layer derives them
// (torch_neuronx/runtime/chips.py, topology.py); before configure() there are no cores.
struct Topology {
  std::string generation;              // chip generation being simulated
  int logical_nc_config = 1;           // physical cores per logical core
  int num_chips = 1;
  std::vector<int> visible_cores;      // physical logical-core ids, one per neuron:N
  size_t hbm_bytes_per_core = 0;       // capacity of each core's pool
  bool launch_blocking = false;
  size_t max_inflight = 256;           // queue depth of each core
  bool inline_kernels = true;          // idle cores run kernels on the launching thread
};

// One visible logical NeuronCore (`neuron:N`).
struct Core {
  Core(int index, const Topology& topology)
      : pool(index, topology.hbm_bytes_per_core), queue(index, topology.max_inflight, topology.inline_kernels) {
    pool.set_progress(&queue);
  }
  HbmPool pool;
  HardwareQueue queue;
};

class Runtime {
 public:
  static Runtime& get();

  void configure(Topology topology);  // before first use; reconfiguring later is an error
  const Topology& topology() const { return topology_; }
  int device_count() const { return static_cast<int>(topology_.visible_cores.size()); }

  // Lazily brings the core up (thread, pool). Throws in a forked child of an initialized
  // parent, or for an index that is not visible.
  Core& core(int index);
  bool is_initialized() const { return initialized_.load(); }
  bool core_initialized(int index) const;
  bool in_bad_fork() const { return bad_fork_; }
  void check_index(int index) const;

  void notify_all_queues();
  FaultInjector& faults() { return faults_; }

 private:
  Runtime();
  static void on_fork_child();

  Topology topology_;
  FaultInjector faults_;
  std::mutex mu_;
  static constexpr int kMaxCores = 128;
  std::atomic<Core*> cores_[kMaxCores] = {};  // created on first use, never destroyed
  std::atomic<bool> initialized_{false};
  bool bad_fork_ = false;
};

}  // namespace neuron_rt
