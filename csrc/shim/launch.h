// The one launch path: every kernel — eager operators, CPU fallbacks, copies, compiled graphs and
// kernel-language ops — reaches a core through launch(). It decides where the kernel runs (on
// the calling thread when the core is idle and the kernel allows it, else queued on the current
// stream), whether the caller waits (and then releases the interpreter lock and its OpenMP team),
// captures the launching Python stack, and opens the profiler's launch record.
#pragma once

#include <c10/core/Device.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/util/Exception.h>

#include <functional>
#include <string>
#include <vector>

#include "../runtime/runtime.h"

namespace torch_neuronx {

// How a kernel is launched: everything but its body.
struct Launch {
  std::string name;  // the operation, named in errors and in the profiler
  // Whether it may run on the calling thread when the core is idle (see neuron_rt::HostWork).
  neuron_rt::HostWork host = neuron_rt::HostWork::kNever;
  enum Completion {
    kQueued,      // the caller goes on; an error is deferred to the next synchronization
    kWaited,      // the caller waits for it, and its error is raised here
    kInlineOnly,  // only if it runs on the calling thread now; otherwise nothing is launched
  } completion = kQueued;
  std::string described;  // profiler::describe_launch() of its tensors (empty: not described)
  // Whether it ends the core's adaptive-eager segment (adaptive.h); the segment's own launches do not.
  bool ends_segment = true;
};

// Launches `fn` on `device`; says whether it was launched (always, except kInlineOnly when the
// core did not take it). Honors NEURON_LAUNCH_BLOCKING (every launch waits).
bool launch(c10::DeviceIndex device, std::function<void()> fn, Launch how);

// Keeps the warnings a kernel raises where it runs (the worker), for the launching thread to
// re-issue after waiting for it (install it in the kernel with WarningHandlerGuard).
struct WarningCollector : c10::WarningHandler {
  void process(const c10::Warning& warning) override { warnings.push_back(warning); }
  std::vector<c10::Warning> warnings;
};

// Waits until the kernels queued on `device` so far have run, without the interpreter lock and
// with the calling thread's OpenMP team released; their errors stay deferred. Nothing to wait
// for inside a kernel of `device`.
void wait_for_queue(c10::DeviceIndex device);

// Runs `f` with the interpreter lock released if the calling thread holds it: waiting on the
// queue must not hold it, as Python kernels (compiled graphs, kernel-language ops) take it to run.
void without_gil(const std::function<void()>& f);

// The dispatch state every kernel body runs in, on a worker and on the calling thread alike:
// its ATen calls on host aliases reach PyTorch's CPU kernels directly, with none of the launching
// thread's autograd recording, version counting, autocast, Python modes or functorch layers.
// Without it a kernel queued from below autograd recorded history on the worker thread (a
// non-blocking copy's destination got CopyBackwards instead of ToCopyBackward0, and a zero
// gradient), while the same kernel run inline did not.
c10::impl::LocalDispatchKeySet kernel_dispatch_state();

// Whether launches record the launching Python stack (TORCH_NEURONX_ENABLE_STACK_TRACE=1).
void set_capture_stack(bool enabled);

}  // namespace torch_neuronx
