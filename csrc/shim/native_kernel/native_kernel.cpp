// The generic device kernel behind every lowering-table entry.
//
// A kernel is built once per signature (operator, input shapes/strides/dtypes and the
// non-tensor arguments that can change output shapes), the analogue of one compiled
// executable per op: the first launch runs synchronously on the core and records the
// output layout; later launches allocate outputs from that record and enqueue the work
// without waiting. The work itself is PyTorch's CPU kernel running on host aliases of
// device memory, on the core's hardware-queue thread.
//
// The kernel object and its host call live here; its parts in the files parts.h names.
#include "native_kernel.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/library.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "../allocator.h"
#include "../device.h"
#include "../fallback.h"
#include "../generator.h"
#include "../host_substitutes.h"
#include "parts.h"

namespace torch_neuronx {

std::string full_name(const c10::OperatorName& name) {
  return name.overload_name.empty() ? name.name : name.name + "." + name.overload_name;
}

namespace native {

NativeKernel::NativeKernel(const c10::OperatorHandle& op, bool sync, std::optional<c10::OperatorHandle> out_op,
                           bool bool_index_sync, bool foreign)
    : name_(full_name(op.operator_name())),
      sync_(sync),
      bool_index_sync_(bool_index_sync),
      foreign_(foreign),
      out_op_(std::move(out_op)) {
  if (auto it = host_substitutes().find(name_); it != host_substitutes().end()) {
    if (it->second.host_op) host_op_ = c10::Dispatcher::singleton().findSchemaOrThrow(it->second.host_op, "");
    adapt_ = it->second.adapt;
    host_run_ = it->second.run;
  }
  const auto& schema = op.schema();
  // Functional: neither writes an argument nor returns one (batch norm's running stats are
  // written although its results are fresh).
  functional_ = true;
  for (const auto& arg : schema.arguments()) {
    kinds_.push_back(classify(arg));
    is_out_.push_back(arg.is_out());
    written_.push_back(arg.alias_info() && arg.alias_info()->isWrite());
    has_generator_ |= kinds_.back() == ArgKind::Generator;
    has_index_list_ |= kinds_.back() == ArgKind::OptTensorList;
    if (written_.back()) functional_ = false;
  }
  for (const auto& ret : schema.returns()) {
    Plan::Return r;
    r.is_list = ret.real_type()->kind() == c10::TypeKind::ListType;
    if (const auto* info = ret.alias_info()) {
      TORCH_CHECK(info->isWrite(), name_, " returns a view; views cannot be lowering-table entries");
      functional_ = false;
      for (size_t i = 0; i < schema.arguments().size(); ++i) {
        const auto* a = schema.arguments()[i].alias_info();
        if (a && a->isWrite() && a->beforeSets() == info->beforeSets()) r.alias_arg = static_cast<int>(i);
      }
      TORCH_CHECK(r.alias_arg >= 0, name_, ": cannot find the argument its result aliases");
    }
    return_shape_.push_back(r);
  }
  // What adaptive eager may hold in a segment and compile: functional and in-place calls
  // (not out=, whose outputs a plan may resize), drawing no random numbers, with no host
  // substitute, no synchronizing or data-dependent result and no index lists.
  fusable_ = !foreign_ && !has_generator_ && !host_run_ && !host_op_ && !sync_ && !bool_index_sync_ &&
             !has_index_list_ && std::none_of(is_out_.begin(), is_out_.end(), [](bool b) { return b; });
  for (ArgKind k : kinds_)
    roles_.push_back(k == ArgKind::Tensor                          ? adaptive::Role::Tensor
                     : k == ArgKind::TensorList                    ? adaptive::Role::TensorList
                     : k == ArgKind::OptTensorList                 ? adaptive::Role::OptTensorList
                     : k == ArgKind::Scalar || k == ArgKind::Float ? adaptive::Role::Scalar
                                                                   : adaptive::Role::Value);
}

void NativeKernel::operator()(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* stack) {
  const size_t n = kinds_.size();
  const auto first = stack->end() - static_cast<std::ptrdiff_t>(n);
  if (has_index_list_) move_cpu_indices(first);
  Words key;
  bool cacheable = !sync_;
  const Placement place = scan(first, key, cacheable);
  cacheable &= !place.float64;
  if (place.complex) return fallback_to_cpu(op, stack, kComplexReason);
  if (place.float64 && !host_op_ && !host_run_) return fallback_to_cpu(op, stack, kFloat64Reason);
  if (place.float64) note_fallback(op, *stack, kFloat64Reason);  // the host substitute runs it
  const auto device = place.device >= 0 ? place.device : current_device();
  const c10::DeviceGuard guard(c10::Device(kNeuron, device));

  std::shared_ptr<const Plan> plan;
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mu_);
    auto it = cache_.find(key);
    if (it != cache_.end()) plan = it->second;
  }
  std::vector<c10::IValue> args(std::make_move_iterator(first), std::make_move_iterator(stack->end()));
  stack->erase(first, stack->end());
  if (plan) return launch_planned(op, *plan, std::move(args), device, stack, place.integral);
  build(op, std::move(args), device, stack, cacheable ? &key : nullptr);
}

