// Adaptive eager (torch_neuronx.set_eager_mode("adaptive")): the lowering table's planned calls
// that a core receives back to back form a *segment*; a segment that keeps coming back with the
// same operators, signatures and dataflow is compiled (by Python, torch_neuronx/adaptive) and
// later launched as one kernel instead of its operators. Segments end at every other kind of
// launch, synchronization, event, stream switch, thread switch, and at size and idle limits.
//
// While a core's segment may still become a compiled one, its calls are held back (deferred);
// every boundary launches what is held: the compiled kernel when the whole segment matches
// (operators, signatures, dataflow, which results the program still holds, fixed scalar values,
// no memory hazard), else the calls one by one, exactly as plain eager would have.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/csrc/utils/pybind.h>

#include <functional>
#include <vector>

#include "../host_aliases.h"
#include "../launch.h"

namespace torch_neuronx::adaptive {

// How an argument of a call takes part in a segment.
enum class Role : uint8_t { Tensor, TensorList, OptTensorList, Scalar, Value };

// A planned lowering-table call that a segment may hold.
struct Call {
  c10::OperatorHandle op;
  uint64_t plan = 0;                      // identity of the operator and its signature
  const std::vector<Role>* roles = nullptr;  // per argument; owned by the operator's kernel
  std::vector<c10::IValue> args;          // the caller's arguments (identity of tensors)
  std::vector<c10::IValue> outputs;       // per return: its fresh tensor(s), or None (an argument)
  std::vector<c10::IValue> kernel_args;   // the kernel's arguments, tensors as indices of `records`
  std::vector<c10::IValue> kernel_outputs;  // per return: its fresh tensor(s) as indices, or None
  TensorRecords records;                  // the call's tensors as its kernel (or a fused one) sees them
  std::function<void()> kernel;           // the call alone
  Launch how;
};

bool enabled();
void set_enabled(bool on);
// Launches `call` now, or keeps it in its core's segment.
void submit(c10::DeviceIndex device, Call call);
// A boundary of `device`'s segment: what it holds is launched.
void end_segment(c10::DeviceIndex device);
// The _C functions of torch_neuronx/adaptive: switch, compiler callback, installs, counters.
void bind(pybind11::module_& m);

}  // namespace torch_neuronx::adaptive
