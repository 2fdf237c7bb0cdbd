// The hardware queue of one NeuronCore: a worker thread that executes kernels in order.
//
// Streams are multiplexed onto the single queue: each stream keeps FIFO order;
// among streams whose next item is ready the worker picks the highest priority (lowest
// number), then the oldest launch. A stream blocked on an event waits while others run.
// Errors raised by a kernel are stored (earliest wins) and re-raised at the next
// synchronization point. A kernel launched while the core is idle may run on the launching
// thread instead of the worker, as the stream's next kernel (begin_inline / finish_inline).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "fifo.h"
#include "stream_progress.h"

namespace neuron_rt {

using Nanos = int64_t;
// Monotonic time (steady_clock): event timing and kernel intervals never jump with the wall
// clock. The profiler converts it to its own clock for traces.
Nanos now_ns();

// A marker in a stream. `record` bumps `recorded`; the worker sets `completed` when it
// reaches the marker, so the event is complete once completed == recorded.
struct Event {
  explicit Event(int device, bool timing) : device(device), timing(timing) {}
  const int device;
  const bool timing;
  std::atomic<uint64_t> recorded{0};
  std::atomic<uint64_t> completed{0};
  std::atomic<Nanos> timestamp{0};
  bool query() const { return completed.load() >= recorded.load(); }
};

// What a kernel launch carries besides its body.
struct LaunchInfo {
  std::string name;          // operation name, used in error messages
  std::string launch_stack;  // Python stack at launch, when stack capture is on
  uint64_t correlation = 0;  // opaque token the shim links the kernel to its launch with (0: none)
  int compute_threads = 0;   // the launching thread's intra-op thread count (0: the worker's own)
};

// Called on a worker after each kernel with its execution interval; set only while a
// profiler records, so kernels are not timed otherwise.
using KernelObserver = void (*)(int device, int stream, const LaunchInfo& info, Nanos start, Nanos end);
void set_kernel_observer(KernelObserver observer);

// Whether the calling thread is a core's worker (the thread that executes kernels).
bool on_worker_thread();

// The core whose kernel the calling thread is executing (on the worker or inline), or -1,
// and that kernel's launch information (nullptr when none).
int executing_device();
const LaunchInfo* executing_info();

// Run by each worker thread when it starts, before its first kernel (the shim installs the
// thread's handlers there).
using WorkerStart = void (*)();
void set_worker_start(WorkerStart start);

// Run by a worker before it sleeps, when a host thread asked it to (see `begin_inline`): frees
// the worker's compute threads, which would otherwise compete with the host thread's.
using IdleRelease = void (*)();
void set_idle_release(IdleRelease release);

// Runs a host thread's wait for room in a full queue (the shim releases the interpreter lock
// there: the kernels being waited for may be Python kernels that need it).
using HostWait = void (*)(const std::function<void()>& wait);
void set_host_wait(HostWait host_wait);

// Run by a worker before each kernel launched with a `compute_threads` count: the shim gives the
// worker that many compute threads, so a kernel computes as on its launching thread.
using ComputeThreads = void (*)(int threads);
void set_compute_threads(ComputeThreads threads);

// Which kernels may run on the launching thread when the core is idle, saving the hand-off to
// the worker. Parallel kernels use the compute threads of the thread that runs them, and two
// sets of compute threads slow each other down, so the worker's and a host thread's are not
// used side by side: compute stays where the last parallel kernel ran (see set_idle_release).
enum class HostWork {
  kNever,
  kSerial,  // a kernel the host waits for anyway, run on one thread: always
  kFollow,  // when the last parallel kernel ran on a host thread (eager ops between graphs)
  kClaim,   // takes the compute threads, after the queued kernels; the worker releases its own
            // first (compiled graphs)
};

class HardwareQueue final : public StreamProgress {
 public:
  // `thread_init` runs first on the worker thread (the shim sizes its compute threads there).
  // `max_inflight`: launches beyond this many pending kernels wait for the queue to drain.
  // `inline_kernels`: whether `begin_inline` may accept kernels at all.
  HardwareQueue(int device, size_t max_inflight, bool inline_kernels);
  ~HardwareQueue();

  int create_stream(int priority);
  int stream_priority(int stream) const;

  // Enqueue a kernel; returns its sequence number. When `capture` is set, an exception
  // thrown by the kernel goes there instead of the deferred-error slot.
  uint64_t launch(int stream, std::function<void()> fn, LaunchInfo info,
                  std::shared_ptr<std::exception_ptr> capture = nullptr);
  void record(int stream, const std::shared_ptr<Event>& event);
  void wait(int stream, const std::shared_ptr<Event>& event);

