// The out= trial of a first launch: whether the operator's out= overload, writing preallocated
// outputs, reproduces the functional results (planned launches then skip the copy into fresh
// outputs).
#include <c10/core/CPUAllocator.h>

#include "parts.h"

namespace torch_neuronx::native {

namespace {

at::Tensor fixed_size_like(const at::Tensor& t) {
  const size_t nbytes = at::detail::computeStorageNbytes(t.sizes(), t.strides(), t.itemsize());
  c10::Storage storage(c10::Storage::use_byte_size_t(), nbytes, c10::GetCPUAllocator(), false);
  return at::empty({0}, t.options()).set_(storage, 0, t.sizes(), t.strides());
}

}  // namespace

bool NativeKernel::out_overload_matches(const std::vector<c10::IValue>& args, const torch::jit::Stack& results,
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

}  // namespace torch_neuronx::native
