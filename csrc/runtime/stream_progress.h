// How far the kernels of each stream of a core have got. The hardware queue reports it; the HBM
// pool asks it when a block freed while kernels were queued may be reused.
#pragma once

#include <cstdint>

namespace neuron_rt {

struct StreamPosition {
  uint64_t launched = 0, completed = 0;  // kernels and markers so far
};

class StreamProgress {
 public:
  virtual ~StreamProgress() = default;
  // Asked per stream, without a snapshot of every stream: a free asks for its block's stream
  // only (a shared block for each), so the allocator's hot path allocates nothing.
  virtual int stream_count() const = 0;
  virtual StreamPosition position(int stream) const = 0;
};

}  // namespace neuron_rt
