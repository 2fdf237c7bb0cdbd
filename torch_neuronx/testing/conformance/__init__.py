"""Upstream conformance: PyTorch's OpInfo database on ``neuron``, compared with the CPU.

``python -m torch_neuronx.testing.conformance --help`` runs it; :func:`run` is the API. See
``docs/operator-coverage.md`` for the latest summary and how to regenerate it.
"""
from .expectations import CATEGORIES, DEFAULT_PATH as EXPECTATIONS_PATH, load as load_expectations
from .report import figures, read_csv, summarize, write_chart, write_csv, write_figures, write_markdown
from .runner import ALL_DTYPES, COLUMNS, FAST_DTYPES, FAST_MAX_SAMPLES, FAST_OPS, run, run_op

__all__ = ["run", "run_op", "load_expectations", "summarize", "figures", "write_figures", "write_csv", "read_csv",
           "write_markdown", "write_chart", "ALL_DTYPES", "FAST_OPS", "FAST_DTYPES",
           "FAST_MAX_SAMPLES", "COLUMNS", "CATEGORIES", "EXPECTATIONS_PATH"]
