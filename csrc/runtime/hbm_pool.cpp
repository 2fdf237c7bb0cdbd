#include "hbm_pool.h"

#include <cstdlib>
#include <sstream>

namespace neuron_rt {

namespace {
constexpr size_t kMinBlock = 512;           // same rounding as the CUDA caching allocator
constexpr size_t kAlignment = 64;           // CPU kernels vectorise on 64-byte boundaries
constexpr size_t kSmallSize = 1 << 20;      // the small pool's blocks, as CUDA's: at most 1 MiB

bool is_small(size_t block_size) { return block_size <= kSmallSize; }

// Whether kernels of `stream` may use a freed block: the kernels of other streams that may
// still use it have run (the stream's own run before anything it launches next).
bool free_for(const Block& block, int stream, const StreamProgress& progress) {
  for (const auto& [s, end] : block.pending)
    if (s != stream && progress.position(s).completed < end) return false;
  return true;
}

std::string mib(size_t bytes) {
  std::ostringstream s;
  s.precision(2);
  s << std::fixed << bytes / 1048576.0 << " MiB";
  return s.str();
}
}  // namespace

void Stat::increase(int64_t amount) {
  current += amount;
  allocated += amount;
  if (current > peak) peak = current;
}

void Stat::decrease(int64_t amount) {
  current -= amount;
  freed += amount;
}

void PoolStat::increase(size_t block_size, int64_t amount) {
  all.increase(amount);
  (is_small(block_size) ? small_pool : large_pool).increase(amount);
}

void PoolStat::decrease(size_t block_size, int64_t amount) {
  all.decrease(amount);
  (is_small(block_size) ? small_pool : large_pool).decrease(amount);
}

void PoolStat::reset_peak() {
  for (Stat* s : {&all, &small_pool, &large_pool}) s->reset_peak();
}

void PoolStat::reset_accumulated() {
  for (Stat* s : {&all, &small_pool, &large_pool}) s->reset_accumulated();
}

size_t HbmPool::round_size(size_t nbytes) { return ((nbytes + kMinBlock - 1) / kMinBlock) * kMinBlock; }

HbmPool::~HbmPool() {
  // Process teardown: tensors may still hold blocks; return what is cached and leak the rest
  // (their deleters may run after us during static destruction).
  std::lock_guard<std::mutex> lock(mu_);
  release_cached_locked(/*even_pending=*/true);
}

std::map<std::pair<size_t, uintptr_t>, Block*>::iterator HbmPool::reusable_locked(size_t size, size_t limit,
                                                                                  int stream) {
  for (auto it = cached_.lower_bound({size, 0}); it != cached_.end() && it->first.first <= limit; ++it) {
    const Block& block = *it->second;
    if (block.pending.empty() || free_for(block, stream, *progress_)) return it;
  }
  return cached_.end();
}

Block* HbmPool::allocate(size_t nbytes, int stream, bool may_wait) {
  const size_t size = round_size(nbytes);
  std::lock_guard<std::mutex> lock(mu_);
  // Best fit among cached blocks; a small block is reused only at its size, and a large
  // request never takes a much larger block.
  auto it = reusable_locked(size, is_small(size) ? size : size + size / 2, stream);
  Block* block = nullptr;
  if (it != cached_.end()) {
    block = it->second;
    if (spare_nodes_.size() < kSpareNodes) spare_nodes_.push_back(cached_.extract(it));
    else cached_.erase(it);
  } else {
    if (stats_.reserved_bytes.all.current + static_cast<int64_t>(size) > static_cast<int64_t>(capacity_)) {
      stats_.num_alloc_retries++;
      release_cached_locked();
    }
    void* ptr = nullptr;
    const bool fits = stats_.reserved_bytes.all.current + static_cast<int64_t>(size) <= static_cast<int64_t>(capacity_);
    if (!fits && may_wait && !cached_.empty()) return nullptr;  // what is left is still in use
    if (!fits || posix_memalign(&ptr, kAlignment, size) != 0) {
      stats_.num_ooms++;
      std::ostringstream msg;
      msg << "neuron:" << device_ << " is out of memory: tried to allocate " << mib(size) << " (" << size << " bytes); "
          << mib(stats_.allocated_bytes.all.current) << " allocated, " << mib(stats_.reserved_bytes.all.current)
          << " reserved, capacity " << mib(capacity_) << (fits ? " (host memory exhausted)" : "")
          << ". Free tensors you no longer need, use a smaller batch, or spread the model"
             " over more cores.";
      throw OutOfMemory(msg.str());
    }
    block = new Block{this, ptr, size, 0, device_};
    live_[ptr] = block;
    stats_.segment.increase(size, 1);
    stats_.reserved_bytes.increase(size, size);
    stats_.num_device_alloc++;
  }
  block->requested = nbytes;
  block->stream = stream;
  block->shared = stream == kNoStream;
  block->pending.clear();
  const size_t bs = block->size;
  stats_.allocation.increase(bs, 1);
  stats_.active.increase(bs, 1);
  stats_.allocated_bytes.increase(bs, bs);
  stats_.active_bytes.increase(bs, bs);
  stats_.requested_bytes.increase(bs, nbytes);
  return block;
}

void HbmPool::note_use(Block* block, int stream) const {
  if (stream != block->stream && !block->shared.load(std::memory_order_relaxed)) block->shared = true;
}

void HbmPool::free(Block* block) {
  std::lock_guard<std::mutex> lock(mu_);
  block->pending.clear();  // keeps its capacity: a block's next free allocates nothing
  if (progress_) {
    const bool shared = block->shared;
    const int first = shared ? 0 : block->stream, end = shared ? progress_->stream_count() : block->stream + 1;
    for (int s = first; s < end; ++s) {
      const StreamPosition at = progress_->position(s);
      if (at.completed < at.launched) block->pending.emplace_back(s, at.launched);
    }
  }
  const size_t bs = block->size;
  stats_.allocation.decrease(bs, 1);
  stats_.active.decrease(bs, 1);
  stats_.allocated_bytes.decrease(bs, bs);
  stats_.active_bytes.decrease(bs, bs);
  stats_.requested_bytes.decrease(bs, block->requested);
  const std::pair<size_t, uintptr_t> key{block->size, reinterpret_cast<uintptr_t>(block->ptr)};
  if (spare_nodes_.empty()) {
    cached_.emplace(key, block);
    return;
  }
  auto node = std::move(spare_nodes_.back());
  spare_nodes_.pop_back();
  node.key() = key;
  node.mapped() = block;
  cached_.insert(std::move(node));
}

void HbmPool::release_cached_locked(bool even_pending) {
  for (auto it = cached_.begin(); it != cached_.end();) {
    Block* block = it->second;
    if (!even_pending && !block->pending.empty()) {
      if (!free_for(*block, kNoStream, *progress_)) {  // a queued kernel may still use it
        ++it;
        continue;
      }
    }
    it = cached_.erase(it);
    live_.erase(block->ptr);
    std::free(block->ptr);
    stats_.segment.decrease(block->size, 1);
    stats_.reserved_bytes.decrease(block->size, block->size);
    stats_.num_device_free++;
    delete block;
  }
}

void HbmPool::empty_cache() {
  std::lock_guard<std::mutex> lock(mu_);
  release_cached_locked();
}

bool HbmPool::owns(const void* ptr) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [base, block] : live_) {
    auto p = static_cast<const char*>(ptr);
    auto b = static_cast<const char*>(base);
    if (p >= b && p < b + block->size) return true;
  }
  return false;
}

PoolStats HbmPool::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

std::array<PoolStat*, 7> HbmPool::all_stats_locked() {
  return {&stats_.allocation,     &stats_.segment,      &stats_.active,         &stats_.allocated_bytes,
          &stats_.reserved_bytes, &stats_.active_bytes, &stats_.requested_bytes};
}

void HbmPool::reset_peak() {
  std::lock_guard<std::mutex> lock(mu_);
  for (PoolStat* s : all_stats_locked()) s->reset_peak();
}

void HbmPool::reset_accumulated() {
  std::lock_guard<std::mutex> lock(mu_);
  for (PoolStat* s : all_stats_locked()) s->reset_accumulated();
  stats_.num_alloc_retries = stats_.num_ooms = 0;
  stats_.num_device_alloc = stats_.num_device_free = 0;
}

void HbmPool::set_capacity(size_t capacity) {
  std::lock_guard<std::mutex> lock(mu_);
  capacity_ = capacity;
}

size_t HbmPool::reserved() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_.reserved_bytes.all.current;
}

}  // namespace neuron_rt
