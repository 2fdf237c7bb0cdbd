"""NKI: the Neuron Kernel Interface tile language, with a simulated NeuronCore.

    import nki, nki.language as nl, nki.isa as nisa

    @nki.jit
    def kernel(x, out): ...
    nki.simulate(kernel)(x, out)        # or kernel(x, out) / kernel[grid](x, out)
    nki.simulator.last_report()         # estimated engine times of that run
"""
from . import isa, language, launchers, simulator
from .errors import NKIError
from .jit import Kernel, jit, simulate, simulate_kernel

__all__ = ["jit", "simulate", "simulate_kernel", "Kernel", "NKIError", "language", "isa",
           "simulator", "launchers"]