c10::IValue alias_list(const c10::IValue& v, HostAliases& alias) {
  std::vector<at::Tensor> list;
  if (v.isIntList()) {
    for (int64_t i : v.toIntVector()) list.push_back(alias(c10::IValue(i)));
  } else {
    for (const at::Tensor& t : v.toTensorList()) list.push_back(alias(t));
  }
  return list;
}

torch::jit::Stack NativeKernel::host_args(const std::vector<c10::IValue>& args, HostAliases& alias,
                                          c10::DeviceIndex device) const {
  torch::jit::Stack s;
  s.reserve(args.size() + 4);
  for (size_t i = 0; i < args.size(); ++i) {
    const c10::IValue& v = args[i];
    switch (kinds_[i]) {
      case ArgKind::Tensor: s.push_back(v.isNone() ? v : c10::IValue(alias(v))); break;
      case ArgKind::TensorList: s.push_back(alias_list(v, alias)); break;
      case ArgKind::OptTensorList: {
        c10::List<std::optional<at::Tensor>> list;
        if (v.isIntList()) {  // recorded (TensorRecords)
          for (int64_t i : v.toIntVector())
            list.push_back(i >= 0 ? std::optional<at::Tensor>(alias(c10::IValue(i))) : std::nullopt);
        } else {
          for (const std::optional<at::Tensor>& t : v.toOptionalTensorList())
            list.push_back(t.has_value() ? std::optional<at::Tensor>(alias(*t)) : std::nullopt);
        }
        s.push_back(c10::IValue(list));
        break;
      }
      case ArgKind::Generator:
        s.push_back(
            kernel_generator(v.isNone() ? std::nullopt : std::optional<at::Generator>(v.toGenerator()), device));
        break;
      default:
        if (v.isDevice() && v.toDevice().type() == kNeuron) s.push_back(c10::Device(at::kCPU));
        else s.push_back(v);
    }
  }
  return s;
}

void NativeKernel::call_host(const c10::OperatorHandle& op, torch::jit::Stack& s, c10::DeviceIndex device) const {
  if (host_run_) return host_run_(s, device);
  if (!host_op_) return op.redispatchBoxed(kCpuKeys, &s);
  if (adapt_) adapt_(s);
  host_op_->callBoxed(&s);
}

neuron_rt::HostWork NativeKernel::host_work() const {
  return neuron_rt::Runtime::get().faults().pending(name_) ? neuron_rt::HostWork::kNever : neuron_rt::HostWork::kFollow;
}

void NativeKernel::maybe_fault() const { neuron_rt::Runtime::get().faults().check(name_); }

at::Tensor NativeKernel::allocate(const TensorLayout& layout) const {
  if (!layout.defined) return at::Tensor();
  return at::detail::empty_strided_generic(layout.sizes, layout.strides, allocator(), kNeuronKeys, layout.dtype);
}

}  // namespace native

