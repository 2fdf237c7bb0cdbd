// Fused LSTM/GRU cells on the core: the math of CUDA's kernels, in the operator's math type
// (float for bfloat16/float16, as CUDA's accumulate type), rounded once on the way out.
#include "rnn_cells.h"

#include "host_substitutes.h"

#include <ATen/ATen.h>
#include <ATen/OpMathType.h>

namespace torch_neuronx {

namespace {

// A fused cell's inputs: (input_gates, hidden_gates, cx or hx, input_bias?, hidden_bias?).
struct CellInputs {
  at::Tensor input_gates, hidden_gates, prev, input_bias, hidden_bias;
  at::ScalarType dtype, math;  // the gates' dtype and the type the cell computes in
};

// Reads a cell's inputs with the checks of CUDA's checkSizes, worded for the user: `factor`
// gates per hidden unit.
CellInputs read_cell(const torch::jit::Stack& s, const char* op, int64_t factor) {
  const at::Tensor input_gates = s[0].toTensor();
  const auto dtype = input_gates.scalar_type();
  const CellInputs c{input_gates,      s[1].toTensor(), s[2].toTensor(),        opt_tensor(s[3]),
                     opt_tensor(s[4]), dtype,           at::toOpMathType(dtype)};
  TORCH_CHECK(c.input_gates.dim() == 2 && c.input_gates.sizes() == c.hidden_gates.sizes(), op,
              " on neuron: expected 2-D input_gates and hidden_gates of the same size, got ", c.input_gates.sizes(),
              " and ", c.hidden_gates.sizes());
  const int64_t gates = c.input_gates.size(1);
  TORCH_CHECK(c.input_bias.defined() == c.hidden_bias.defined(), op,
              " on neuron: pass both input_bias and hidden_bias or neither");
  TORCH_CHECK(!c.input_bias.defined() || (c.input_bias.dim() == 1 && c.input_bias.numel() == gates &&
                                          c.hidden_bias.sizes() == c.input_bias.sizes()),
              op, " on neuron: expected biases of size [", gates, "], got ", c.input_bias.sizes(), " and ",
              c.hidden_bias.sizes());
  TORCH_CHECK(gates % factor == 0 && c.prev.dim() == 2 && c.prev.size(0) == c.input_gates.size(0) &&
                  c.prev.size(1) == gates / factor,
              op, " on neuron: expected a hidden state of size [", c.input_gates.size(0), ", ", gates / factor,
              "] for gates of size ", c.input_gates.sizes(), ", got ", c.prev.sizes());
  return c;
}

// Gate pre-activations summed in the order of the CUDA kernel: input + hidden + bias1 + bias2.
at::Tensor pre_activations(const at::Tensor& input_gates, const at::Tensor& hidden_gates, const at::Tensor& input_bias,
                           const at::Tensor& hidden_bias, at::ScalarType math) {
  at::Tensor sum = input_gates.to(math) + hidden_gates.to(math);
  if (input_bias.defined()) sum = sum + input_bias.to(math) + hidden_bias.to(math);
  return sum;
}

at::Tensor bias_grad(const at::Tensor& grad_gates, bool has_bias) {
  return has_bias ? grad_gates.sum(0) : at::Tensor();
}

}  // namespace

// (input_gates, hidden_gates, cx, input_bias, hidden_bias) -> (hy, cy, workspace); the
// workspace holds the activated gates i, f, g, o side by side, as input_gates does.
void fused_lstm_cell(torch::jit::Stack& s, c10::DeviceIndex) {
  const CellInputs c = read_cell(s, "_thnn_fused_lstm_cell", 4);
  const at::Tensor& cx = c.prev;
  const auto dtype = c.dtype, math = c.math;
  const at::Tensor pre = pre_activations(c.input_gates, c.hidden_gates, c.input_bias, c.hidden_bias, math);
  const int64_t h = cx.size(1);
  at::Tensor gates = pre.sigmoid();
  gates.narrow(1, 2 * h, h).copy_(pre.narrow(1, 2 * h, h).tanh());
  const auto g = gates.chunk(4, 1);
  const at::Tensor cy = g[1] * cx.to(math) + g[0] * g[2];
  const at::Tensor hy = g[3] * cy.tanh();
  s.clear();
  s.push_back(hy.to(dtype));
  s.push_back(cy.to(dtype));
  s.push_back(gates.to(dtype));
}

// (grad_hy?, grad_cy?, cx, cy, workspace, has_bias) -> (grad_gates, grad_cx, grad_bias?);
// a missing output gradient counts as zeros, and no gradient at all gives no results.
void fused_lstm_cell_backward(torch::jit::Stack& s, c10::DeviceIndex) {
  const at::Tensor grad_hy = opt_tensor(s[0]), grad_cy = opt_tensor(s[1]);
  const at::Tensor cx = s[2].toTensor(), cy = s[3].toTensor(), workspace = s[4].toTensor();
  const bool has_bias = s[5].toBool();
  s.clear();
  if (!grad_hy.defined() && !grad_cy.defined()) {
    s.insert(s.end(), 3, at::Tensor());
    return;
  }
  TORCH_CHECK(workspace.dim() == 2 && workspace.size(1) == 4 * cx.size(-1) && cx.sizes() == cy.sizes(),
              "_thnn_fused_lstm_cell_backward_impl on neuron: expected a workspace of size [batch, 4 * hidden] "
              "and cx, cy of size [batch, hidden], got ",
              workspace.sizes(), ", ", cx.sizes(), ", ", cy.sizes());
  const auto dtype = workspace.scalar_type();
  const auto math = at::toOpMathType(dtype);
  const auto w = workspace.to(math).chunk(4, 1);
  const at::Tensor &ig = w[0], &fg = w[1], &cg = w[2], &og = w[3];
  const at::Tensor zeros = at::zeros(cx.sizes(), cx.options().dtype(math));
  const at::Tensor go = grad_hy.defined() ? grad_hy.to(math) : zeros;
  const at::Tensor goc = grad_cy.defined() ? grad_cy.to(math) : zeros;
  const at::Tensor tanh_cy = cy.to(math).tanh();
  const at::Tensor gcx = go * og * (1 - tanh_cy * tanh_cy) + goc;
  const at::Tensor grad_gates = at::cat({gcx * cg * (1 - ig) * ig, gcx * cx.to(math) * (1 - fg) * fg,
                                         gcx * ig * (1 - cg * cg), go * tanh_cy * (1 - og) * og},
                                        1)
                                    .to(dtype);
  s.push_back(grad_gates);
  s.push_back((gcx * fg).to(dtype));
  s.push_back(bias_grad(grad_gates, has_bias));
}

// (input_gates, hidden_gates, hx, input_bias, hidden_bias) -> (hy, workspace); gates r, z, n
// and a workspace of r, z, n, hx and the hidden n gate with its bias, side by side.
void fused_gru_cell(torch::jit::Stack& s, c10::DeviceIndex) {
  const CellInputs c = read_cell(s, "_thnn_fused_gru_cell", 3);
  const at::Tensor &input_gates = c.input_gates, &hidden_gates = c.hidden_gates, &hx = c.prev;
  const at::Tensor &input_bias = c.input_bias, &hidden_bias = c.hidden_bias;
  const auto dtype = c.dtype, math = c.math;
  const int64_t h = hx.size(1);
  const auto part = [&](const at::Tensor& t, int64_t gate, int64_t n) {
    return t.defined() ? t.narrow(-1, gate * h, n * h) : t;
  };
  // r and z sum everything; n adds the hidden part (with its bias) only after the reset gate.
  const auto rz = pre_activations(part(input_gates, 0, 2), part(hidden_gates, 0, 2), part(input_bias, 0, 2),
                                  part(hidden_bias, 0, 2), math)
                      .sigmoid()
                      .chunk(2, 1);
  at::Tensor in = part(input_gates, 2, 1).to(math), hn = part(hidden_gates, 2, 1).to(math);
  if (input_bias.defined()) {
    in = in + part(input_bias, 2, 1).to(math);
    hn = hn + part(hidden_bias, 2, 1).to(math);
  }
  const at::Tensor ng = (in + rz[0] * hn).tanh();
  const at::Tensor hxm = hx.to(math);
  const at::Tensor hy = ng + rz[1] * (hxm - ng);
  s.clear();
  s.push_back(hy.to(dtype));
  s.push_back(at::cat({rz[0], rz[1], ng, hxm, hn}, 1).to(dtype));
}

// (grad_hy, workspace, has_bias) -> (grad_input_gates, grad_hidden_gates, grad_hx,
// grad_input_bias?, grad_hidden_bias?).
void fused_gru_cell_backward(torch::jit::Stack& s, c10::DeviceIndex) {
  const at::Tensor grad_hy = s[0].toTensor(), workspace = s[1].toTensor();
  const bool has_bias = s[2].toBool();
  TORCH_CHECK(grad_hy.dim() == 2 && workspace.dim() == 2 && workspace.size(0) == grad_hy.size(0) &&
                  workspace.size(1) == 5 * grad_hy.size(1),
              "_thnn_fused_gru_cell_backward on neuron: expected grad_hy of size [batch, hidden] and a "
              "workspace of size [batch, 5 * hidden], got ",
              grad_hy.sizes(), " and ", workspace.sizes());
  const auto dtype = workspace.scalar_type();
  const auto math = at::toOpMathType(dtype);
  const auto w = workspace.to(math).chunk(5, 1);
  const at::Tensor &rg = w[0], &ig = w[1], &ng = w[2], &hx = w[3], &hn = w[4];
  const at::Tensor go = grad_hy.to(math);
  const at::Tensor gig = go * (hx - ng) * (1 - ig) * ig;
  const at::Tensor gin = go * (1 - ig) * (1 - ng * ng);
  const at::Tensor grg = gin * hn * (1 - rg) * rg;
  const at::Tensor grad_input_gates = at::cat({grg, gig, gin}, 1).to(dtype);
  const at::Tensor grad_hidden_gates = at::cat({grg, gig, gin * rg}, 1).to(dtype);
  s.clear();
  s.push_back(grad_input_gates);
  s.push_back(grad_hidden_gates);
  s.push_back((go * ig).to(dtype));
  s.push_back(bias_grad(grad_input_gates, has_bias));
  s.push_back(bias_grad(grad_hidden_gates, has_bias));
}

}  // namespace torch_neuronx
