// The generic device kernel's parts, shared by the files that implement it: how an operator's
// arguments take part in a call's signature (operator_signature.cpp), the plan a signature's first
// launch records (first_launch.cpp), the launches that follow a plan (planned_launch.cpp), the out=
// trial (out_trial.cpp), and the kernel object itself (native_kernel.cpp). native_kernel.h is what
// the rest of the shim uses.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <c10/util/SmallVector.h>

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "../adaptive/adaptive.h"
#include "../host_aliases.h"
#include "../../runtime/runtime.h"

namespace torch_neuronx::native {

inline const c10::DispatchKeySet kCpuKeys(c10::DispatchKey::CPU);
inline const c10::DispatchKeySet kNeuronKeys(c10::DispatchKey::PrivateUse1);
inline constexpr size_t kMaxPlans = 4096;  // per operator
// A first launch that fails as unimplemented (or by an injected fault) runs on the CPU instead
// (set_retry_failed_kernels_on_cpu).
inline std::atomic<bool> retry_on_cpu{true};

// Why an operator cannot run on the device; empty when it can.
struct Placement {
  c10::DeviceIndex device = -1;
  bool float64 = false;
  bool complex = false;
  // An integer tensor (indices, counts, losses' targets): kernels that raise on bad values, which
  // an adaptive-eager segment's compiled kernel would not report as the operator does.
  bool integral = false;
};

// How each argument takes part in the signature and in the host call.
enum class ArgKind { Tensor, TensorList, OptTensorList, Scalar, Float, Generator, Value };
ArgKind classify(const c10::Argument& arg);

// A call's signature: the key of its operator's plan cache.
using Words = c10::SmallVector<int64_t, 48>;

struct SignatureHash {
  size_t operator()(const Words& w) const {
    uint64_t h = 1469598103934665603ull;
    for (int64_t x : w) h = (h ^ static_cast<uint64_t>(x)) * 1099511628211ull;
    return h;
  }
};

struct TensorLayout {
  std::vector<int64_t> sizes, strides;
  c10::ScalarType dtype;
  bool defined = true;  // e.g. convolution_backward leaves unrequested gradients undefined
  // out= arguments only: an operator may leave its output a view into a larger buffer
  // (linalg_lstsq's solution is the first n rows of LAPACK's max(m, n)-row workspace). Both are
  // relative to where the output starts: the kernel ran on a copy at offset 0, and the output
  // itself may be a view at any offset of a larger tensor (out=base[3:5]).
  int64_t storage_offset = 0;
  size_t storage_nbytes = 0;
};

// Layout of the outputs of one signature: per return, either an argument it aliases
// (in-place and out= ops) or the layouts of the fresh tensor(s) it produces.
struct Plan {
  struct Return {
    int alias_arg = -1;
    bool is_list = false;
    std::vector<TensorLayout> tensors;
  };
  std::vector<Return> returns;
  std::vector<std::pair<size_t, TensorLayout>> out_resizes;  // out= arguments the op resizes
  // The kernel's own resize warnings (resize_output warns, addbmm's resize_as_ does not).
  std::vector<c10::Warning> resize_warnings;
  bool use_out = false;  // the out= overload writes preallocated outputs correctly
  uint64_t id = next_id();  // unique in the process: names the signature in adaptive-eager segments

  static uint64_t next_id() {
    static std::atomic<uint64_t> counter{1};
    return counter++;
  }
};


class NativeKernel final : public c10::OperatorKernel {
 public:
  // `foreign`: another package's operator (not aten): its first launch writes its written
  // arguments where they are (a KV cache is not copied per new signature), and adaptive eager
  // does not fuse it.
  NativeKernel(const c10::OperatorHandle& op, bool sync, std::optional<c10::OperatorHandle> out_op,
               bool bool_index_sync, bool foreign = false);

  void operator()(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* stack);

 private:
  // --- the call's signature (operator_signature.cpp)
  // Advanced indexing takes index tensors on the CPU and moves them to the indexed tensor's
  // device, as CUDA does (Tensor?[] arguments are always indices).
  void move_cpu_indices(torch::jit::Stack::iterator first) const;
  // Checks devices and dtypes and writes the signature of the call into `key`.
  Placement scan(torch::jit::Stack::iterator first, Words& key, bool& cacheable) const;

