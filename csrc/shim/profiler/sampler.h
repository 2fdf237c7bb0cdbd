// Host samples of a session in CPU_UTIL / HOST_MEMORY mode: /proc and the HBM pools.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "profiler.h"

namespace torch_neuronx::profiler {

// The readings of this instant.
Sample take_sample();

// Samples every kSampleInterval while a session with CPU_UTIL or HOST_MEMORY records, and once
// at its start and stop, so even a short profile has an interval.
class Sampler {
 public:
  static constexpr auto kSampleInterval = std::chrono::milliseconds(10);

  void start() {
    samples_ = {take_sample()};
    stop_ = false;
    thread_ = std::thread([this] {
      std::unique_lock<std::mutex> lock(mu_);
      while (!cv_.wait_for(lock, kSampleInterval, [this] { return stop_; })) samples_.push_back(take_sample());
    });
  }

  // A session Kineto drops without stopping must not leave the thread running.
  ~Sampler() {
    if (thread_.joinable()) stop();
  }

  std::vector<Sample> stop() {
    if (!thread_.joinable()) return {};
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
    samples_.push_back(take_sample());
    return std::move(samples_);
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::vector<Sample> samples_;
  std::thread thread_;
};

}  // namespace torch_neuronx::profiler
