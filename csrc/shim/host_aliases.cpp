#include "host_aliases.h"

#include <c10/core/CPUAllocator.h>

#include "allocator.h"
#include "device.h"

namespace torch_neuronx {

namespace {
at::Tensor make_tensor(c10::Storage storage, c10::DispatchKey key, caffe2::TypeMeta dtype, c10::IntArrayRef sizes,
                       c10::IntArrayRef strides, int64_t offset, bool conj, bool neg) {
  auto impl = c10::make_intrusive<c10::TensorImpl>(std::move(storage), c10::DispatchKeySet(key), dtype);
  impl->set_sizes_and_strides(sizes, strides, offset);
  // A lazy conjugate (x.conj()) or negation is a bit of the tensor, not of its bytes.
  impl->_set_conj(conj);
  impl->_set_neg(neg);
  return at::Tensor(std::move(impl));
}
}  // namespace

at::Tensor tensor_on(c10::Storage storage, c10::DispatchKey key, const at::Tensor& like) {
  return make_tensor(std::move(storage), key, like.dtype(), like.sizes(), like.strides(), like.storage_offset(),
                     like.is_conj(), like.is_neg());
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

int64_t TensorRecords::take(const at::Tensor& t) {
  Record r{t.unsafeGetTensorImpl(), nullptr, nullptr, 0, 0, t.dtype(), false, false, 0, 0, {}, {}};
  if (!t.defined() || t.device().type() != kNeuron) {
    r.as_is = t;
  } else {
    const c10::Storage& storage = t.storage();
    r.storage = storage.unsafeGetStorageImpl();
    r.data = const_cast<void*>(storage.data());
    r.nbytes = storage.nbytes();
    r.offset = t.storage_offset();
    r.conj = t.is_conj();
    r.neg = t.is_neg();
    r.dim = static_cast<uint32_t>(t.dim());
    r.at = static_cast<uint32_t>(dims_.size());
    dims_.append(t.sizes().begin(), t.sizes().end());
    dims_.append(t.strides().begin(), t.strides().end());
    if (!note_kernel_use(storage)) r.kept = storage;
  }
  records_.push_back(std::move(r));
  return static_cast<int64_t>(records_.size()) - 1;
}

c10::IValue TensorRecords::operator()(const c10::IValue& v) {
  if (v.isTensor()) return v.toTensor().defined() ? c10::IValue(take(v.toTensor())) : v;
  if (v.isTensorList()) {
    std::vector<int64_t> indices;
    for (const at::Tensor& t : v.toTensorList()) indices.push_back(take(t));
    return indices;
  }
  if (v.isOptionalTensorList()) {
    std::vector<int64_t> indices;
    for (const std::optional<at::Tensor>& t : v.toOptionalTensorList())
      indices.push_back(t.has_value() && t->defined() ? take(*t) : -1);
    return indices;
  }
  return v;
}

at::Tensor HostAliases::operator()(const c10::IValue& v) {
  return v.isInt() ? recorded(v.toInt()) : (*this)(v.toTensor());
}

at::Tensor HostAliases::recorded(int64_t index) {
  const TensorRecords::Record& r = records_->records_[index];
  if (!r.storage) return r.as_is;  // undefined, or of another device
  for (const auto& [impl, alias] : tensors_)
    if (impl == r.tensor) return alias;
  const c10::IntArrayRef sizes(records_->dims_.data() + r.at, r.dim), strides(sizes.end(), r.dim);
  tensors_.emplace_back(r.tensor, make_tensor(host_storage(r.storage, r.data, r.nbytes), c10::DispatchKey::CPU, r.dtype,
                                              sizes, strides, r.offset, r.conj, r.neg));
  return tensors_.back().second;
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
  const c10::Storage& s = t.storage();
  return tensor_on(host_storage(s.unsafeGetStorageImpl(), const_cast<void*>(s.data()), s.nbytes()),
                   c10::DispatchKey::CPU, t);
}

c10::Storage& HostAliases::host_storage(const c10::StorageImpl* key, void* data, size_t nbytes) {
  for (auto& [impl, s] : storages_)
    if (impl == key) return s;
  storages_.emplace_back(key, c10::Storage(c10::Storage::use_byte_size_t(), nbytes,
                                           c10::DataPtr(data, c10::Device(at::kCPU)),
                                           resizable_ ? c10::GetCPUAllocator() : nullptr, resizable_));
  return storages_.back().second;
}

at::Tensor host_alias(const at::Tensor& t) { return HostAliases()(t); }

}  // namespace torch_neuronx
