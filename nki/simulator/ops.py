"""fp32 numpy implementations of the engine operators and the engine each one runs on."""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ..errors import NKIError
from .cost_model import SCALAR, VECTOR

_SQRT_HALF = np.float32(np.sqrt(0.5))


def _erf(x: np.ndarray) -> np.ndarray:
    # Abramowitz & Stegun 7.1.26 (|error| < 1.5e-7): numpy has no erf and the core avoids scipy.
    a = np.abs(x)
    t = 1.0 / (1.0 + np.float32(0.3275911) * a)
    poly = ((((np.float32(1.061405429) * t - np.float32(1.453152027)) * t
              + np.float32(1.421413741)) * t - np.float32(0.284496736)) * t
            + np.float32(0.254829592)) * t
    return np.sign(x) * (1.0 - poly * np.exp(-a * a))


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def _gelu_tanh(x: np.ndarray) -> np.ndarray:
    c = np.float32(np.sqrt(2.0 / np.pi))
    return 0.5 * x * (1.0 + np.tanh(c * (x + np.float32(0.044715) * x * x * x)))


_GELU_SIGMOID = np.float32(1.702)  # GELU ~ x * sigmoid(1.702 x)


def _gelu_dx(x: np.ndarray) -> np.ndarray:
    # d/dx x*Phi(x) = Phi(x) + x*phi(x)
    return 0.5 * (1.0 + _erf(x * _SQRT_HALF)) + x * np.exp(-0.5 * x * x) * np.float32(1.0 / np.sqrt(2.0 * np.pi))


def _gelu_sigmoid_dx(x: np.ndarray) -> np.ndarray:
    s = _sigmoid(_GELU_SIGMOID * x)
    return s + _GELU_SIGMOID * x * s * (1.0 - s)


def _silu_dx(x: np.ndarray) -> np.ndarray:
    s = _sigmoid(x)
    return s * (1.0 + x * (1.0 - s))


def _softplus(x: np.ndarray) -> np.ndarray:
    return np.logaddexp(np.zeros((), x.dtype), x)


# name -> (fp32 function, engine it runs on as a standalone nl call)
UNARY: dict[str, tuple[Callable[[np.ndarray], np.ndarray], str]] = {
    "exp": (np.exp, SCALAR), "log": (np.log, SCALAR), "sin": (np.sin, SCALAR),
    "cos": (np.cos, SCALAR), "tanh": (np.tanh, SCALAR), "sqrt": (np.sqrt, SCALAR),
    "rsqrt": (lambda x: 1.0 / np.sqrt(x), SCALAR), "sigmoid": (_sigmoid, SCALAR),
    "relu": (lambda x: np.maximum(x, np.zeros((), x.dtype)), SCALAR),
    "gelu": (lambda x: 0.5 * x * (1.0 + _erf(x * _SQRT_HALF)), SCALAR),
    "gelu_apprx_tanh": (_gelu_tanh, SCALAR), "silu": (lambda x: x * _sigmoid(x), SCALAR),
    "erf": (_erf, SCALAR), "softplus": (_softplus, SCALAR),
    "square": (np.square, SCALAR), "copy": (lambda x: x, SCALAR),
    "abs": (np.abs, VECTOR), "negative": (np.negative, VECTOR),
    "reciprocal": (lambda x: 1.0 / x, VECTOR), "sign": (np.sign, VECTOR),
    # activation functions (and their derivatives, for backward kernels) of nki.language
    "gelu_dx": (_gelu_dx, SCALAR), "gelu_apprx_sigmoid": (lambda x: x * _sigmoid(_GELU_SIGMOID * x), SCALAR),
    "gelu_apprx_sigmoid_dx": (_gelu_sigmoid_dx, SCALAR), "silu_dx": (_silu_dx, SCALAR),
    "mish": (lambda x: x * np.tanh(_softplus(x)), SCALAR),
    "erf_dx": (lambda x: np.float32(2.0 / np.sqrt(np.pi)) * np.exp(-x * x), SCALAR),
    "tan": (np.tan, SCALAR), "arctan": (np.arctan, SCALAR),
    "ceil": (np.ceil, VECTOR), "floor": (np.floor, VECTOR), "trunc": (np.trunc, VECTOR),
    "logical_not": (np.logical_not, VECTOR), "invert": (np.invert, VECTOR),
}

BINARY: dict[str, Callable[[Any, Any], Any]] = {
    "add": np.add, "subtract": np.subtract, "multiply": np.multiply, "divide": np.divide,
    "maximum": np.maximum, "minimum": np.minimum, "power": np.power,
    "equal": np.equal, "not_equal": np.not_equal, "greater": np.greater,
    "greater_equal": np.greater_equal, "less": np.less, "less_equal": np.less_equal,
    "logical_and": np.logical_and, "logical_or": np.logical_or,
    # ALU operators of nki.isa (bitvec ops read integer tiles as bit patterns).
    "logical_xor": np.logical_xor, "bitwise_and": np.bitwise_and, "bitwise_or": np.bitwise_or,
    "bitwise_xor": np.bitwise_xor, "abs_max": lambda a, b: np.maximum(np.abs(a), np.abs(b)),
    "abs_min": lambda a, b: np.minimum(np.abs(a), np.abs(b)),
    "bypass": lambda a, b: a,  # the step is skipped: its left operand passes through
    "fmod": np.fmod, "mod": np.mod, "average": lambda a, b: (a + b) / 2,
    "left_shift": np.left_shift, "right_shift": np.right_shift,
    "prelu": lambda x, alpha: np.where(x > 0, x, alpha * x),  # ScalarE activation with parameter alpha
}
# Ops that stay in integer arithmetic when every operand is an integer.
INTEGER_CLOSED = {"add", "subtract", "multiply", "maximum", "minimum", "equal", "not_equal",
                  "greater", "greater_equal", "less", "less_equal", "abs", "negative", "copy",
                  "square", "logical_and", "logical_or", "sign", "logical_xor", "bitwise_and",
                  "bitwise_or", "bitwise_xor", "abs_max", "abs_min", "bypass",
                  "fmod", "mod", "left_shift", "right_shift", "invert", "logical_not"}

REDUCE: dict[str, Callable[..., np.ndarray]] = {
    "add": np.sum, "maximum": np.max, "minimum": np.min, "multiply": np.prod, "mean": np.mean,
    "var": np.var, "all": np.all,
}

_ALIASES = {"absolute": "abs", "true_divide": "divide", "max": "maximum", "min": "minimum",
            "sum": "add", "amax": "maximum", "amin": "minimum", "prod": "multiply",
            "identity": "copy"}
_NUMPY_FUNCS = {np.sum: "add", np.max: "maximum", np.min: "minimum", np.prod: "multiply",
                np.mean: "mean"}


def op_name(op: Any) -> str:
    """Name of an operator given as an nl function, a numpy ufunc/function or a string."""
    name = getattr(op, "_nki_op", None)
    if name is None and isinstance(op, np.ufunc):
        name = op.__name__
    if name is None:
        name = _NUMPY_FUNCS.get(op) if callable(op) else None
    if name is None and isinstance(op, str):
        name = op
    if name is None:
        raise NKIError("unsupported-op", f"{op!r} is not an engine operator (use nl.* functions "
                       f"or numpy ufuncs)")
    return _ALIASES.get(name, name)


def require(name: str, table: dict, kind: str) -> Any:
    if name not in table:
        raise NKIError("unsupported-op", f"'{name}' is not a supported {kind} operator "
                       f"(supported: {', '.join(sorted(table))})")
    return table[name]
