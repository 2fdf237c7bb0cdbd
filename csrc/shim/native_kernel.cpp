// The generic device kernel behind every lowering-table entry.
//
// A kernel is built once per signature (operator, input shapes/strides/dtypes and the
// non-tensor arguments that can change output shapes), the analogue of one compiled
// executable per op: the first launch runs synchronously on the core and records the
// output layout; later launches allocate outputs from that record and enqueue the work
// without waiting. The work itself is PyTorch's CPU kernel running on host aliases of
// device memory, on the core's hardware-queue thread.
#include "native_kernel.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/util/SmallVector.h>
#include <c10/util/bit_cast.h>
#include <torch/library.h>

#include <algorithm>
#include <cstring>
#include <atomic>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "adaptive.h"
#include "allocator.h"
#include "device.h"
#include "fallback.h"
#include "generator.h"
#include "host_aliases.h"
#include "host_substitutes.h"
#include "launch.h"
#include "op_tracking.h"
#include "profiler.h"

namespace torch_neuronx {

std::string full_name(const c10::OperatorName& name) {
  return name.overload_name.empty() ? name.name : name.name + "." + name.overload_name;
}

namespace {

std::atomic<bool> retry_on_cpu{true};

const c10::DispatchKeySet kCpuKeys(c10::DispatchKey::CPU);
constexpr size_t kMaxPlans = 4096;  // per operator
const c10::DispatchKeySet kNeuronKeys(c10::DispatchKey::PrivateUse1);

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

ArgKind classify(const c10::Argument& arg) {
  auto type = arg.real_type();
  if (auto opt = type->cast<c10::OptionalType>()) type = opt->getElementType();
  switch (type->kind()) {
    case c10::TypeKind::TensorType: return ArgKind::Tensor;
    case c10::TypeKind::NumberType: return ArgKind::Scalar;
    case c10::TypeKind::FloatType: return ArgKind::Float;
    case c10::TypeKind::GeneratorType: return ArgKind::Generator;
    case c10::TypeKind::ListType: {
      auto elem = type->castRaw<c10::ListType>()->getElementType();
      if (elem->kind() == c10::TypeKind::TensorType) return ArgKind::TensorList;
      if (auto opt = elem->cast<c10::OptionalType>())
        if (opt->getElementType()->kind() == c10::TypeKind::TensorType) return ArgKind::OptTensorList;
      if (elem->kind() == c10::TypeKind::NumberType || elem->kind() == c10::TypeKind::FloatType) return ArgKind::Scalar;
      return ArgKind::Value;
    }
    default: return ArgKind::Value;
  }
}

using Words = c10::SmallVector<int64_t, 48>;

int64_t number_kind(const c10::IValue& v) {
  if (v.isDouble()) return 1;
  if (v.isInt()) return 2;
  if (v.isBool()) return 3;
  if (v.isComplexDouble()) return 4;
  return v.isNone() ? 5 : 6;
}

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
  NativeKernel(const c10::OperatorHandle& op, bool sync, std::optional<c10::OperatorHandle> out_op,
               bool bool_index_sync)
      : name_(full_name(op.operator_name())),
        sync_(sync),
        bool_index_sync_(bool_index_sync),
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
    fusable_ = !has_generator_ && !host_run_ && !host_op_ && !sync_ && !bool_index_sync_ && !has_index_list_ &&
               std::none_of(is_out_.begin(), is_out_.end(), [](bool b) { return b; });
    for (ArgKind k : kinds_)
      roles_.push_back(k == ArgKind::Tensor                          ? adaptive::Role::Tensor
                       : k == ArgKind::TensorList                    ? adaptive::Role::TensorList
                       : k == ArgKind::OptTensorList                 ? adaptive::Role::OptTensorList
                       : k == ArgKind::Scalar || k == ArgKind::Float ? adaptive::Role::Scalar
                                                                     : adaptive::Role::Value);
  }

