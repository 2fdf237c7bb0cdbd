"""``torch.compile(backend="neuron")``: graph capture, lowering and compiled executables."""