  bool query_stream(int stream) const;
  int stream_count() const override;
  StreamPosition position(int stream) const override;
  void wait_item(int stream, uint64_t seq);   // until the given launch has executed
  void synchronize_stream(int stream);
  void synchronize();                          // every stream of this core
  void wait_event(const Event& event);

  // A kernel run on the calling thread instead of the worker: `begin_inline` reserves the core
  // when nothing is queued or running (kClaim waits for that) and `work` may run there now,
  // returning the kernel's sequence number (0: refused, launch instead); `finish_inline` runs
  // the kernel as the stream's next and frees the core. Its error is deferred as a queued
  // kernel's (or goes to `capture`).
  uint64_t begin_inline(int stream, HostWork work);
  void finish_inline(int stream, uint64_t seq, const std::function<void()>& fn, const LaunchInfo& info,
                     const std::shared_ptr<std::exception_ptr>& capture = nullptr);

  // Kernels executed so far: (by the worker, on launching threads).
  std::pair<uint64_t, uint64_t> kernel_counts() const;
  // Kernels launched and not finished (queued or running).
  size_t pending() const;

  // Re-raise (and clear) the earliest stored kernel error, if any.
  void raise_pending_error();

  // Wakes the worker when an event of another core completes (cross-core waits).
  void notify();
  // Destroy the bodies of executed kernels (and what they captured) on the calling thread.
  void drain_retired();

 private:
  struct Item {
    std::function<void()> fn;
    LaunchInfo info;
    uint64_t float_controls = 0;  // the launching thread's (float_controls.h)
    uint64_t seq;
    std::shared_ptr<std::exception_ptr> capture;
    std::shared_ptr<Event> record_event;  // marker: complete this event
    uint64_t record_version = 0;
    std::shared_ptr<Event> wait_event;    // marker: block the stream until complete
    uint64_t wait_version = 0;
  };
  struct Stream {
    int priority;
    Fifo<Item> items;
    uint64_t enqueued = 0, completed = 0;
    uint64_t last_seq_done = 0;
  };

  uint64_t push(int stream, Item item);
  // The queue reached an event's marker: timestamp and complete that recorded version.
  static void reach(Event& event, uint64_t version);
  int pick_locked() const;
  // Counts a kernel done on `stream` (the worker's or the host's), under mu_.
  void complete_locked(int stream, uint64_t seq);
  void run();
  void store_error(const LaunchInfo& info, const std::shared_ptr<std::exception_ptr>& capture,
                   std::exception_ptr error);
  void execute(int stream, const std::function<void()>& fn, const LaunchInfo& info,
               const std::shared_ptr<std::exception_ptr>& capture);

  const int device_;
  mutable std::mutex mu_;
  std::condition_variable work_cv_, done_cv_;
  std::vector<Stream> streams_;
  std::vector<std::function<void()>> retired_;  // executed kernel bodies awaiting destruction
  uint64_t next_seq_ = 1;
  const size_t max_inflight_;
  const bool inline_kernels_;
  size_t pending_ = 0;
  bool stop_ = false;
  bool sleeping_ = false;                 // the worker waits on work_cv_
  bool running_ = false;                  // the worker executes an item
  bool inline_ = false;                   // a host thread runs a kernel (begin_inline)
  bool worker_warm_ = false;              // the worker ran a kernel since it last released
  bool release_requested_ = false;        // a host thread wants the worker released
  std::atomic<bool> host_compute_{false};             // the last parallel kernel ran on a host thread
  uint64_t kernels_on_worker_ = 0, kernels_on_host_ = 0;
  std::atomic<uint64_t> generation_{0};   // bumped by every launch and wake-up
  // How long the worker watches for launches once the queue empties. A small model's generate()
  // pauses in Python for some hundred microseconds between tokens: at 50 us the worker slept
  // about 30 times a generate and each launch that woke it paid a futex wake (measured in turns:
  // 200 us made a tiny Llama's generate and forward+backward 4-5% faster, the two-thread TinyGPT
  // step no different; 500 us or 1 ms no better).
  static constexpr Nanos kSpinNs = 200'000;
  int waiters_ = 0;

  mutable std::mutex error_mu_;
  std::optional<std::string> error_;

  std::thread worker_;
};

}  // namespace neuron_rt
