"""nn.LSTM/GRU/RNN and their cells on neuron against the CPU: outputs, states and gradients.

PyTorch sends the LSTM and GRU cells of a PrivateUse1 device to the fused cell operators
(`_thnn_fused_lstm_cell`, `_thnn_fused_gru_cell` and their backwards), which the backend runs
with CUDA's math (csrc/shim/rnn_cells.cpp); the CPU computes the cells unfused.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn as nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

import torch_neuronx
from helpers import assert_same, to_device

MODULES = {
    "lstm": lambda **kw: nn.LSTM(5, 6, **kw),
    "gru": lambda **kw: nn.GRU(5, 6, **kw),
    "rnn_tanh": lambda **kw: nn.RNN(5, 6, nonlinearity="tanh", **kw),
    "rnn_relu": lambda **kw: nn.RNN(5, 6, nonlinearity="relu", **kw),
}
CONFIGS = {
    "deep_bidirectional_batch_first": dict(num_layers=2, bidirectional=True, batch_first=True),
    "no_bias": dict(bias=False),
    "single_layer": dict(),
}
# bfloat16: CUDA's fused cells round once per step, the CPU after every elementwise operation.
TOL = {torch.float32: dict(atol=1e-5, rtol=1e-5), torch.bfloat16: dict(atol=5e-2, rtol=5e-2)}


def _pair(make, dtype: torch.dtype) -> tuple[nn.Module, nn.Module]:
    torch.manual_seed(0)
    cpu = make().to(dtype)
    dev = make().to(dtype).to("neuron")
    dev.load_state_dict(cpu.state_dict())
    return cpu, dev


def _check_grads(cpu: nn.Module, dev: nn.Module, tol: dict) -> None:
    for (name, p), q in zip(cpu.named_parameters(), dev.parameters()):
        assert q.grad is not None, name
        assert_same(p.grad, q.grad, **tol)


@pytest.mark.parametrize("dtype", TOL, ids=str)
@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("kind", MODULES)
def test_module_forward_and_gradients(kind, config, dtype):
    cpu, dev = _pair(lambda: MODULES[kind](**CONFIGS[config]), dtype)
    shape = (2, 4, 5) if cpu.batch_first else (4, 2, 5)
    x = torch.randn(shape, dtype=dtype, requires_grad=True)
    h0 = torch.randn(cpu.num_layers * (2 if cpu.bidirectional else 1), 2, 6, dtype=dtype, requires_grad=True)
    state = (h0, torch.randn_like(h0).requires_grad_()) if kind == "lstm" else h0
    xd, state_d = to_device(x), to_device(state)
    out, final = cpu(x, state)
    out_d, final_d = dev(xd, state_d)
    tol = TOL[dtype]
    assert_same(out, out_d, **tol)
    assert_same(final, final_d, **tol)
    # Gradients through the output and the final states (the LSTM backward sees both).
    loss = out.float().square().sum() + sum(s.float().sum() for s in (final if kind == "lstm" else (final,)))
    loss_d = out_d.float().square().sum() + sum(s.float().sum() for s in (final_d if kind == "lstm" else (final_d,)))
    loss.backward()
    loss_d.backward()
    assert_same(x.grad, xd.grad, **tol)
    for s, s_d in zip(state if kind == "lstm" else (state,), state_d if kind == "lstm" else (state_d,)):
        assert_same(s.grad, s_d.grad, **tol)
    _check_grads(cpu, dev, tol)
    assert torch_neuronx.get_fallback_ops() == {}


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_packed_sequence(kind):
    cpu, dev = _pair(lambda: MODULES[kind](num_layers=2, bidirectional=True, batch_first=True), torch.float32)
    x = torch.randn(3, 5, 5, requires_grad=True)
    lengths = torch.tensor([5, 3, 2])  # lengths stay on the CPU, as with CUDA
    xd = to_device(x)
    out, _ = cpu(pack_padded_sequence(x, lengths, batch_first=True))
    out_d, _ = dev(pack_padded_sequence(xd, lengths, batch_first=True))
    padded, _ = pad_packed_sequence(out, batch_first=True)
    padded_d, _ = pad_packed_sequence(out_d, batch_first=True)
    assert_same(padded, padded_d, **TOL[torch.float32])
    padded.sum().backward()
    padded_d.sum().backward()
    assert_same(x.grad, xd.grad, **TOL[torch.float32])
    _check_grads(cpu, dev, TOL[torch.float32])


def test_lstm_with_projections():
    cpu, dev = _pair(lambda: nn.LSTM(5, 6, proj_size=3, num_layers=2), torch.float32)
    x = torch.randn(4, 2, 5, requires_grad=True)
    xd = to_device(x)
    out, _ = cpu(x)
    out_d, _ = dev(xd)
    assert_same(out, out_d, **TOL[torch.float32])
    out.sum().backward()
    out_d.sum().backward()
    assert_same(x.grad, xd.grad, **TOL[torch.float32])
    _check_grads(cpu, dev, TOL[torch.float32])


@pytest.mark.parametrize("dtype", TOL, ids=str)
@pytest.mark.parametrize("cell", [nn.LSTMCell, nn.GRUCell, nn.RNNCell])
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no_bias"])
def test_cells(cell, bias, dtype):
    cpu, dev = _pair(lambda: cell(5, 6, bias=bias), dtype)
    x = torch.randn(3, 5, dtype=dtype, requires_grad=True)
    xd = to_device(x)
    out, out_d = cpu(x), dev(xd)  # LSTMCell: (h, c); no state given: zeros
    assert_same(out, out_d, **TOL[dtype])
    first = lambda o: o[0] if isinstance(o, tuple) else o  # noqa: E731 - only h: the LSTM backward without grad_cy
    first(out).float().sum().backward()
    first(out_d).float().sum().backward()
    assert_same(x.grad, xd.grad, **TOL[dtype])
    _check_grads(cpu, dev, TOL[dtype])
    assert torch_neuronx.get_fallback_ops() == {}


def test_fused_cell_checks_sizes():
    gates = torch.randn(2, 8, device="neuron")
    with pytest.raises(RuntimeError,
                       match=r"_thnn_fused_lstm_cell on neuron: expected a hidden state of size \[2, 2\]"):
        torch.ops.aten._thnn_fused_lstm_cell(gates, gates, torch.randn(2, 3, device="neuron"))
    with pytest.raises(RuntimeError, match="_thnn_fused_gru_cell on neuron: expected 2-D input_gates"):
        torch.ops.aten._thnn_fused_gru_cell(gates, gates[:, :6], torch.randn(2, 2, device="neuron"))