  void operator()(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* stack) {
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

 private:
  // Advanced indexing takes index tensors on the CPU and moves them to the indexed tensor's
  // device, as CUDA does (Tensor?[] arguments are always indices).
  void move_cpu_indices(torch::jit::Stack::iterator first) const {
    c10::Device device(kNeuron, current_device());
    auto it = first;
    for (size_t i = 0; i < kinds_.size(); ++i, ++it)
      if (kinds_[i] == ArgKind::Tensor && it->isTensor() && it->toTensor().device().type() == kNeuron) {
        device = it->toTensor().device();
        break;
      }
    it = first;
    for (size_t i = 0; i < kinds_.size(); ++i, ++it) {
      if (kinds_[i] != ArgKind::OptTensorList) continue;
      c10::List<std::optional<at::Tensor>> moved;  // a new list: the caller's (saved for autograd) stays as it is
      for (const std::optional<at::Tensor>& t : it->toOptionalTensorList())
        moved.push_back(t.has_value() && t->defined() && t->is_cpu() ? std::optional<at::Tensor>(t->to(device)) : t);
      *it = c10::IValue(moved);
    }
  }

  // Checks devices and dtypes and writes the signature of the call into `key`.
  Placement scan(torch::jit::Stack::iterator first, Words& key, bool& cacheable) const {
    Placement place;
    bool has_tensor_input = false;
    // Aliasing between arguments is part of the signature: a plan made for distinct arguments
    // must not run a call that passes one tensor twice or overlapping views, which PyTorch
    // checks (add(x, y, out=x) cannot resize x; cat([a[:2], b], out=a) overlaps).
    struct Seen {
      const c10::TensorImpl* tensor;
      const c10::StorageImpl* storage;
      int64_t offset;
    };
    c10::SmallVector<Seen, 8> seen;
    auto add_aliasing = [&](const at::Tensor& t) {
      const Seen self{t.unsafeGetTensorImpl(), t.storage().unsafeGetStorageImpl(), t.storage_offset()};
      int64_t code = -1, offset = 0;
      for (size_t k = 0; k < seen.size() && code < 0; ++k) {
        if (seen[k].tensor == self.tensor) code = 2 * static_cast<int64_t>(k) + 1;
        else if (seen[k].storage == self.storage)
          code = 2 * static_cast<int64_t>(k), offset = self.offset - seen[k].offset;
      }
      key.push_back(code);
      if (code >= 0 && code % 2 == 0) key.push_back(offset);
      seen.push_back(self);
    };
    auto add_tensor = [&](const at::Tensor& t, bool is_out) {
      if (!t.defined()) {
        key.push_back(-1);
        return;
      }
      if (t.device().type() == kNeuron) {
        add_aliasing(t);
        if (place.device < 0) place.device = t.device().index();
        TORCH_CHECK(place.device == t.device().index(),
                    "Expected all tensors to be on the same device, but found at least two "
                    "devices, neuron:",
                    static_cast<int>(place.device), " and neuron:", static_cast<int>(t.device().index()),
                    "! (when checking arguments for ", name_, ")");
        const auto dtype = t.scalar_type();
        if (dtype == c10::ScalarType::Double) place.float64 = true;
        if (c10::isComplexType(dtype)) place.complex = true;
        if (c10::isIntegralType(dtype, /*includeBool=*/false)) place.integral = true;
        check_supported_dtype(dtype, name_);
        if (bool_index_sync_ && (dtype == c10::ScalarType::Bool || dtype == c10::ScalarType::Byte)) cacheable = false;
      } else {
        TORCH_CHECK(t.dim() == 0 && t.is_cpu(),
                    "Expected all tensors to be on the same device, but found at least two "
                    "devices, ",
                    t.device(), " and neuron! (when checking arguments for ", name_,
                    "). Move the tensor with .to(\"neuron\") first.");
        key.push_back(t.unsafeGetTensorImpl()->is_wrapped_number() ? -3 : -2);
      }
      if (!is_out) has_tensor_input = true;
      key.push_back(static_cast<int64_t>(t.scalar_type()));
      key.push_back(t.dim());
      key.append(t.sizes().begin(), t.sizes().end());
      key.append(t.strides().begin(), t.strides().end());
    };
    auto it = first;
    for (size_t i = 0; i < kinds_.size(); ++i, ++it) {
      const c10::IValue& v = *it;
      switch (kinds_[i]) {
        case ArgKind::Tensor:
          if (v.isNone()) key.push_back(-4);
          else add_tensor(v.toTensor(), is_out_[i]);
          break;
        case ArgKind::TensorList: {
          auto list = v.toTensorList();
          key.push_back(static_cast<int64_t>(list.size()));
          for (const at::Tensor& t : list) add_tensor(t, is_out_[i]);
          break;
        }
        case ArgKind::OptTensorList: {
          auto list = v.toOptionalTensorList();
          key.push_back(static_cast<int64_t>(list.size()));
          for (const std::optional<at::Tensor>& t : list) {
            if (t.has_value()) add_tensor(*t, false);
            else key.push_back(-4);
          }
          break;
        }
        case ArgKind::Scalar:
        case ArgKind::Float:
          // Only the kind of number matters for output layouts (type promotion) ...
          key.push_back(number_kind(v));
          if (v.isList()) key.push_back(static_cast<int64_t>(v.toListRef().size()));
          break;
        case ArgKind::Generator:
          TORCH_CHECK(v.isNone() || v.toGenerator().device().type() == kNeuron, name_,
                      ": expected a 'neuron' device type for generator but found '", v.toGenerator().device().type(),
                      "'. Use torch.Generator(\"neuron\").");
          key.push_back(-5);
          break;
        case ArgKind::Value:
          if (v.isInt()) key.push_back(v.toInt());
          else if (v.isBool()) key.push_back(v.toBool());
          else if (v.isNone()) key.push_back(-6);
          else if (v.isIntList()) {
            auto l = v.toIntVector();
            key.push_back(static_cast<int64_t>(l.size()));
            key.append(l.begin(), l.end());
          } else if (v.isBoolList()) {  // output_mask of the normalization and convolution backwards
            auto l = v.toBoolList();
            key.push_back(static_cast<int64_t>(l.size()));
            for (bool b : l) key.push_back(b);
          } else if (v.isString()) key.push_back(static_cast<int64_t>(std::hash<std::string>()(v.toStringRef())));
          else if (v.isDevice()) {
            key.push_back(static_cast<int64_t>(v.toDevice().type()) * 1000 + v.toDevice().index());
            if (v.toDevice().type() == kNeuron && place.device < 0) place.device = v.toDevice().index();
          } else cacheable = false;
          break;
      }
    }
    // ... except for factories (arange), whose output size comes from scalar values.
    if (!has_tensor_input) {
      it = first;
      for (size_t i = 0; i < kinds_.size(); ++i, ++it) {
        if (kinds_[i] != ArgKind::Scalar && kinds_[i] != ArgKind::Float) continue;
        const c10::IValue& v = *it;
        if (v.isDouble()) key.push_back(c10::bit_cast<int64_t>(v.toDouble()));
        else if (v.isInt()) key.push_back(v.toInt());
        else if (v.isBool()) key.push_back(v.toBool());
        else if (!v.isNone()) cacheable = false;
      }
    }
    return place;
  }

  // Host tensors for a tensor list argument (or its records' indices: TensorRecords).
  static c10::IValue alias_list(const c10::IValue& v, HostAliases& alias) {
    std::vector<at::Tensor> list;
    if (v.isIntList()) {
      for (int64_t i : v.toIntVector()) list.push_back(alias(c10::IValue(i)));
    } else {
      for (const at::Tensor& t : v.toTensorList()) list.push_back(alias(t));
    }
    return list;
  }

  // Host view of the arguments: device tensors become aliases, generators their CPU twin.
  torch::jit::Stack host_args(const std::vector<c10::IValue>& args, HostAliases& alias, c10::DeviceIndex device) const {
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

  // Runs the operator's host implementation on host arguments; results replace them.
  void call_host(const c10::OperatorHandle& op, torch::jit::Stack& s, c10::DeviceIndex device) const {
    if (host_run_) return host_run_(s, device);
    if (!host_op_) return op.redispatchBoxed(kCpuKeys, &s);
    if (adapt_) adapt_(s);
    host_op_->callBoxed(&s);
  }

  // Kernels follow the compute threads onto an idle core's launching thread — except while a
  // fault is injected, whose tests expect the worker to raise it.
  neuron_rt::HostWork host_work() const {
    return neuron_rt::Runtime::get().faults().pending(name_) ? neuron_rt::HostWork::kNever
                                                             : neuron_rt::HostWork::kFollow;
  }

  // The kernel's fault point (torch_neuronx.runtime.inject_fault), before it computes.
  void maybe_fault() const { neuron_rt::Runtime::get().faults().check(name_); }

  at::Tensor allocate(const TensorLayout& layout) const {
    if (!layout.defined) return at::Tensor();
    return at::detail::empty_strided_generic(layout.sizes, layout.strides, allocator(), kNeuronKeys, layout.dtype);
  }

  // Strides, offset and storage size of a resized out= argument as the operator left them,
  // from where the output starts in its storage.
  static void restride(const at::Tensor& out, const TensorLayout& layout) {
    if (out.strides() == c10::IntArrayRef(layout.strides) && layout.storage_offset == 0) return;
    const int64_t start = out.storage_offset();
    if (out.storage().nbytes() < start * out.itemsize() + layout.storage_nbytes)
      out.resize_({static_cast<int64_t>(layout.storage_nbytes / out.itemsize())});  // keeps the offset
    out.as_strided_(layout.sizes, layout.strides, start + layout.storage_offset);
  }

  void launch_planned(const c10::OperatorHandle& op, const Plan& plan, std::vector<c10::IValue> args,
                      c10::DeviceIndex device, torch::jit::Stack* stack, bool integral_tensors) {
    for (const auto& w : plan.resize_warnings) c10::warn(w);
    for (const auto& [i, layout] : plan.out_resizes) {
      args[i].toTensor().resize_(layout.sizes);
      restride(args[i].toTensor(), layout);
    }
    c10::SmallVector<c10::IValue, 2> outputs;  // most operators return one tensor: no allocation
    for (const auto& r : plan.returns) {
      if (r.alias_arg >= 0) {
        outputs.push_back(args[r.alias_arg]);
      } else if (r.is_list) {
        std::vector<at::Tensor> list;
        for (const auto& layout : r.tensors) list.push_back(allocate(layout));
        outputs.emplace_back(list);
      } else {
        outputs.emplace_back(allocate(r.tensors[0]));
      }
    }
    track_kernel(op, /*on_cpu=*/false);
    const bool segment = adaptive::enabled() && fusable_ && plan.out_resizes.empty() &&
                         host_work() == neuron_rt::HostWork::kFollow && !integral_tensors &&
                         !neuron_rt::Runtime::get().topology().launch_blocking;
    std::vector<c10::IValue> originals = segment ? args : std::vector<c10::IValue>();
    std::string described = profiler::describe_launch(args, outputs);
    Launch how{.name = name_, .host = host_work(), .described = std::move(described)};
    if (!segment) {
      // The kernel works on the tensors as they are now, whatever the caller does to their
      // metadata (squeeze_, t_, as_strided_, ...) before it runs.
      TensorRecords records;
      std::vector<c10::IValue> fresh = per_return(plan, outputs, records);
      for (auto& arg : args) arg = records(arg);
      launch(device, kernel(op, device, std::move(args), std::move(fresh), plan.use_out, std::move(records)),
             std::move(how));
    } else {
      TensorRecords records;  // the call's, or a fused kernel's (adaptive.h)
      std::vector<c10::IValue> fresh = per_return(plan, outputs, records);
      for (auto& arg : args) arg = records(arg);
      std::vector<c10::IValue> returned = per_return(plan, outputs, [](const c10::IValue& v) { return v; });
      adaptive::submit(device, {.op = op,
                                .plan = plan.id,
                                .roles = &roles_,
                                .args = std::move(originals),
                                .outputs = std::move(returned),
                                .kernel_args = args,
                                .kernel_outputs = fresh,
                                .records = records,
                                .kernel = kernel(op, device, std::move(args), std::move(fresh), plan.use_out,
                                                 std::move(records)),
                                .how = std::move(how)});
    }
    for (auto& out : outputs) stack->push_back(std::move(out));
  }

  // Per return of `plan`: `f` of its new output, or None for a returned argument.
  template <typename F>
  static std::vector<c10::IValue> per_return(const Plan& plan, c10::ArrayRef<c10::IValue> outputs, F&& f) {
    std::vector<c10::IValue> values;
    values.reserve(outputs.size());
    for (size_t j = 0; j < outputs.size(); ++j)
      values.push_back(plan.returns[j].alias_arg >= 0 ? c10::IValue() : f(outputs[j]));
    return values;
  }

  // The body of a planned call's kernel on its arguments and, per return, its new output (None
  // for an argument), as snapshots or as `records`' indices.
  std::function<void()> kernel(const c10::OperatorHandle& op, c10::DeviceIndex device, std::vector<c10::IValue> args,
                               std::vector<c10::IValue> fresh, bool use_out, TensorRecords records = {}) {
    return
        [this, op, device, args = std::move(args), fresh = std::move(fresh), use_out, records = std::move(records)]() {
      maybe_fault();
      HostAliases alias(/*resizable=*/false, &records);
      auto s = host_args(args, alias, device);
      const at::AutoDispatchBelowADInplaceOrView below_autograd;
      if (use_out) {
        for (const auto& out : fresh)
          s.push_back(out.isTensor() || out.isInt() ? c10::IValue(alias(out)) : alias_list(out, alias));
        return out_op_->redispatchBoxed(kCpuKeys, &s);
      }
      call_host(op, s, device);
      for (size_t j = 0; j < fresh.size(); ++j)
        if (!fresh[j].isNone()) copy_into(fresh[j], s[j], alias);
    };
  }

  static void copy_into(const c10::IValue& device_out, const c10::IValue& host_result, HostAliases& alias) {
    if (device_out.isTensor() || device_out.isInt()) {
      const at::Tensor out = alias(device_out);
      if (out.defined()) out.copy_(host_result.toTensor());
      return;
    }
    auto outs = alias_list(device_out, alias).toTensorVector();
    auto results = host_result.toTensorList();
    for (size_t i = 0; i < outs.size(); ++i) outs[i].copy_(results[i]);
  }

  // Runs the out= overload on fixed-size host outputs and checks it reproduces the functional
  // results: some out= kernels resize their output on the way (reduced losses) or differ.
  bool out_overload_matches(const std::vector<c10::IValue>& args, const torch::jit::Stack& results,
                            c10::DeviceIndex device) const {
    HostAliases alias;
    auto s = host_args(args, alias, device);
    // On copies of the inputs: some operators write arguments their schema does not mark
    // (native_batch_norm's running statistics), and the real call has already happened.
    auto copy = [](const at::Tensor& t) { return t.defined() ? t.clone() : t; };
    for (auto& v : s) {
      if (v.isTensor()) v = copy(v.toTensor());
      else if (v.isTensorList()) {
        std::vector<at::Tensor> copies;
        for (const at::Tensor& t : v.toTensorList()) copies.push_back(copy(t));
        v = copies;
      }
    }
    std::vector<at::Tensor> scratch;
    for (size_t j = 0; j < return_shape_.size(); ++j) {
      std::vector<at::Tensor> list;
      for (const at::Tensor& h :
           results[j].isTensor() ? std::vector<at::Tensor>{results[j].toTensor()} : results[j].toTensorVector()) {
        if (!h.defined()) return false;
        list.push_back(fixed_size_like(h));
        scratch.push_back(list.back());
      }
      if (return_shape_[j].is_list) s.push_back(c10::IValue(list));
      else s.push_back(list[0]);
    }
    try {
      out_op_->redispatchBoxed(kCpuKeys, &s);
    } catch (const std::exception&) {
      return false;
    }
    size_t k = 0;
    for (size_t j = 0; j < return_shape_.size(); ++j)
      for (const at::Tensor& h :
           results[j].isTensor() ? std::vector<at::Tensor>{results[j].toTensor()} : results[j].toTensorVector())
        if (!scratch[k++].equal(h)) return false;
    return true;
  }

  // The copy a written argument runs on replaces every argument that is the same tensor, in
  // tensor lists too, so the kernel sees the identity (cat([x, x], out=x) refuses, as on the CPU).
  void share_copy(const std::vector<c10::IValue>& args, torch::jit::Stack& host, size_t written,
                  const at::Tensor& copy) const {
    const at::Tensor& w = args[written].toTensor();
    for (size_t j = 0; j < kinds_.size(); ++j) {
      if (kinds_[j] == ArgKind::Tensor && args[j].isTensor() && args[j].toTensor().is_same(w)) host[j] = copy;
      if (kinds_[j] != ArgKind::TensorList) continue;
      auto list = args[j].toTensorList();
      if (std::none_of(list.begin(), list.end(), [&](const at::Tensor& t) { return t.is_same(w); })) continue;
      std::vector<at::Tensor> shared = host[j].toTensorVector();
      for (size_t k = 0; k < list.size(); ++k)
        if (list.get(k).is_same(w)) shared[k] = copy;
      host[j] = c10::IValue(shared);
    }
  }

  // A written argument that overlaps another input without being it (x.add_(x[0])) runs on its
  // alias, so the kernel sees the overlap and refuses it as on the CPU.
  bool overlaps_an_input(const std::vector<c10::IValue>& args, size_t out) const {
    const at::Tensor& o = args[out].toTensor();
    auto overlaps = [&](const at::Tensor& t) { return t.defined() && t.is_alias_of(o) && !t.is_same(o); };
    for (size_t j = 0; j < args.size(); ++j) {
      if (j == out || written_[j]) continue;
      if (kinds_[j] == ArgKind::Tensor && args[j].isTensor() && overlaps(args[j].toTensor())) return true;
      if (kinds_[j] == ArgKind::TensorList)  // cat([a[:2], b], out=a)
        for (const at::Tensor& t : args[j].toTensorList())
          if (overlaps(t)) return true;
      if (kinds_[j] == ArgKind::OptTensorList)
        for (const std::optional<at::Tensor>& t : args[j].toOptionalTensorList())
          if (t.has_value() && overlaps(*t)) return true;
    }
    return false;
  }

  // A resizable host copy of a written argument with its exact layout: a dense one is cloned as
  // it is laid out; any other (every other element of a buffer) copies its whole storage, since
  // some kernels depend on the layout (normal_ draws in memory order, per layout as on the CPU).
  static at::Tensor layout_copy(const at::Tensor& host) {
    if (host.is_non_overlapping_and_dense()) return host.clone(at::MemoryFormat::Preserve);
    const size_t nbytes = host.storage().nbytes();
    c10::Storage storage(c10::Storage::use_byte_size_t(), nbytes, c10::GetCPUAllocator(), true);
    if (nbytes) std::memcpy(storage.mutable_data(), host.storage().data(), nbytes);
    return tensor_on(std::move(storage), c10::DispatchKey::CPU, host);
  }

  static at::Tensor fixed_size_like(const at::Tensor& t) {
    const size_t nbytes = at::detail::computeStorageNbytes(t.sizes(), t.strides(), t.itemsize());
    c10::Storage storage(c10::Storage::use_byte_size_t(), nbytes, c10::GetCPUAllocator(), false);
    return at::empty({0}, t.options()).set_(storage, 0, t.sizes(), t.strides());
  }

  // First launch of a signature (or every launch of a data-dependent op): run on the core,
  // wait, and derive the outputs (and the plan) from what the CPU kernel produced.
  void build(const c10::OperatorHandle& op, std::vector<c10::IValue> args, c10::DeviceIndex device,
             torch::jit::Stack* stack, const Words* key) {
    torch::jit::Stack results;
    // Written arguments (out= and in-place) run on resizable copies: the CPU kernel may resize
    // them (addbmm_ grows a broadcast self). An input that is the same tensor shares the copy,
    // so the kernel sees the identity (logical_and.out(x, x, y, out=x) refuses to broadcast).
    struct WrittenCopy {
      size_t arg;
      at::Tensor copy;
      int64_t start;  // the copy's offset before the kernel: layouts are recorded relative to it
    };
    std::vector<WrittenCopy> out_clones;
    std::vector<std::pair<size_t, TensorLayout>> alias_resizes;  // written in place on its alias
    std::vector<std::pair<size_t, c10::Storage>> grown_aliases;  // ... whose storage it grew
    bool resizes_an_input = false;
    WarningCollector warnings;
    bool use_out = false;
    // The profiler's cost model needs the outputs: an in-place call knows them now, any other
    // call describes itself on the copies of its results below.
    std::vector<c10::IValue> aliases;
    for (const auto& r : return_shape_)
      if (r.alias_arg >= 0) aliases.push_back(args[r.alias_arg]);
    const bool in_place = aliases.size() == return_shape_.size();
    try {
      launch(device,
             [&] {
        const c10::WarningUtils::WarningHandlerGuard collect(&warnings);
        maybe_fault();
        HostAliases alias(/*resizable=*/true);
        results = host_args(args, alias, device);
        for (size_t i = 0; i < kinds_.size(); ++i) {
          // Self-overlapping outputs (expanded) stay aliases too: the kernel refuses them.
          if (!written_[i] || kinds_[i] != ArgKind::Tensor || !results[i].isTensor() ||
              !results[i].toTensor().defined() || overlaps_an_input(args, i) ||
              at::has_internal_overlap(args[i].toTensor()) == at::MemOverlap::Yes)
            continue;
          auto clone = layout_copy(results[i].toTensor());
          out_clones.push_back({i, clone, clone.storage_offset()});
          share_copy(args, results, i, clone);
        }
        // Written arguments that stay aliases: the kernel may resize those too.
        std::vector<std::pair<size_t, at::Tensor>> written_aliases;
        for (size_t i = 0; i < kinds_.size(); ++i)
          if (written_[i] && kinds_[i] == ArgKind::Tensor && results[i].isTensor() && results[i].toTensor().defined() &&
              std::none_of(out_clones.begin(), out_clones.end(), [&](const auto& c) { return c.arg == i; }))
            written_aliases.emplace_back(i, results[i].toTensor());
        const at::AutoDispatchBelowADInplaceOrView below_autograd;
        call_host(op, results, device);
        for (const auto& [i, host] : written_aliases) {
          const at::Tensor& out = args[i].toTensor();
          if (host.storage().data() != out.storage().data())  // grown, now on the host
            grown_aliases.emplace_back(i, host.storage());
          if (host.sizes() != out.sizes() || host.strides() != out.strides() ||
              host.storage_offset() != out.storage_offset())
            alias_resizes.emplace_back(i, TensorLayout{host.sizes().vec(), host.strides().vec(), host.scalar_type(),
                                                       true, host.storage_offset() - out.storage_offset(),
                                                       host.storage().nbytes() -
                                                           static_cast<size_t>(out.storage_offset()) * out.itemsize()});
        }
        if (key && functional_ && out_op_ && !has_generator_ && !host_run_ && !host_op_) {
          WarningCollector ignored;  // the trial run's warnings are not the user's
          const c10::WarningUtils::WarningHandlerGuard quiet(&ignored);
          use_out = out_overload_matches(args, results, device);
        }
      },
             {.name = name_,
              .host = host_work(),
              .completion = Launch::kWaited,
              .described = in_place ? profiler::describe_launch(args, aliases) : std::string()});
    } catch (const std::exception& e) {
      const bool unimplemented = dynamic_cast<const c10::NotImplementedError*>(&e) ||
                                 dynamic_cast<const neuron_rt::InjectedFault*>(&e);
      if (!(retry_on_cpu && unimplemented)) throw;
      for (auto& a : args) stack->push_back(std::move(a));
      return fallback_to_cpu(op, stack, std::string("the device kernel failed (") + e.what() + ")");
    }
    for (const auto& w : warnings.warnings) c10::warn(w);  // as if the kernel ran on this thread
    // The first copy launched below carries the call's description (an in-place call's did).
    std::string described = in_place ? std::string() : profiler::describe_launch(args, results);
    auto copy_launch = [&] {
      return Launch{.name = name_, .host = host_work(), .described = std::exchange(described, {})};
    };

    track_kernel(op, /*on_cpu=*/false);
    auto plan = std::make_shared<Plan>();
    plan->use_out = use_out;
    for (const auto& w : warnings.warnings)
      if (w.msg().find("was resized") != std::string::npos) plan->resize_warnings.push_back(w);
    // An output the kernel resized on its alias (it overlaps an input): the device tensor takes
    // the geometry the kernel left, as the CPU's does; such calls are not planned.
    for (const auto& [i, grown] : grown_aliases) {  // the device storage grows and takes its bytes
      const at::Tensor& out = args[i].toTensor();
      if (out.storage().nbytes() < grown.nbytes())  // the storage itself: its views all see it
        at::detail::getPrivateUse1Hooks().resizePrivateUse1Bytes(out.storage(), grown.nbytes());
      launch(device, [out = snapshot(out), grown] {
        std::memcpy(const_cast<void*>(out.storage().data()), grown.data(), grown.nbytes());
      }, copy_launch());
    }
    for (const auto& [i, layout] : alias_resizes) {
      const at::Tensor& out = args[i].toTensor();
      out.resize_(layout.sizes);
      restride(out, layout);
      resizes_an_input = true;
    }
    for (auto& [i, clone, start] : out_clones) {
      at::Tensor out = args[i].toTensor();
      if (out.sizes() != clone.sizes()) {  // the operator resized its output (and warned)
        // Planned launches resize before the kernel runs, which would change an input too.
        resizes_an_input |= !is_out_[i] || std::any_of(args.begin(), args.end(), [&](const c10::IValue& a) {
          return &a != &args[i] && a.isTensor() && a.toTensor().is_same(out);
        });
        TensorLayout layout{clone.sizes().vec(),
                            clone.strides().vec(),
                            clone.scalar_type(),
                            true,
                            clone.storage_offset() - start,
                            clone.storage().nbytes() - static_cast<size_t>(start) * clone.itemsize()};
        out.resize_(layout.sizes);
        restride(out, layout);
        plan->out_resizes.emplace_back(i, std::move(layout));
      }
      launch(device, [out = snapshot(out), clone] { host_alias(out).copy_(clone); }, copy_launch());
    }

    plan->returns = return_shape_;
    for (size_t j = 0; j < plan->returns.size(); ++j) {
      auto& r = plan->returns[j];
      if (r.alias_arg >= 0) {
        stack->push_back(args[r.alias_arg]);
        continue;
      }
      const c10::IValue& result = results[j];
      if (!result.isTensor() && !result.isTensorList()) {  // bool / int / float results
        stack->push_back(result);
        key = nullptr;
        continue;
      }
      std::vector<at::Tensor> hosts = result.isTensor() ? std::vector<at::Tensor>{result.toTensor()}
                                                        : result.toTensorVector();
      std::vector<at::Tensor> outs;
      for (const at::Tensor& h : hosts) {
        TensorLayout layout{{}, {}, c10::ScalarType::Undefined, h.defined()};
        if (h.defined()) layout = {h.sizes().vec(), h.strides().vec(), h.scalar_type()};
        at::Tensor out = allocate(layout);
        if (h.defined()) launch(device, [out = snapshot(out), h] { host_alias(out).copy_(h); }, copy_launch());
        outs.push_back(out);
        r.tensors.push_back(std::move(layout));
      }
      if (r.is_list) stack->push_back(c10::IValue(outs));
      else stack->push_back(outs[0]);
    }
    if (key && !resizes_an_input) {
      std::lock_guard<std::mutex> lock(cache_mu_);
      if (cache_.size() >= kMaxPlans) cache_.clear();  // shapes keep changing: start over
      cache_.emplace(*key, std::move(plan));
    }
  }

  const std::string name_;
  const bool sync_, bool_index_sync_;
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

std::mutex registry_mu;
std::unordered_map<std::string, NativeKernel*>& registry() {
  static auto* r = new std::unordered_map<std::string, NativeKernel*>();
  return *r;
}

torch::Library& library() {
  static auto* lib = new torch::Library(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1, __FILE__,
                                        __LINE__);
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
  auto kernel = std::make_unique<NativeKernel>(handle, sync, out_op, bool_index_sync);
  {
    std::lock_guard<std::mutex> lock(registry_mu);
    TORCH_CHECK(!registry().count(op), op, " is registered twice");
    registry()[op] = kernel.get();
  }
  library().impl(op.substr(6).c_str(), torch::CppFunction::makeFromBoxedFunctor(std::move(kernel)));
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
    kernel(op, kNeuronKeys, &stack);
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

void set_retry_failed_kernels_on_cpu(bool retry) { retry_on_cpu = retry; }

void inject_fault(const std::string& op, int count) {
  std::lock_guard<std::mutex> lock(registry_mu);
  auto it = registry().find(op);
  TORCH_CHECK(it != registry().end(), "inject_fault: ", op,
              " has no device kernel (it is not in "
              "the lowering table); faults can only be injected into device kernels");
  neuron_rt::Runtime::get().faults().inject(op, count);
}

}  // namespace torch_neuronx