namespace {

using native::NativeKernel;

std::mutex registry_mu;
std::unordered_map<std::string, NativeKernel*>& registry() {
  static auto* r = new std::unordered_map<std::string, NativeKernel*>();
  return *r;
}

// One PrivateUse1 implementation library per operator namespace (aten, and the namespaces of
// other packages' CPU operators: vLLM's _C); called with registry_mu held.
torch::Library& library(const std::string& ns) {
  static auto* libs = new std::unordered_map<std::string, std::unique_ptr<torch::Library>>();
  auto& lib = (*libs)[ns];
  if (!lib)
    lib = std::make_unique<torch::Library>(torch::Library::IMPL, ns, c10::DispatchKey::PrivateUse1, __FILE__, __LINE__);
  return *lib;
}

}  // namespace

void register_native_op(const std::string& op, bool sync, const std::string& out_overload, bool bool_index_sync) {
  const auto dot = op.find('.');
  const std::string name = op.substr(0, dot);
  const std::string overload = dot == std::string::npos ? "" : op.substr(dot + 1);
  auto handle = c10::Dispatcher::singleton().findSchemaOrThrow(name.c_str(), overload.c_str());
  std::optional<c10::OperatorHandle> out_op;
  if (!out_overload.empty())
    out_op = c10::Dispatcher::singleton().findSchemaOrThrow(name.c_str(), out_overload.c_str());
  const auto colons = name.find("::");
  const std::string ns = name.substr(0, colons);
  // The table's aten entries are checked by its generator (some run through host substitutes).
  TORCH_CHECK(ns == "aten" || handle.hasComputedKernelForDispatchKey(c10::DispatchKey::CPU), op,
              " has no CPU kernel: its device kernel runs the CPU kernel on the device's memory");
  auto kernel = std::make_unique<NativeKernel>(handle, sync, out_op, bool_index_sync, /*foreign=*/ns != "aten");
  std::lock_guard<std::mutex> lock(registry_mu);
  TORCH_CHECK(!registry().count(op), op, " is registered twice");
  registry()[op] = kernel.get();
  library(ns).impl(op.substr(colons + 2).c_str(), torch::CppFunction::makeFromBoxedFunctor(std::move(kernel)));
}

namespace {

// The native kernel of one operator for calls tensor_kernels.cpp routes here. Not in the
// registry: the dispatcher's kernel for the operator is tensor_kernels.cpp's.
struct PlannedCall {
  PlannedCall(const char* name, const char* out_overload)
      : op(c10::Dispatcher::singleton().findSchemaOrThrow(name, "")),
        kernel(op, /*sync=*/false,
               *out_overload ? std::optional(c10::Dispatcher::singleton().findSchemaOrThrow(name, out_overload))
                             : std::nullopt,
               /*bool_index_sync=*/false) {}

  at::Tensor operator()(torch::jit::Stack stack) {
    kernel(op, native::kNeuronKeys, &stack);
    return stack.back().toTensor();
  }

  c10::OperatorHandle op;
  NativeKernel kernel;
};

}  // namespace

at::Tensor clone_as_planned_call(const at::Tensor& self, std::optional<c10::MemoryFormat> memory_format) {
  static auto* call = new PlannedCall("aten::clone", "out");
  return (*call)({self, memory_format});
}

at::Tensor cast_as_planned_call(const at::Tensor& self, c10::ScalarType dtype, bool non_blocking,
                                std::optional<c10::MemoryFormat> memory_format) {
  // _to_copy's out= overload takes no dtype: the kernel casts on the host and copies the result in.
  static auto* call = new PlannedCall("aten::_to_copy", "");
  const c10::IValue none;
  return (*call)({self, dtype, none, none, none, non_blocking, memory_format});
}

void set_retry_failed_kernels_on_cpu(bool retry) { native::retry_on_cpu = retry; }

void inject_fault(const std::string& op, int count) {
  std::lock_guard<std::mutex> lock(registry_mu);
  auto it = registry().find(op);
  TORCH_CHECK(it != registry().end(), "inject_fault: ", op,
              " has no device kernel (it is not in "
              "the lowering table); faults can only be injected into device kernels");
  neuron_rt::Runtime::get().faults().inject(op, count);
}

}  // namespace torch_neuronx
