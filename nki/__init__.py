"""NKI: the Neuron Kernel Interface tile language, with a simulated NeuronCore.

    import nki, nki.language as nl, nki.isa as nisa

    @nki.jit
    def kernel(x, out): ...
    nki.simulate(kernel)(x, out)        # or kernel(x, out) / kernel[grid](x, out)
    nki.simulator.last_report()         # estimated engine times of that run
"""
from . import collectives, compiler, isa, language, launchers, lnc, simulator, typing
from .benchmark import benchmark
from .errors import NKIError
from .jit import Kernel, baremetal, jit, simulate, simulate_kernel
from .profiler import profile
from .typing import tensor

__all__ = ["jit", "simulate", "simulate_kernel", "baremetal", "benchmark", "profile", "tensor", "Kernel", "NKIError",
           "language", "isa", "collectives", "lnc", "compiler", "typing", "simulator", "launchers"]
