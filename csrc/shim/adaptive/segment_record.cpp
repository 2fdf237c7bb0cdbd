// Recording a call into its core's segment: the words it adds to the segment's key (its plan and
// where each tensor comes from), and its entry in the description Python compiles.
#include <algorithm>

#include "parts.h"
#include "../device.h"

namespace torch_neuronx::adaptive {

namespace {

bool is_device_tensor(const at::Tensor& t) { return t.defined() && t.device().type() == kNeuron; }

// The words of a tensor reference and its entry in the description.
int add_ref(Segment& s, const at::Tensor& t) {
  auto& d = s.desc;
  const int ref = static_cast<int>(d.ref_at.size());
  d.ref_at.push_back(static_cast<int64_t>(d.refs.size()));
  if (!is_device_tensor(t)) {  // a CPU scalar (0-dim): its value is a scalar of the segment
    d.refs.push_back(-1 - static_cast<int64_t>(s.values.size()));
    s.values.push_back(t.item());
    d.refs.push_back(static_cast<int64_t>(t.scalar_type()));
    d.refs.push_back(t.unsafeGetTensorImpl()->is_wrapped_number());
    return ref;
  }
  const c10::Storage& storage = t.unsafeGetTensorImpl()->unsafe_storage();
  auto [it, fresh] = s.storage_index.emplace(storage.unsafeGetStorageImpl(), static_cast<int>(s.storages.size()));
  if (fresh) {
    s.storages.push_back({storage.getWeakStorageImpl(), -1, storage.data()});
    d.producers.push_back(-1);
  }
  d.refs.push_back(it->second);
  d.refs.push_back(static_cast<int64_t>(t.scalar_type()));
  d.refs.push_back(t.dim());
  d.refs.insert(d.refs.end(), t.sizes().begin(), t.sizes().end());
  d.refs.insert(d.refs.end(), t.strides().begin(), t.strides().end());
  d.refs.push_back(t.storage_offset());
  return ref;
}

// The input of the segment whose memory a fresh result got from the allocator once the program
// had freed the input (its reads all came before), or -1. The compiled kernel writes such a
// result into that input; a partial overlap is refused at launch (memory_hazard).
int reused_input(const Segment& s, const at::Tensor& result) {
  const void* data = result.unsafeGetTensorImpl()->unsafe_storage().data();
  for (size_t i = 0; i < s.storages.size(); ++i)
    if (s.storages[i].producer < 0 && s.storages[i].data == data && s.storages[i].storage.use_count() == 0)
      return static_cast<int>(i);
  return -1;
}

int add_result(Segment& s, const at::Tensor& t, int call, int64_t reuse) {
  const int index = static_cast<int>(s.storages.size());
  const c10::Storage& storage = t.unsafeGetTensorImpl()->unsafe_storage();
  s.storage_index[storage.unsafeGetStorageImpl()] = index;
  s.storages.push_back({storage.getWeakStorageImpl(), call});
  auto& d = s.desc;
  d.producers.push_back(call);
  d.results.push_back(index);
  d.reuses.push_back(static_cast<int>(reuse));
  d.layouts.push_back(static_cast<int64_t>(t.scalar_type()));
  d.layouts.push_back(t.dim());
  d.layouts.insert(d.layouts.end(), t.sizes().begin(), t.sizes().end());
  d.layouts.insert(d.layouts.end(), t.strides().begin(), t.strides().end());
  return index;
}

// Calls every tensor argument of `call` with it, in the order the segment numbers them.
template <typename F>
void for_each_tensor(const Call& call, const std::vector<c10::IValue>& args, F&& f) {
  const auto& r = *call.roles;
  for (size_t i = 0; i < r.size(); ++i) {
    const c10::IValue& v = args[i];
    if (r[i] == Role::Tensor) {
      if (v.isTensor() && v.toTensor().defined()) f(v.toTensor());
    } else if (r[i] == Role::TensorList) {
      for (const at::Tensor& t : v.toTensorList()) f(t);
    } else if (r[i] == Role::OptTensorList) {
      for (const std::optional<at::Tensor>& t : v.toOptionalTensorList())
        if (t.has_value() && t->defined()) f(*t);
    }
  }
}

}  // namespace

CallWords call_words(const Segment& s, const Call& call) {
  CallWords cw{{static_cast<int64_t>(call.plan)}};
  auto& words = cw.words;
  c10::SmallVector<const c10::StorageImpl*, 8> unseen;  // numbered after the seen ones, as record() will
  for_each_tensor(call, call.args, [&](const at::Tensor& t) {
    if (!is_device_tensor(t)) return words.push_back(-2);
    const c10::StorageImpl* impl = t.unsafeGetTensorImpl()->unsafe_storage().unsafeGetStorageImpl();
    int64_t index;
    if (auto it = s.storage_index.find(impl); it != s.storage_index.end()) {
      index = it->second;
    } else {
      auto u = std::find(unseen.begin(), unseen.end(), impl);
      index = static_cast<int64_t>(s.storages.size() + (u - unseen.begin()));
      if (u == unseen.end()) unseen.push_back(impl);
    }
    words.push_back(index);
    words.push_back(t.storage_offset());
  });
  cw.reuses_at = words.size();
  for (const c10::IValue& out : call.outputs) {  // results in the memory of freed inputs
    if (out.isTensor() && out.toTensor().defined()) words.push_back(reused_input(s, out.toTensor()));
    else if (out.isTensorList())
      for (const at::Tensor& t : out.toTensorList()) words.push_back(t.defined() ? reused_input(s, t) : -1);
  }
  return cw;
}

uint64_t hash_after(const Segment& s, c10::ArrayRef<int64_t> words) {
  uint64_t h = s.hash;
  for (int64_t w : words) h = mix(h, w);
  return h;
}

void record(Segment& s, const Call& call, const CallWords& cw, int held) {
  const int index = static_cast<int>(s.calls());
  s.key.insert(s.key.end(), cw.words.begin(), cw.words.end());
  auto& d = s.desc;
  d.ops.push_back(call.op);
  d.roles.push_back(call.roles);
  auto& args = d.args;
  auto keep_ref = [&](int64_t record) {
    if (held >= 0) s.ref_records.emplace_back(held, record);
  };
  const auto& r = *call.roles;
  for (size_t i = 0; i < r.size(); ++i) {
    const c10::IValue& v = call.args[i];
    const c10::IValue& k = call.kernel_args[i];  // tensors as indices of the call's records
    switch (r[i]) {
      case Role::Tensor:
        if (v.isTensor() && v.toTensor().defined()) {
          args.emplace_back(add_ref(s, v.toTensor()));
          keep_ref(k.toInt());
        } else {
          args.emplace_back();
        }
        break;
      case Role::TensorList: {
        std::vector<int64_t> refs;
        for (const at::Tensor& t : v.toTensorList()) refs.push_back(add_ref(s, t));
        if (held >= 0)
          for (int64_t record : k.toIntVector()) keep_ref(record);
        args.emplace_back(refs);
        break;
      }
      case Role::OptTensorList: {
        c10::List<std::optional<int64_t>> refs;
        for (const std::optional<at::Tensor>& t : v.toOptionalTensorList())
          refs.push_back(t.has_value() && t->defined() ? std::optional<int64_t>(add_ref(s, *t)) : std::nullopt);
        if (held >= 0)
          for (int64_t record : k.toIntVector())
            if (record >= 0) keep_ref(record);
        args.emplace_back(refs);
        break;
      }
      case Role::Scalar:
        if (v.isList()) {
          std::vector<int64_t> numbers;
          for (const c10::IValue& x : v.toListRef()) {
            numbers.push_back(static_cast<int64_t>(s.values.size()));
            s.values.push_back(x);
          }
          args.emplace_back(numbers);
        } else if (v.isNone()) {
          args.emplace_back();
        } else {
          args.emplace_back(static_cast<int64_t>(s.values.size()));
          s.values.push_back(v);
        }
        break;
      case Role::Value: args.push_back(v); break;
    }
  }
  auto& returns = d.returns;
  const int64_t* reuse = cw.words.data() + cw.reuses_at;
  for (size_t j = 0; j < call.outputs.size(); ++j) {  // undefined results (unrequested gradients) are None
    const c10::IValue& out = call.outputs[j];
    const c10::IValue& k = call.kernel_outputs[j];
    if (out.isTensor() && out.toTensor().defined()) {
      returns.emplace_back(static_cast<int64_t>(add_result(s, out.toTensor(), index, *reuse++)));
      if (held >= 0) s.result_records.emplace_back(held, k.toInt());
    } else if (out.isTensorList()) {
      std::vector<int64_t> numbers;
      const auto list = out.toTensorList();
      for (size_t i = 0; i < list.size(); ++i) {
        const int64_t reused = *reuse++;
        if (!list.get(i).defined()) {
          numbers.push_back(-1);
          continue;
        }
        numbers.push_back(add_result(s, list.get(i), index, reused));
        if (held >= 0) s.result_records.emplace_back(held, k.toIntList().get(i));
      }
      returns.emplace_back(numbers);
    } else {
      returns.emplace_back();
    }
  }
  d.returns_end.push_back(returns.size());
  s.hash = hash_after(s, cw.words);
  s.chain.push_back(s.hash);
}

Liveness liveness(const Segment& s) {
  Liveness l;
  for (int index : s.desc.results) l.live.push_back(s.storages[index].storage.use_count() > 0);
  l.id = mix(s.hash, static_cast<int64_t>(l.live.size()));
  for (bool b : l.live) l.id = mix(l.id, b);
  return l;
}

}  // namespace torch_neuronx::adaptive
