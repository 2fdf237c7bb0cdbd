// Launches of a signature that has a plan: outputs allocated from the layouts its first launch
// recorded, and the kernel queued without waiting (or held in an adaptive-eager segment).
#include "parts.h"
#include "../launch.h"
#include "../op_tracking.h"
#include "../profiler/profiler.h"

namespace torch_neuronx::native {

namespace {

// Per return of `plan`: `f` of its new output, or None for a returned argument.
template <typename F>
std::vector<c10::IValue> per_return(const Plan& plan, c10::ArrayRef<c10::IValue> outputs, F&& f) {
  std::vector<c10::IValue> values;
  values.reserve(outputs.size());
  for (size_t j = 0; j < outputs.size(); ++j)
    values.push_back(plan.returns[j].alias_arg >= 0 ? c10::IValue() : f(outputs[j]));
  return values;
}

void copy_into(const c10::IValue& device_out, const c10::IValue& host_result, HostAliases& alias) {
  if (device_out.isTensor() || device_out.isInt()) {
    const at::Tensor out = alias(device_out);
    if (out.defined()) out.copy_(host_result.toTensor());
    return;
  }
  auto outs = alias_list(device_out, alias).toTensorVector();
  auto results = host_result.toTensorList();
  for (size_t i = 0; i < outs.size(); ++i) outs[i].copy_(results[i]);
}

}  // namespace

void restride(const at::Tensor& out, const TensorLayout& layout) {
  if (out.strides() == c10::IntArrayRef(layout.strides) && layout.storage_offset == 0) return;
  const int64_t start = out.storage_offset();
  if (out.storage().nbytes() < start * out.itemsize() + layout.storage_nbytes)
    out.resize_({static_cast<int64_t>(layout.storage_nbytes / out.itemsize())});  // keeps the offset
  out.as_strided_(layout.sizes, layout.strides, start + layout.storage_offset);
}


void NativeKernel::launch_planned(const c10::OperatorHandle& op, const Plan& plan, std::vector<c10::IValue> args,
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
    adaptive::submit(device,
                     {.op = op,
                      .plan = plan.id,
                      .roles = &roles_,
                      .args = std::move(originals),
                      .outputs = std::move(returned),
                      .kernel_args = args,
                      .kernel_outputs = fresh,
                      .records = records,
                      .kernel = kernel(op, device, std::move(args), std::move(fresh), plan.use_out, std::move(records)),
                      .how = std::move(how)});
  }
  for (auto& out : outputs) stack->push_back(std::move(out));
}

std::function<void()> NativeKernel::kernel(const c10::OperatorHandle& op, c10::DeviceIndex device,
                                           std::vector<c10::IValue> args, std::vector<c10::IValue> fresh, bool use_out,
                                           TensorRecords records) {
  return [this, op, device, args = std::move(args), fresh = std::move(fresh), use_out, records = std::move(records)]() {
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

}  // namespace torch_neuronx::native
