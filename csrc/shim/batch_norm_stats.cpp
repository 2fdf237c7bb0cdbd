// SyncBatchNorm's statistics operators on the core, with CUDA's math (Normalization.cu): biased
// variance per rank, Chan's merge of (count, mean, variance) over ranks, the unbiased variance in
// the running estimate.
#include "batch_norm_stats.h"

#include "host_substitutes.h"

#include <ATen/ATen.h>
#include <ATen/AccumulateType.h>

#include <vector>

namespace torch_neuronx {

namespace {

// The dims a per-channel statistic reduces: all but dim 1.
std::vector<int64_t> reduced_dims(const at::Tensor& input, const char* op) {
  TORCH_CHECK(input.dim() >= 2, op, " on neuron: expected an input of at least 2 dimensions (N, C, ...), got ",
              input.sizes());
  std::vector<int64_t> dims{0};
  for (int64_t d = 2; d < input.dim(); ++d) dims.push_back(d);
  return dims;
}

// A per-channel vector shaped to broadcast against the input: [1, C, 1, ...].
at::Tensor per_channel(const at::Tensor& v, const at::Tensor& input, at::ScalarType acc) {
  std::vector<int64_t> shape(input.dim(), 1);
  shape[1] = input.size(1);
  return v.to(acc).view(shape);
}

at::ScalarType accumulate_type(const at::Tensor& input) { return at::toAccumulateType(input.scalar_type(), true); }

void check_channels(const at::Tensor& v, const at::Tensor& input, const char* op, const char* name) {
  TORCH_CHECK(v.dim() == 1 && v.size(0) == input.size(1), op, " on neuron: expected ", name, " of size [",
              input.size(1), "] for an input of ", input.size(1), " channels, got ", v.sizes());
}

}  // namespace

// (input, eps) -> (mean, invstd) of this rank's batch, per channel, in the accumulate type.
void batch_norm_stats(torch::jit::Stack& s, c10::DeviceIndex) {
  const at::Tensor input = s[0].toTensor();
  const double eps = s[1].toDouble();
  const auto dims = reduced_dims(input, "batch_norm_stats");
  const auto [var, mean] = at::var_mean(input.to(accumulate_type(input)), dims, /*correction=*/0);
  s.clear();
  s.push_back(mean);
  s.push_back((var + eps).rsqrt());
}

// (input, weight?, bias?, mean, invstd, eps) -> (input - mean) * invstd * weight + bias.
void batch_norm_elemt(torch::jit::Stack& s, c10::DeviceIndex) {
  const at::Tensor input = s[0].toTensor(), weight = opt_tensor(s[1]), bias = opt_tensor(s[2]);
  const at::Tensor mean = s[3].toTensor(), invstd = s[4].toTensor();
  const auto acc = accumulate_type(input);
  for (const auto& [t, name] : {std::pair{mean, "mean"}, {invstd, "invstd"}, {weight, "weight"}, {bias, "bias"}}) {
    if (t.defined()) check_channels(t, input, "batch_norm_elemt", name);
  }
  at::Tensor out = (input.to(acc) - per_channel(mean, input, acc)) * per_channel(invstd, input, acc);
  if (weight.defined()) out = out * per_channel(weight, input, acc);
  if (bias.defined()) out = out + per_channel(bias, input, acc);
  s.clear();
  s.push_back(out.to(input.scalar_type()));
}

// (input, mean[R, C], invstd[R, C], running_mean?, running_var?, momentum, eps, counts[R]) ->
// (mean, invstd) of all ranks' batches; the running estimates updated in place.
void batch_norm_gather_stats_with_counts(torch::jit::Stack& s, c10::DeviceIndex) {
  const at::Tensor input = s[0].toTensor(), means = s[1].toTensor(), invstds = s[2].toTensor();
  const at::Tensor running_mean = opt_tensor(s[3]), running_var = opt_tensor(s[4]);
  const double momentum = s[5].toDouble(), eps = s[6].toDouble();
  const at::Tensor counts = s[7].toTensor();
  TORCH_CHECK(means.dim() == 2 && means.sizes() == invstds.sizes() && counts.numel() == means.size(0),
              "batch_norm_gather_stats_with_counts on neuron: expected mean and invstd of size [ranks, channels] "
              "and one count per rank, got ",
              means.sizes(), ", ", invstds.sizes(), " and ", counts.sizes());
  const auto acc = means.scalar_type();
  const at::Tensor n = counts.to(acc).view({-1, 1});
  const at::Tensor total = n.sum(0);
  const at::Tensor var = invstds.reciprocal().square() - eps;
  const at::Tensor mean = (n * means).sum(0) / total;
  const at::Tensor var_n = ((n * var).sum(0) + (n * (means - mean).square()).sum(0)) / total;
  if (running_mean.defined()) running_mean.copy_(running_mean * (1 - momentum) + mean * momentum);
  if (running_var.defined()) running_var.copy_(running_var * (1 - momentum) + var_n * total / (total - 1) * momentum);
  s.clear();
  s.push_back(mean);
  s.push_back((var_n + eps).rsqrt());
}

// (grad_out, input, mean, invstd, weight?, input_g, weight_g, bias_g) ->
// (sum_dy, sum_dy_xmu, grad_weight, grad_bias), each only when its flag asks for it.
void batch_norm_backward_reduce(torch::jit::Stack& s, c10::DeviceIndex) {
  const at::Tensor grad_out = s[0].toTensor(), input = s[1].toTensor();
  const at::Tensor mean = s[2].toTensor(), invstd = s[3].toTensor(), weight = opt_tensor(s[4]);
  const bool input_g = s[5].toBool(), weight_g = s[6].toBool(), bias_g = s[7].toBool();
  TORCH_CHECK(grad_out.sizes() == input.sizes(),
              "batch_norm_backward_reduce on neuron: expected grad_out of the "
              "input's size ",
              input.sizes(), ", got ", grad_out.sizes());
  const auto dims = reduced_dims(input, "batch_norm_backward_reduce");
  const auto acc = accumulate_type(input);
  const at::Tensor dy = grad_out.to(acc);
  const at::Tensor sum_dy = dy.sum(dims);
  const at::Tensor sum_dy_xmu = (dy * (input.to(acc) - per_channel(mean, input, acc))).sum(dims);
  const auto param_dtype = weight.defined() ? weight.scalar_type() : input.scalar_type();
  s.clear();
  s.push_back(input_g ? sum_dy.to(mean.scalar_type()) : at::Tensor());
  s.push_back(input_g ? sum_dy_xmu.to(mean.scalar_type()) : at::Tensor());
  s.push_back(weight_g ? (sum_dy_xmu * invstd.to(acc)).to(param_dtype) : at::Tensor());
  s.push_back(bias_g ? sum_dy.to(param_dtype) : at::Tensor());
}

// (grad_out, input, mean, invstd, weight?, sum_dy, sum_dy_xmu, count[R]) -> grad_input, from the
// sums over all ranks' batches (count: each rank's batch size).
void batch_norm_backward_elemt(torch::jit::Stack& s, c10::DeviceIndex) {
  const at::Tensor grad_out = s[0].toTensor(), input = s[1].toTensor();
  const at::Tensor mean = s[2].toTensor(), invstd = s[3].toTensor(), weight = opt_tensor(s[4]);
  const at::Tensor sum_dy = s[5].toTensor(), sum_dy_xmu = s[6].toTensor(), count = s[7].toTensor();
  TORCH_CHECK(grad_out.sizes() == input.sizes(),
              "batch_norm_backward_elemt on neuron: expected grad_out of the "
              "input's size ",
              input.sizes(), ", got ", grad_out.sizes());
  const auto acc = accumulate_type(input);
  const at::Tensor norm = count.to(acc).sum().reciprocal();
  const at::Tensor istd = per_channel(invstd, input, acc);
  const at::Tensor mean_dy = per_channel(sum_dy, input, acc) * norm;
  const at::Tensor mean_dy_xmu = per_channel(sum_dy_xmu, input, acc) * norm;
  at::Tensor scale = istd;
  if (weight.defined()) scale = scale * per_channel(weight, input, acc);
  const at::Tensor xmu = input.to(acc) - per_channel(mean, input, acc);
  const at::Tensor grad_input = (grad_out.to(acc) - mean_dy - xmu * istd * istd * mean_dy_xmu) * scale;
  s.clear();
  s.push_back(grad_input.to(input.scalar_type()));
}

}  // namespace torch_neuronx
