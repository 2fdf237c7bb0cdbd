#include "scaled_matmul.h"

#include <algorithm>
#include <cctype>

namespace torch_neuronx {

namespace {

std::string generation_;
std::vector<at::ScalarType> float8_;

std::string python_name(at::ScalarType dtype) {  // Float8_e4m3fn -> float8_e4m3fn
  std::string name = c10::toString(dtype);
  name[0] = static_cast<char>(std::tolower(name[0]));
  return name;
}

std::string accepted() {
  std::string names;
  for (at::ScalarType d : float8_) names += (names.empty() ? "" : ", ") + python_name(d);
  return names.empty() ? "none" : names;
}

void check(const char* op, const at::Tensor& t) {
  const at::ScalarType dtype = t.scalar_type();
  if (!c10::isFloat8Type(dtype) || std::find(float8_.begin(), float8_.end(), dtype) != float8_.end()) return;
  // A TypeError, as MPS's for float64: not NotImplementedError, which the first launch would
  // retry on the host, as it does for kernels a core lacks.
  TORCH_CHECK_TYPE(false, op, " on neuron: ", python_name(dtype), " operands do not run on the TensorE of ",
                   generation_, " (it multiplies ", accepted(), "; the Neuron compiler refuses ", python_name(dtype),
                   " there, ", dtype == at::kFloat8_e4m3fn ? "NCC_EVRF051" : "unsupported data type",
                   "). Quantize to one of those formats (TorchAO: a config's float8 dtype), or simulate a generation "
                   "that multiplies ",
                   python_name(dtype), " (TORCH_NEURONX_SIM_CONF=generation:trn3).");
}

}  // namespace

void set_tensor_engine_float8(std::string generation, std::vector<at::ScalarType> dtypes) {
  generation_ = std::move(generation);
  float8_ = std::move(dtypes);
}

void check_scaled_matmul(const char* op, const at::Tensor& a, const at::Tensor& b, bool scale_result) {
  check(op, a);
  check(op, b);
  TORCH_CHECK(!scale_result, op, " on neuron: scale_result is not supported; compute in a wider ",
              "out_dtype and scale the result yourself");
}

}  // namespace torch_neuronx
