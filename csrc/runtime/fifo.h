#pragma once

#include <algorithm>
#include <cstddef>
#include <utility>
#include <vector>

namespace neuron_rt {

// A first-in-first-out list that keeps its memory (std::deque frees and allocates a node every
// few items: a malloc every few launches).
template <typename T>
class Fifo {
 public:
  bool empty() const { return head_ == tail_; }
  T& front() { return slots_[head_ & (slots_.size() - 1)]; }
  const T& front() const { return slots_[head_ & (slots_.size() - 1)]; }
  void push_back(T&& value) {
    if (tail_ - head_ == slots_.size()) grow();
    slots_[tail_++ & (slots_.size() - 1)] = std::move(value);
  }
  void pop_front() { slots_[head_++ & (slots_.size() - 1)] = T(); }  // releases what the item held

 private:
  void grow() {
    std::vector<T> bigger(std::max<size_t>(16, 2 * slots_.size()));  // sizes stay powers of two
    for (size_t i = head_; i < tail_; ++i) bigger[i - head_] = std::move(slots_[i & (slots_.size() - 1)]);
    tail_ -= head_;
    head_ = 0;
    slots_.swap(bigger);
  }
  std::vector<T> slots_;
  size_t head_ = 0, tail_ = 0;
};

}  // namespace neuron_rt