  // --- the host call (native_kernel.cpp)
  // Host view of the arguments: device tensors become aliases, generators their CPU twin.
  torch::jit::Stack host_args(const std::vector<c10::IValue>& args, HostAliases& alias, c10::DeviceIndex device) const;
  // Runs the operator's host implementation on host arguments; results replace them.
  void call_host(const c10::OperatorHandle& op, torch::jit::Stack& s, c10::DeviceIndex device) const;
  // Kernels follow the compute threads onto an idle core's launching thread — except while a
  // fault is injected, whose tests expect the worker to raise it.
  neuron_rt::HostWork host_work() const;
  // The kernel's fault point (torch_neuronx.runtime.inject_fault), before it computes.
  void maybe_fault() const;
  at::Tensor allocate(const TensorLayout& layout) const;

  // --- launches of a planned signature (planned_launch.cpp)
  void launch_planned(const c10::OperatorHandle& op, const Plan& plan, std::vector<c10::IValue> args,
                      c10::DeviceIndex device, torch::jit::Stack* stack, bool integral_tensors);
  // The body of a planned call's kernel on its arguments and, per return, its new output (None
  // for an argument), as snapshots or as `records`' indices.
  std::function<void()> kernel(const c10::OperatorHandle& op, c10::DeviceIndex device, std::vector<c10::IValue> args,
                               std::vector<c10::IValue> fresh, bool use_out, TensorRecords records = {});

  // --- the first launch of a signature (first_launch.cpp)
  // First launch of a signature (or every launch of a data-dependent op): run on the core,
  // wait, and derive the outputs (and the plan) from what the CPU kernel produced.
  void build(const c10::OperatorHandle& op, std::vector<c10::IValue> args, c10::DeviceIndex device,
             torch::jit::Stack* stack, const Words* key);
  // The copy a written argument runs on replaces every argument that is the same tensor, in
  // tensor lists too, so the kernel sees the identity (cat([x, x], out=x) refuses, as on the CPU).
  void share_copy(const std::vector<c10::IValue>& args, torch::jit::Stack& host, size_t written,
                  const at::Tensor& copy) const;
  // A written argument that overlaps another input without being it (x.add_(x[0])) runs on its
  // alias, so the kernel sees the overlap and refuses it as on the CPU.
  bool overlaps_an_input(const std::vector<c10::IValue>& args, size_t out) const;

  // --- the out= trial (out_trial.cpp)
  // Runs the out= overload on fixed-size host outputs and checks it reproduces the functional
  // results: some out= kernels resize their output on the way (reduced losses) or differ.
  bool out_overload_matches(const std::vector<c10::IValue>& args, const torch::jit::Stack& results,
                            c10::DeviceIndex device) const;

  const std::string name_;
  const bool sync_, bool_index_sync_, foreign_;
  const std::optional<c10::OperatorHandle> out_op_;
  std::optional<c10::OperatorHandle> host_op_;
  void (*adapt_)(torch::jit::Stack&) = nullptr;
  void (*host_run_)(torch::jit::Stack&, c10::DeviceIndex) = nullptr;
  bool has_generator_ = false;
  std::vector<ArgKind> kinds_;
  std::vector<bool> is_out_, written_;
  bool has_index_list_ = false;
  std::vector<Plan::Return> return_shape_;
  bool functional_ = true;
  bool fusable_ = false;
  std::vector<adaptive::Role> roles_;
  std::mutex cache_mu_;
  std::unordered_map<Words, std::shared_ptr<const Plan>, SignatureHash> cache_;
};

// Host tensors for a tensor list argument (or its records' indices: TensorRecords).
c10::IValue alias_list(const c10::IValue& v, HostAliases& alias);
// Strides, offset and storage size of a resized out= argument as the operator left them,
// from where the output starts in its storage.
void restride(const at::Tensor& out, const TensorLayout& layout);

}  // namespace torch_neuronx::native
