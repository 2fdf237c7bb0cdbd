// How far the kernels of each stream of a core have got. The hardware queue reports it; the HBM
// pool asks it when a block freed while kernels were queued may be reused.
#pragma once

#include <cstdint>
#include <vector>

namespace neuron_rt {

struct StreamPosition {
  uint64_t launched = 0, completed = 0;  // kernels and markers so far
};

class StreamProgress {
 public:
  virtual ~StreamProgress() = default;
  virtual std::vector<StreamPosition> positions() const = 0;  // indexed by stream id
};

}  // namespace neuron_rt
