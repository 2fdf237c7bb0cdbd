#include "host_substitutes.h"

#include <ATen/ATen.h>
#include <ATen/native/Resize.h>

#include "batch_norm_stats.h"
#include "generator.h"
#include "rnn_cells.h"

namespace torch_neuronx {

namespace {

// native_dropout's CPU kernel draws from the CPU's default generator; on a core it must draw
// from the core's. Same computation as the CPU kernel otherwise, so masks match a CPU run
// seeded alike.
void dropout_on_core_generator(torch::jit::Stack& s, c10::DeviceIndex device) {
  const at::Tensor input = s[0].toTensor();
  const double p = s[1].toDouble();
  const auto train = s[2].toOptional<bool>();
  s.clear();
  at::Tensor output, mask;
  if (input.numel() == 0) {
    output = input;
    mask = at::empty_like(input);
  } else if (!train.has_value() || *train) {
    const double p1m = 1. - p;
    const double scale = p1m == 0 ? 0. : 1. / p1m;
    mask = at::empty_like(input, at::MemoryFormat::Contiguous);
    mask.bernoulli_(p1m, kernel_generator(std::nullopt, device));
    output = input.mul(mask).mul_(scale);
  } else {
    mask = at::ones_like(input, input.options().dtype(at::kBool));
    output = input.clone();
  }
  s.push_back(output);
  s.push_back(mask);
}

// convolution_backward takes the bias shape the overrideable entry point leaves out.
void insert_bias_sizes(torch::jit::Stack& s) {
  const auto mask = s[9].toBoolList();
  const at::Tensor& weight = s[2].toTensor();
  c10::IValue bias_sizes;
  if (mask[2]) {
    const int64_t channels = s[6].toBool() ? weight.size(1) * s[8].toInt() : weight.size(0);
    bias_sizes = c10::IValue(std::vector<int64_t>{channels});
  }
  s.insert(s.begin() + 3, bias_sizes);
}

// histc of an integer tensor: CUDA counts it in the input's dtype (Transformers' MoE routing
// counts expert ids so on every device but the CPU and MPS), the CPU kernel refuses integers.
// Counted in float64, exact for integers below 2^53.
at::Tensor histc_any_dtype(const at::Tensor& input, int64_t bins, const at::Scalar& min, const at::Scalar& max) {
  if (!c10::isIntegralType(input.scalar_type(), /*includeBool=*/true)) return at::histc(input, bins, min, max);
  return at::histc(input.to(at::kDouble), bins, min, max).to(input.scalar_type());
}

void histc(torch::jit::Stack& s, c10::DeviceIndex) {
  at::Tensor counts = histc_any_dtype(s[0].toTensor(), s[1].toInt(), s[2].toScalar(), s[3].toScalar());
  s.clear();
  s.push_back(std::move(counts));
}

void histc_out(torch::jit::Stack& s, c10::DeviceIndex) {
  const at::Tensor counts = histc_any_dtype(s[0].toTensor(), s[1].toInt(), s[2].toScalar(), s[3].toScalar());
  at::Tensor out = s[4].toTensor();
  TORCH_CHECK(out.scalar_type() == counts.scalar_type(),
              "torch.histc: input tensor and hist tensor should have the "
              "same dtype, but got input ",
              counts.scalar_type(), " and hist ", out.scalar_type());
  at::native::resize_output(out, counts.sizes());
  out.copy_(counts);
  s.clear();
  s.push_back(out);
}

}  // namespace

const std::unordered_map<std::string, HostSubstitute>& host_substitutes() {
  static const std::unordered_map<std::string, HostSubstitute> table = {
      {"aten::convolution_overrideable", {"aten::convolution", nullptr, nullptr}},
      {"aten::convolution_backward_overrideable", {"aten::convolution_backward", &insert_bias_sizes, nullptr}},
      {"aten::native_dropout", {nullptr, nullptr, &dropout_on_core_generator}},
      {"aten::histc", {nullptr, nullptr, &histc}},
      // The device's scaled matmuls (scaled_matmul.cpp): one dequantizing kernel on every host.
      {"aten::_scaled_mm", {"torch_neuronx::scaled_mm", nullptr, nullptr}},
      {"aten::_scaled_mm_v2", {"torch_neuronx::scaled_mm_v2", nullptr, nullptr}},
      {"aten::_scaled_grouped_mm", {"torch_neuronx::scaled_grouped_mm", nullptr, nullptr}},
      {"aten::histc.out", {nullptr, nullptr, &histc_out}},
      {"aten::_thnn_fused_lstm_cell", {nullptr, nullptr, &fused_lstm_cell}},
      // SyncBatchNorm's statistics (batch_norm_stats.cpp), which otherwise only CUDA implements.
      {"aten::batch_norm_stats", {nullptr, nullptr, &batch_norm_stats}},
      {"aten::batch_norm_elemt", {nullptr, nullptr, &batch_norm_elemt}},
      {"aten::batch_norm_gather_stats_with_counts", {nullptr, nullptr, &batch_norm_gather_stats_with_counts}},
      {"aten::batch_norm_backward_reduce", {nullptr, nullptr, &batch_norm_backward_reduce}},
      {"aten::batch_norm_backward_elemt", {nullptr, nullptr, &batch_norm_backward_elemt}},
      {"aten::_thnn_fused_lstm_cell_backward_impl", {nullptr, nullptr, &fused_lstm_cell_backward}},
      {"aten::_thnn_fused_gru_cell", {nullptr, nullptr, &fused_gru_cell}},
      {"aten::_thnn_fused_gru_cell_backward", {nullptr, nullptr, &fused_gru_cell_backward}},
  };
  return table;
}


}  // namespace torch_neuronx
