#include "scaled_matmul.h"

#include <torch/library.h>

#include <algorithm>
#include <cctype>

namespace torch_neuronx {

namespace {

std::string generation_;
std::vector<at::ScalarType> float8_;
bool mx_ = false;

constexpr int64_t kMxBlock = 32;
// c10's ScalingType / SwizzleType values (_scaled_mm_v2's recipe and swizzle arguments).
constexpr int64_t kTensorWise = 0, kRowWise = 1, kBlockWise1x32 = 3, kSwizzle_32_4_4 = 1;

std::string python_name(at::ScalarType dtype) {  // as torch names it: BFloat16 -> bfloat16, Float -> float32
  if (dtype == at::kFloat) return "float32";
  if (dtype == at::kHalf) return "float16";
  if (dtype == at::kDouble) return "float64";
  std::string name = c10::toString(dtype);
  std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
  return name;
}

std::string accepted() {
  std::string names;
  for (at::ScalarType d : float8_) names += (names.empty() ? "" : ", ") + python_name(d);
  return names.empty() ? "none" : names;
}

void check_operand(const char* op, const at::Tensor& t) {
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

void check_scaled_matmul(const char* op, const at::Tensor& a, const at::Tensor& b, bool block, bool scale_result) {
  TORCH_CHECK_TYPE(!block || mx_, op, " on neuron: MX (block-scaled) matmuls run on NeuronCore-v4's TensorE, not on ",
                   generation_,
                   "'s. Simulate trn3 (TORCH_NEURONX_SIM_CONF=generation:trn3), or use the emulated kernel choice "
                   "(TorchAO: kernel_preference=KernelPreference.EMULATED) or float8 with tensorwise/rowwise scales.");
  check_operand(op, a);
  check_operand(op, b);
  TORCH_CHECK(!scale_result, op, " on neuron: scale_result is not supported; compute in a wider ",
              "out_dtype and scale the result yourself");
}

bool is_e8m0(const at::Tensor& scale) { return scale.scalar_type() == at::kFloat8_e8m0fnu; }

bool block_scaled(at::IntArrayRef recipe_a, at::IntArrayRef recipe_b) {
  return std::find(recipe_a.begin(), recipe_a.end(), kBlockWise1x32) != recipe_a.end() ||
         std::find(recipe_b.begin(), recipe_b.end(), kBlockWise1x32) != recipe_b.end();
}


std::vector<int64_t> recipe(const at::Tensor& scale) { return {scale.numel() == 1 ? kTensorWise : kRowWise}; }

at::Tensor rowwise(const at::Tensor& a, const at::Tensor& b, const at::Tensor& scale_a, const at::Tensor& scale_b,
                   const std::optional<at::Tensor>& bias, at::ScalarType out_dtype, bool fast_accum) {
  return at::_scaled_mm_v2(a, b, {scale_a}, recipe(scale_a), {}, {scale_b}, recipe(scale_b), {}, bias, out_dtype, {},
                           fast_accum);
}

// ------------------------------------------------------------------------------------------ MX
// The E8M0 scales of `rows` x `blocks` as a row-major [rows, blocks] tensor. Swizzled: cuBLAS's
// 32_4_4 layout (TorchAO's to_blocked): [rows, blocks] padded to 128 x 4 tiles, each tile laid
// out as 32 x 4 x 4 (row r = 32 i + j of a tile at [j][i][column]).
at::Tensor block_scales(const char* op, const char* name, const at::Tensor& scale, int64_t rows, int64_t blocks,
                        bool swizzled) {
  const int64_t row_tiles = (rows + 127) / 128, column_tiles = (blocks + 3) / 4;
  const int64_t expected = swizzled ? row_tiles * column_tiles * 512 : rows * blocks;
  TORCH_CHECK(scale.numel() == expected, op, " on neuron: ", name, " has ", scale.numel(),
              " E8M0 scales; MX blocks of ", kMxBlock, " over ", rows, " x ", blocks * kMxBlock, " values take ",
              expected, swizzled ? " (swizzled: padded to 128 x 4 tiles)" : "");
  const at::Tensor flat = scale.contiguous().view(-1);
  if (!swizzled) return flat.view({rows, blocks});
  return flat.view({row_tiles * column_tiles, 32, 4, 4})
      .transpose(1, 2)
      .reshape({row_tiles, column_tiles, 128, 4})
      .permute({0, 2, 1, 3})
      .reshape({row_tiles * 128, column_tiles * 4})
      .narrow(0, 0, rows)
      .narrow(1, 0, blocks);
}

// Element values in fp32 of `rows` x K: float8 converts; float4_e2m1fn_x2 packs two values a
// byte, the first in the low nibble (TorchAO's pack_uint4).
at::Tensor element_values(const at::Tensor& data) {
  if (data.scalar_type() != at::kFloat4_e2m1fn_x2) return data.to(at::kFloat);
  static const float e2m1[16] = {0.f,  .5f,  1.f,  1.5f,  2.f,  3.f,  4.f,  6.f,
                                 -0.f, -.5f, -1.f, -1.5f, -2.f, -3.f, -4.f, -6.f};
  const at::Tensor bytes = data.contiguous().view(at::kByte);
  const at::Tensor codes = at::stack({bytes.bitwise_and(15), bytes.bitwise_right_shift(4)}, -1).flatten(-2);
  return at::from_blob(const_cast<float*>(e2m1), {16}, at::kFloat)
      .index_select(0, codes.flatten().to(at::kLong))
      .view(codes.sizes());
}

// [rows, K] row-major data (K packed for fp4) times its [rows, K / 32] scales, in fp32.
at::Tensor dequantize_mx(const char* op, const char* name, const at::Tensor& data, const at::Tensor& scale,
                         bool swizzled) {
  TORCH_CHECK_TYPE(data.scalar_type() == at::kFloat8_e4m3fn || data.scalar_type() == at::kFloat8_e5m2 ||
                       data.scalar_type() == at::kFloat4_e2m1fn_x2,
                   op,
                   " on neuron: MX operands are float8_e4m3fn, float8_e5m2 (MXFP8) or float4_e2m1fn_x2 (MXFP4), got ",
                   python_name(data.scalar_type()));
  const at::Tensor values = element_values(data);
  const int64_t rows = values.size(0), k = values.size(1);
  TORCH_CHECK(k % kMxBlock == 0, op, " on neuron: MX blocks are ", kMxBlock, " values along K; K = ", k,
              " is not a multiple");
  const at::Tensor factors = block_scales(op, name, scale, rows, k / kMxBlock, swizzled)
                                 .view(at::kFloat8_e8m0fnu)
                                 .to(at::kFloat);  // 2^(e - 127); 0xFF is NaN
  return values.view({rows, k / kMxBlock, kMxBlock}).mul(factors.unsqueeze(-1)).view({rows, k});
}

at::Tensor mx(const char* op, const at::Tensor& a, const at::Tensor& b, const at::Tensor& scale_a,
              const at::Tensor& scale_b, bool swizzled, const std::optional<at::Tensor>& bias,
              at::ScalarType out_dtype) {
  TORCH_CHECK(a.dim() == 2 && b.dim() == 2, op, " on neuron: MX operands must be matrices");
  const at::Tensor da = dequantize_mx(op, "scale_a", a, scale_a, swizzled);
  const at::Tensor db = dequantize_mx(op, "scale_b", b.t(), scale_b, swizzled);  // b is [K, N] column-major
  TORCH_CHECK(da.size(1) == db.size(1), op, " on neuron: mat_a has K = ", da.size(1), ", mat_b K = ", db.size(1));
  at::Tensor out = at::mm(da, db.t());
  if (bias.has_value() && bias->defined()) out.add_(bias->to(at::kFloat));
  return out.to(out_dtype);
}

// ------------------------------------------------------------------------------------- kernels
at::Tensor scaled_mm(const at::Tensor& a, const at::Tensor& b, const at::Tensor& scale_a, const at::Tensor& scale_b,
                     const std::optional<at::Tensor>& bias, const std::optional<at::Tensor>& scale_result,
                     std::optional<at::ScalarType> out_dtype, bool fast_accum) {
  const char* op = "torch._scaled_mm";
  const bool block = is_e8m0(scale_a) || is_e8m0(scale_b);  // MX with swizzled scales, as on CUDA
  check_scaled_matmul(op, a, b, block, scale_result.has_value() && scale_result->defined());
  const at::ScalarType out = out_dtype.value_or(a.scalar_type());
  if (block) return mx(op, a, b, scale_a, scale_b, /*swizzled=*/true, bias, out);
  return rowwise(a, b, scale_a, scale_b, bias, out, fast_accum);
}

at::Tensor scaled_mm_v2(const at::Tensor& a, const at::Tensor& b, at::TensorList scale_a, at::IntArrayRef recipe_a,
                        at::IntArrayRef swizzle_a, at::TensorList scale_b, at::IntArrayRef recipe_b,
                        at::IntArrayRef swizzle_b, const std::optional<at::Tensor>& bias,
                        std::optional<at::ScalarType> out_dtype, at::IntArrayRef contraction_dim, bool fast_accum) {
  const char* op = "torch._scaled_mm_v2";
  const bool block = block_scaled(recipe_a, recipe_b);
  check_scaled_matmul(op, a, b, block, false);
  if (!block) {
    return at::_scaled_mm_v2(a, b, scale_a, recipe_a, swizzle_a, scale_b, recipe_b, swizzle_b, bias, out_dtype,
                             contraction_dim, fast_accum);
  }
  TORCH_CHECK(recipe_a.size() == 1 && recipe_b.size() == 1 && recipe_a[0] == kBlockWise1x32 &&
                  recipe_b[0] == kBlockWise1x32 && scale_a.size() == 1 && scale_b.size() == 1,
              op, " on neuron: MX takes one BlockWise1x32 scale per operand (TensorE's blocks of ", kMxBlock,
              " with E8M0 scales)");
  const auto swizzled = [](at::IntArrayRef s) { return !s.empty() && s[0] == kSwizzle_32_4_4; };
  TORCH_CHECK(swizzled(swizzle_a) == swizzled(swizzle_b), op, " on neuron: both scales swizzled, or neither");
  return mx(op, a, b, scale_a[0], scale_b[0], swizzled(swizzle_a), bias, out_dtype.value_or(at::kBFloat16));
}

// Group by group, each as _scaled_mm_v2's rowwise kernel. offs holds each group's end along the
// dimension a 2D operand is grouped on: M (2D x 3D), K (2D x 2D, a [G, M, N] result) or N (3D x 2D).
at::Tensor scaled_grouped_mm(const at::Tensor& a, const at::Tensor& b, const at::Tensor& scale_a,
                             const at::Tensor& scale_b, const std::optional<at::Tensor>& offs,
                             const std::optional<at::Tensor>& bias, const std::optional<at::Tensor>& scale_result,
                             std::optional<at::ScalarType> out_dtype, bool fast_accum) {
  const char* op = "torch._scaled_grouped_mm";
  check_scaled_matmul(op, a, b, false, scale_result.has_value() && scale_result->defined());
  TORCH_CHECK(!bias.has_value() || !bias->defined(), op, " on neuron: bias is not supported (as on CUDA)");
  TORCH_CHECK_TYPE(!is_e8m0(scale_a) && !is_e8m0(scale_b), op,
                   " on neuron: MX grouped matmuls are not supported; use float32 rowwise scales");
  const at::ScalarType out_type = out_dtype.value_or(at::kBFloat16);
  TORCH_CHECK(a.dim() >= 2 && a.dim() <= 3 && b.dim() >= 2 && b.dim() <= 3, op,
              " on neuron: operands must be 2D or 3D");
  const bool a2 = a.dim() == 2, b2 = b.dim() == 2;
  TORCH_CHECK((a2 || b2) == (offs.has_value() && offs->defined()), op,
              " on neuron: offs is needed exactly when an operand is 2D");
  std::vector<int64_t> ends;
  if (a2 || b2) {
    TORCH_CHECK(offs->dim() == 1 && offs->scalar_type() == at::kInt, op, " on neuron: offs must be a 1D int32 tensor");
    const at::Tensor o = offs->contiguous();
    ends.assign(o.data_ptr<int32_t>(), o.data_ptr<int32_t>() + o.numel());
  }
  const auto group = [&](int64_t g) {  // [start, end) of group g along the grouped dimension
    const int64_t start = g == 0 ? 0 : ends[g - 1];
    TORCH_CHECK(start <= ends[g], op, " on neuron: offs must be non-decreasing");
    return std::pair<int64_t, int64_t>{start, ends[g]};
  };
  const auto product = [&](const at::Tensor& x, const at::Tensor& y, const at::Tensor& sx, const at::Tensor& sy) {
    if (x.size(0) == 0 || y.size(1) == 0) return at::empty({x.size(0), y.size(1)}, x.options().dtype(out_type));
    if (x.size(1) == 0) return at::zeros({x.size(0), y.size(1)}, x.options().dtype(out_type));
    return rowwise(x, y, sx.reshape({-1, 1}), sy.reshape({1, -1}), std::nullopt, out_type, fast_accum);
  };
  if (!a2 && !b2) {  // [G, M, K] x [G, K, N]
    TORCH_CHECK(a.size(0) == b.size(0), op, " on neuron: ", a.size(0), " groups of mat_a, ", b.size(0), " of mat_b");
    std::vector<at::Tensor> outs;
    for (int64_t g = 0; g < a.size(0); ++g) outs.push_back(product(a[g], b[g], scale_a[g], scale_b[g]));
    return at::stack(outs);
  }
  if (a2 && !b2) {  // [M, K] rows grouped x [G, K, N] -> [M, N]
    TORCH_CHECK(static_cast<int64_t>(ends.size()) == b.size(0), op, " on neuron: offs has ", ends.size(),
                " groups, mat_b ", b.size(0));
    at::Tensor out = at::empty({a.size(0), b.size(2)}, a.options().dtype(out_type));
    for (int64_t g = 0; g < b.size(0); ++g) {
      const auto [s, e] = group(g);
      out.narrow(0, s, e - s).copy_(product(a.narrow(0, s, e - s), b[g], scale_a.narrow(0, s, e - s), scale_b[g]));
    }
    return out;
  }
  if (!a2 && b2) {  // [G, M, K] x [K, N] columns grouped -> [M, N]
    TORCH_CHECK(static_cast<int64_t>(ends.size()) == a.size(0), op, " on neuron: offs has ", ends.size(),
                " groups, mat_a ", a.size(0));
    at::Tensor out = at::empty({a.size(1), b.size(1)}, a.options().dtype(out_type));
    for (int64_t g = 0; g < a.size(0); ++g) {
      const auto [s, e] = group(g);
      out.narrow(1, s, e - s).copy_(product(a[g], b.narrow(1, s, e - s), scale_a[g], scale_b.narrow(0, s, e - s)));
    }
    return out;
  }
  // [M, K] x [K, N], K grouped -> [G, M, N]; each group has its own row and column scales.
  const int64_t groups = static_cast<int64_t>(ends.size()), m = a.size(0), n = b.size(1);
  std::vector<at::Tensor> outs;
  for (int64_t g = 0; g < groups; ++g) {
    const auto [s, e] = group(g);
    outs.push_back(product(a.narrow(1, s, e - s), b.narrow(0, s, e - s), scale_a.narrow(0, g * m, m),
                           scale_b.narrow(0, g * n, n)));
  }
  return at::stack(outs);
}

// ------------------------------------------------------------------------- shapes, for tracing
// The checks that do not read data, then the result's shape: a compile refuses what eager does.

at::Tensor scaled_mm_meta(const at::Tensor& a, const at::Tensor& b, const at::Tensor& scale_a,
                          const at::Tensor& scale_b, const std::optional<at::Tensor>&,
                          const std::optional<at::Tensor>& scale_result, std::optional<at::ScalarType> out_dtype,
                          bool) {
  check_scaled_matmul("torch._scaled_mm", a, b, is_e8m0(scale_a) || is_e8m0(scale_b),
                      scale_result.has_value() && scale_result->defined());
  return at::empty({a.size(0), b.size(1)}, a.options().dtype(out_dtype.value_or(a.scalar_type())));
}

at::Tensor scaled_mm_v2_meta(const at::Tensor& a, const at::Tensor& b, at::TensorList, at::IntArrayRef recipe_a,
                             at::IntArrayRef, at::TensorList, at::IntArrayRef recipe_b, at::IntArrayRef,
                             const std::optional<at::Tensor>&, std::optional<at::ScalarType> out_dtype, at::IntArrayRef,
                             bool) {
  const bool block = block_scaled(recipe_a, recipe_b);
  check_scaled_matmul("torch._scaled_mm_v2", a, b, block, false);
  return at::empty({a.size(0), b.size(1)},
                   a.options().dtype(out_dtype.value_or(block ? at::kBFloat16 : a.scalar_type())));
}

at::Tensor scaled_grouped_mm_meta(const at::Tensor& a, const at::Tensor& b, const at::Tensor&, const at::Tensor&,
                                  const std::optional<at::Tensor>& offs, const std::optional<at::Tensor>&,
                                  const std::optional<at::Tensor>& scale_result,
                                  std::optional<at::ScalarType> out_dtype, bool) {
  check_scaled_matmul("torch._scaled_grouped_mm", a, b, false, scale_result.has_value() && scale_result->defined());
  const auto options = a.options().dtype(out_dtype.value_or(at::kBFloat16));
  if (a.dim() == 2 && b.dim() == 2) return at::empty({offs->size(0), a.size(0), b.size(1)}, options);
  if (a.dim() == 3 && b.dim() == 3) return at::empty({a.size(0), a.size(1), b.size(2)}, options);
  return at::empty({a.size(-2), b.size(-1)}, options);
}

}  // namespace

void set_tensor_engine_formats(std::string generation, std::vector<at::ScalarType> float8, bool mx) {
  generation_ = std::move(generation);
  float8_ = std::move(float8);
  mx_ = mx;
}

TORCH_LIBRARY(torch_neuronx, m) {
  m.def(
      "scaled_mm(Tensor self, Tensor mat2, Tensor scale_a, Tensor scale_b, Tensor? bias=None, "
      "Tensor? scale_result=None, ScalarType? out_dtype=None, bool use_fast_accum=False) -> Tensor");
  m.def(
      "scaled_mm_v2(Tensor self, Tensor mat2, Tensor[] scale_a, int[] recipe_a, int[] swizzle_a, "
      "Tensor[] scale_b, int[] recipe_b, int[] swizzle_b, Tensor? bias, ScalarType? out_dtype, "
      "int[] contraction_dim=[], bool use_fast_accum=False) -> Tensor");
  m.def(
      "scaled_grouped_mm(Tensor self, Tensor mat2, Tensor scale_a, Tensor scale_b, Tensor? offs=None, "
      "Tensor? bias=None, Tensor? scale_result=None, ScalarType? out_dtype=None, bool use_fast_accum=False) -> Tensor");
}

TORCH_LIBRARY_IMPL(torch_neuronx, CPU, m) {
  m.impl("scaled_mm", TORCH_FN(scaled_mm));
  m.impl("scaled_mm_v2", TORCH_FN(scaled_mm_v2));
  m.impl("scaled_grouped_mm", TORCH_FN(scaled_grouped_mm));
}

TORCH_LIBRARY_IMPL(torch_neuronx, Meta, m) {
  m.impl("scaled_mm", TORCH_FN(scaled_mm_meta));
  m.impl("scaled_mm_v2", TORCH_FN(scaled_mm_v2_meta));
  m.impl("scaled_grouped_mm", TORCH_FN(scaled_grouped_mm_meta));
}

}  // namespace torch_neuronx
