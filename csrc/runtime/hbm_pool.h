// Simulated HBM of one NeuronCore: a capacity-limited caching allocator.
//
// Part of the runtime layer: no PyTorch types. Memory is host memory standing in for HBM;
// the capacity is an accounting limit, enforced on reserved bytes like the CUDA caching
// allocator enforces the physical limit.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "stream_progress.h"

namespace neuron_rt {

// current/peak/allocated/freed, as in torch.cuda.memory_stats.
struct Stat {
  int64_t current = 0, peak = 0, allocated = 0, freed = 0;
  void increase(int64_t amount);
  void decrease(int64_t amount);
  void reset_peak() { peak = current; }
  void reset_accumulated() { allocated = freed = 0; }
};

// A statistic over all blocks and split by pool, as CUDA's caching allocator splits it: the
// small pool holds blocks of at most 1 MiB, the large pool the rest.
struct PoolStat {
  Stat all, small_pool, large_pool;
  void increase(size_t block_size, int64_t amount);
  void decrease(size_t block_size, int64_t amount);
  void reset_peak();
  void reset_accumulated();
};

struct PoolStats {
  PoolStat allocation, segment, active, allocated_bytes, reserved_bytes, active_bytes, requested_bytes;
  int64_t num_alloc_retries = 0, num_ooms = 0, num_device_alloc = 0, num_device_free = 0;
};

class HbmPool;

// A stream id for allocations made by a kernel as it runs (on no stream of the host's).
constexpr int kNoStream = -1;

// One allocation handed out by the pool; the pointer the caller frees it with.
struct Block {
  HbmPool* pool;
  void* ptr;
  size_t size;       // rounded size (what the block occupies)
  size_t requested;  // size the caller asked for
  int device;
  int stream = kNoStream;           // the stream it was allocated for
  std::atomic<bool> shared{false};  // kernels of other streams use it too
  // Once freed: per stream whose queued kernels may still use it, the position they end at.
  std::vector<std::pair<int, uint64_t>> pending;
};

class OutOfMemory : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Frees are stream-ordered, as in CUDA's caching allocator: a block freed while queued kernels
// still use it leaves the statistics at once and is reusable at once by the stream it was
// allocated for (whose later kernels run after those), by other streams once the kernels queued
// before the free have run. Kernels that use a block on another stream than its own mark it
// shared (note_use, the automatic record_stream); a shared block waits for every stream.
class HbmPool {
 public:
  HbmPool(int device, size_t capacity) : device_(device), capacity_(capacity) {}
  ~HbmPool();

  // The queue whose kernels use the pool's blocks (none: every free is complete at once).
  void set_progress(const StreamProgress* progress) { progress_ = progress; }

  // A block for kernels of `stream` (kNoStream: reuses only blocks no queued kernel may use).
  // Throws OutOfMemory when the request cannot fit even after releasing cached blocks; with
  // `may_wait`, returns nullptr instead when blocks still used by queued kernels would make
  // room once those have run (the caller waits for the queue and asks again).
  Block* allocate(size_t nbytes, int stream = kNoStream, bool may_wait = false);
  void free(Block* block);
  void note_use(Block* block, int stream) const;
  // Releases the cached blocks no queued kernel may still use.
  void empty_cache();

  bool owns(const void* ptr) const;
  PoolStats stats() const;
  void reset_peak();
  void reset_accumulated();
  size_t capacity() const { return capacity_; }
  void set_capacity(size_t capacity);
  size_t reserved() const;
  int device() const { return device_; }

  static size_t round_size(size_t nbytes);

 private:
  void release_cached_locked(bool even_pending = false);
  std::array<PoolStat*, 7> all_stats_locked();
  // A cached block that kernels of `stream` may take, or cached_.end().
  std::map<std::pair<size_t, uintptr_t>, Block*>::iterator reusable_locked(size_t size, size_t limit, int stream);

  const int device_;
  size_t capacity_;
  mutable std::mutex mu_;
  // Free blocks by (size, address): best fit, and among equal sizes the lowest address, as the
  // CUDA caching allocator orders them. A training step then gets the same blocks every step
  // (the free set is the same at each of its allocations), which keeps compiled graphs' host
  // aliases valid from step to step; first-in-first-out reuse rotated them.
  std::map<std::pair<size_t, uintptr_t>, Block*> cached_;
  // Nodes of cached_ taken out by allocations, put back by frees: a block's trip through the
  // cache then allocates no host memory (eager launches allocate and free blocks by the thousand).
  // At most kSpareNodes are kept: a program's peak of live blocks should not stay in host memory.
  std::vector<std::map<std::pair<size_t, uintptr_t>, Block*>::node_type> spare_nodes_;
  static constexpr size_t kSpareNodes = 4096;
  std::unordered_map<void*, Block*> live_;      // every block the pool owns, keyed by pointer
  PoolStats stats_;
  const StreamProgress* progress_ = nullptr;
};

}  // namespace neuron_rt
