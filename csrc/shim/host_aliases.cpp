#include "host_aliases.h"

#include <c10/core/CPUAllocator.h>

#include "allocator.h"
#include "device.h"

namespace torch_neuronx {

at::Tensor tensor_on(c10::Storage storage, c10::DispatchKey key, const at::Tensor& like) {
  auto impl = c10::make_intrusive<c10::TensorImpl>(std::move(storage), c10::DispatchKeySet(key), like.dtype());
  impl->set_sizes_and_strides(like.sizes(), like.strides(), like.storage_offset());
  // A lazy conjugate (x.conj()) or negation is a bit of the tensor, not of its bytes.
  impl->_set_conj(like.is_conj());
  impl->_set_neg(like.is_neg());
  return at::Tensor(std::move(impl));
}

at::Tensor snapshot(const at::Tensor& t) { return Snapshots()(t); }

at::Tensor Snapshots::operator()(const at::Tensor& t) {
  if (!t.defined() || t.device().type() != kNeuron) return t;
  for (const auto& [impl, taken] : seen_)
    if (impl == t.unsafeGetTensorImpl()) return taken;
  const c10::StorageImpl* key = t.storage().unsafeGetStorageImpl();
  const c10::Storage* storage = nullptr;
  for (const auto& [impl, s] : storages_)
    if (impl == key) storage = &s;
  if (!storage) {
    storages_.emplace_back(key, kernel_storage(t.storage()));
    storage = &storages_.back().second;
  }
  seen_.emplace_back(t.unsafeGetTensorImpl(), tensor_on(*storage, c10::DispatchKey::PrivateUse1, t));
  return seen_.back().second;
}

c10::IValue Snapshots::operator()(const c10::IValue& v) {
  if (v.isTensor()) return (*this)(v.toTensor());
  if (v.isTensorList()) {
    std::vector<at::Tensor> list;
    for (const at::Tensor& t : v.toTensorList()) list.push_back((*this)(t));
    return list;
  }
  if (v.isOptionalTensorList()) {
    c10::List<std::optional<at::Tensor>> list;
    for (const std::optional<at::Tensor>& t : v.toOptionalTensorList())
      list.push_back(t.has_value() ? std::optional<at::Tensor>((*this)(*t)) : std::nullopt);
    return list;
  }
  return v;
}

at::Tensor HostAliases::operator()(const at::Tensor& t) {
  if (!t.defined() || t.device().type() != kNeuron) return t;
  for (const auto& [impl, alias] : tensors_)
    if (impl == t.unsafeGetTensorImpl()) return alias;
  tensors_.emplace_back(t.unsafeGetTensorImpl(), alias_of(t));
  return tensors_.back().second;
}

// Empty tensors are aliases too (their storage and offset are what a kernel resizes from).
at::Tensor HostAliases::alias_of(const at::Tensor& t) {
  const c10::StorageImpl* key = t.storage().unsafeGetStorageImpl();
  c10::Storage* storage = nullptr;
  for (auto& [impl, s] : storages_)
    if (impl == key) storage = &s;
  if (!storage) {
    void* data = const_cast<void*>(t.storage().data());
    storages_.emplace_back(key, c10::Storage(c10::Storage::use_byte_size_t(), t.storage().nbytes(),
                                             c10::DataPtr(data, c10::Device(at::kCPU)),
                                             resizable_ ? c10::GetCPUAllocator() : nullptr, resizable_));
    storage = &storages_.back().second;
  }
  return tensor_on(*storage, c10::DispatchKey::CPU, t);
}

at::Tensor host_alias(const at::Tensor& t) { return HostAliases()(t); }

}  // namespace torch_neuronx
