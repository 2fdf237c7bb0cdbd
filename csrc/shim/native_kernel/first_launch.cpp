// The first launch of a signature (or every launch of a data-dependent operator): the kernel runs
// on the core while the caller waits, and the outputs and the plan come from what PyTorch's CPU
// kernel produced, written arguments (out= and in-place) computed on copies the kernel may resize.
#include <ATen/MemoryOverlap.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/CPUAllocator.h>

#include <algorithm>
#include <cstring>

#include "parts.h"
#include "../fallback.h"
#include "../launch.h"
#include "../op_tracking.h"
#include "../profiler/profiler.h"

namespace torch_neuronx::native {

namespace {

// A resizable host copy of a written argument with its exact layout: a dense one is cloned as
// it is laid out; any other (every other element of a buffer) copies its whole storage, since
// some kernels depend on the layout (normal_ draws in memory order, per layout as on the CPU).
at::Tensor layout_copy(const at::Tensor& host) {
  if (host.is_non_overlapping_and_dense()) return host.clone(at::MemoryFormat::Preserve);
  const size_t nbytes = host.storage().nbytes();
  c10::Storage storage(c10::Storage::use_byte_size_t(), nbytes, c10::GetCPUAllocator(), true);
  if (nbytes) std::memcpy(storage.mutable_data(), host.storage().data(), nbytes);
  return tensor_on(std::move(storage), c10::DispatchKey::CPU, host);
}

}  // namespace

void NativeKernel::build(const c10::OperatorHandle& op, std::vector<c10::IValue> args, c10::DeviceIndex device,
                         torch::jit::Stack* stack, const Words* key) {
  torch::jit::Stack results;
  // Written arguments (out= and in-place) run on resizable copies: the CPU kernel may resize
  // them (addbmm_ grows a broadcast self). An input that is the same tensor shares the copy,
  // so the kernel sees the identity (logical_and.out(x, x, y, out=x) refuses to broadcast).
  // Another package's operators write in place (foreign_): their written arguments can be whole
  // KV caches, which a copy per new signature would make the cost of every new prompt length.
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
        if (foreign_ || !written_[i] || kinds_[i] != ArgKind::Tensor || !results[i].isTensor() ||
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
          alias_resizes.emplace_back(i, TensorLayout{host.sizes().vec(), host.strides().vec(), host.scalar_type(), true,
                                                     host.storage_offset() - out.storage_offset(),
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

void NativeKernel::share_copy(const std::vector<c10::IValue>& args, torch::jit::Stack& host, size_t written,
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

bool NativeKernel::overlaps_an_input(const std::vector<c10::IValue>& args, size_t out) const {
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

}  // namespace torch_neuronx::native
