// Device tensors as kernels see them: snapshots that keep a launch's view of its tensors, and
// host aliases (CPU tensors on the same memory) that the CPU kernels compute on.
#pragma once

#include <ATen/ATen.h>
#include <c10/util/SmallVector.h>

#include <utility>

namespace torch_neuronx {

// A tensor of dispatch key `key` on `storage`, with `like`'s dtype, sizes, strides and offset.
at::Tensor tensor_on(c10::Storage storage, c10::DispatchKey key, const at::Tensor& like);

// A tensor on `t`'s memory with its current sizes, strides and offset, so a queued kernel sees
// the tensor as it was at launch even if the caller then changes its metadata in place
// (squeeze_, t_, as_strided_, set_). It does not own the memory (kernel_storage): the caller's
// `del` frees it at once, in stream order. Lists and other values pass through.
at::Tensor snapshot(const at::Tensor& t);

// snapshot() of every argument of one launch: an argument passed twice (add(x, y, out=x)) stays
// one tensor for the kernel, so PyTorch's identity checks see what the caller passed, and views
// of one storage share one, so its overlap checks see their aliasing.
class Snapshots {
 public:
  at::Tensor operator()(const at::Tensor& t);
  c10::IValue operator()(const c10::IValue& v);

 private:
  // Inline room for a launch's usual few tensors: one per launch, so no heap growth on the way.
  c10::SmallVector<std::pair<const c10::TensorImpl*, at::Tensor>, 6> seen_;
  c10::SmallVector<std::pair<const c10::StorageImpl*, c10::Storage>, 6> storages_;
};

// The device tensors of one launch as a queued kernel sees them, recorded rather than
// snapshotted: each one's memory and metadata at launch, with no reference to the tensor nor
// (for pool memory, like kernel_storage) to its storage — what a hardware kernel's arguments
// carry. Nothing is allocated per tensor at launch nor freed when the kernel retires; the
// kernel's HostAliases make its host tensors from the records. In the kernel's arguments a
// recorded tensor is its record's index (an int where the tensor was, an int list for a list,
// -1 for an absent optional).
class TensorRecords {
 public:
  c10::IValue operator()(const c10::IValue& v);
  // Whether record `i` is a tensor (not an undefined one), and the memory it lies in ([begin,
  // end) of its storage; empty for a tensor of another device).
  bool defined(int64_t i) const { return records_[i].storage || records_[i].as_is.defined(); }
  std::pair<uintptr_t, uintptr_t> memory(int64_t i) const {
    const auto begin = reinterpret_cast<uintptr_t>(records_[i].data);
    return {begin, begin + records_[i].nbytes};
  }

 private:
  friend class HostAliases;
  struct Record {
    const c10::TensorImpl* tensor;    // identity only (never dereferenced by the kernel)
    const c10::StorageImpl* storage;  // identity only
    void* data;
    size_t nbytes;
    int64_t offset;
    caffe2::TypeMeta dtype;
    bool conj, neg;
    uint32_t dim, at;  // sizes at dims_[at], strides after them
    c10::Storage kept;    // memory of no pool, which the kernel keeps alive (as kernel_storage)
    at::Tensor as_is;     // undefined, or of another device (a CPU scalar): passed as it is
  };
  int64_t take(const at::Tensor& t);
  c10::SmallVector<Record, 4> records_;
  c10::SmallVector<int64_t, 24> dims_;
};

// A CPU tensor viewing the same bytes as a device tensor. Only kernels (code running on
// the hardware queue, or on the host after a synchronization) may use it.
at::Tensor host_alias(const at::Tensor& device_tensor);

// Memoizes aliases per storage within one kernel, so aliasing between arguments (views of
// one buffer) stays visible to the CPU kernels' overlap checks, and per tensor, so an argument
// passed twice is one host tensor (PyTorch tells "the same tensor" from "overlapping views").
class HostAliases {
 public:
  // `resizable`: a kernel may grow an alias's storage, which then moves to host memory (the
  // caller copies it back to the device; see NativeKernel::build).
  explicit HostAliases(bool resizable = false, const TensorRecords* records = nullptr)
      : resizable_(resizable), records_(records) {}
  at::Tensor operator()(const at::Tensor& device_tensor);
  // A tensor argument: a tensor, or the index of a record of the kernel's TensorRecords.
  at::Tensor operator()(const c10::IValue& tensor_or_record);

 private:
  bool resizable_;
  const TensorRecords* records_;
  at::Tensor alias_of(const at::Tensor& device_tensor);
  at::Tensor recorded(int64_t index);
  c10::Storage& host_storage(const c10::StorageImpl* key, void* data, size_t nbytes);
  c10::SmallVector<std::pair<const c10::StorageImpl*, c10::Storage>, 6> storages_;  // as Snapshots
  c10::SmallVector<std::pair<const c10::TensorImpl*, at::Tensor>, 6> tensors_;
};

}  // namespace torch_neuronx
