// A call's signature: how each argument of an operator takes part in it, and the scan of a call
// that checks devices and dtypes and writes the key of its operator's plan cache.
#include <c10/util/bit_cast.h>

#include "parts.h"
#include "../device.h"
#include "../fallback.h"

namespace torch_neuronx::native {

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

namespace {

int64_t number_kind(const c10::IValue& v) {
  if (v.isDouble()) return 1;
  if (v.isInt()) return 2;
  if (v.isBool()) return 3;
  if (v.isComplexDouble()) return 4;
  return v.isNone() ? 5 : 6;
}

}  // namespace

void NativeKernel::move_cpu_indices(torch::jit::Stack::iterator first) const {
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

Placement NativeKernel::scan(torch::jit::Stack::iterator first, Words& key, bool& cacheable) const {
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

}  // namespace torch_neuronx::native
