// describe(): a call's tensors and arguments as the JSON that the cost model reads (profiler.h).
#include "profiler.h"

#include <cmath>

namespace torch_neuronx::profiler {

namespace {
void describe_value(const c10::IValue& v, std::string& out);

void describe_tensor(const at::Tensor& t, std::string& out) {
  if (!t.defined()) {
    out += "null";
    return;
  }
  out += "{\"shape\": [";
  for (size_t i = 0; i < t.sizes().size(); ++i) (out += i ? ", " : "") += std::to_string(t.sizes()[i]);
  ((out += "], \"dtype\": \"") += c10::toString(t.scalar_type())) += "\", \"bytes\": ";
  out += std::to_string(t.numel() * t.itemsize());
  // The storage's address: the Explorer links a kernel to the one that last wrote what it reads.
  if (t.has_storage())
    out += ", \"storage\": " + std::to_string(reinterpret_cast<uintptr_t>(t.storage().data_ptr().get()));
  out += "}";
}

void describe_list(c10::ArrayRef<c10::IValue> values, std::string& out) {
  out += "[";
  for (size_t i = 0; i < values.size(); ++i) {
    if (i) out += ", ";
    describe_value(values[i], out);
  }
  out += "]";
}

void describe_value(const c10::IValue& v, std::string& out) {
  if (v.isTensor()) describe_tensor(v.toTensor(), out);
  else if (v.isTensorList() || v.isOptionalTensorList() || v.isIntList() || v.isDoubleList() || v.isBoolList())
    describe_list(v.toListRef(), out);
  else if (v.isBool()) out += v.toBool() ? "true" : "false";
  else if (v.isInt()) out += std::to_string(v.toInt());
  else if (v.isDouble() && std::isfinite(v.toDouble())) out += std::to_string(v.toDouble());
  else out += "null";
}
}  // namespace

// Built by appending to one string: it runs for every native call while a profiler records.
std::string describe(c10::ArrayRef<c10::IValue> inputs, c10::ArrayRef<c10::IValue> outputs) {
  std::string out = "{\"inputs\": ";
  out.reserve(256);
  describe_list(inputs, out);
  out += ", \"outputs\": ";
  describe_list(outputs, out);
  out += "}";
  return out;
}

}  // namespace torch_neuronx::profiler
