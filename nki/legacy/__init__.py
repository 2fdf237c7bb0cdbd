"""The previous NKI generation (Neuron SDK 2.26 and earlier, imported as `neuronxcc.nki`):
instructions return new tiles (`c = nisa.tensor_tensor(a, b, op=nl.add)`).

Same simulator as `nki`: each return-a-tile instruction allocates its destination and runs the
instruction the current generation writes into a `dst`. Kernels import it unchanged through the
opt-in alias `nki.neuronxcc_alias` (docs/nki.md).
"""
from .. import compiler, typing
from ..benchmark import benchmark
from ..errors import NKIError
from ..jit import Kernel, baremetal, jit, simulate, simulate_kernel
from ..typing import tensor
from . import isa, language

__all__ = ["jit", "simulate", "simulate_kernel", "baremetal", "benchmark", "tensor", "Kernel", "NKIError",
           "language", "isa", "compiler", "typing"]
