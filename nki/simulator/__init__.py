"""The simulated NeuronCore: `run` a kernel on numpy buffers and get a RunReport of estimates."""
from .context import last_report
from .cost_model import GENERATIONS, TRN1, TRN2, TRN3, HardwareConfig
from .engine import run
from .report import InstructionRecord, RunReport

__all__ = ["run", "last_report", "RunReport", "InstructionRecord", "HardwareConfig",
           "TRN1", "TRN2", "TRN3", "GENERATIONS"]
