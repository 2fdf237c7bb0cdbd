"""Random instructions: rng (raw bits), rand2 (uniform floats), dropout, and the engines' generator
state (set_rng_seed, rand_set_state, rand_get_state).

Each engine keeps per-lane state words in the run context (24 uint32 per lane on VectorE, 6 on
GpSimd, the published XORWOW state sizes), deterministic for a run (seeded 0 at its start). The
numbers have the documented distributions but are NOT the hardware's XORWOW bit stream: a draw
seeds numpy's Philox generator from the state words of the lanes it uses, then replaces those
words, so the same state (rand_set_state of what rand_get_state read) gives the same numbers."""
from __future__ import annotations

from typing import Any

import numpy as np

from ..dtypes import float32, int8, int16, int32, is_float, uint8, uint16, uint32
from ..errors import NKIError
from . import cost_model as cm, instructions as _ins, operands as opd
from .context import current
from .tile import Tile

STATE_WORDS = {cm.VECTOR: 24, cm.GPSIMD: 6}
_INTEGER_OUT = (int8, int16, int32, uint8, uint16, uint32)


def _states(engine: str) -> np.ndarray:
    """The engine's [128, words] uint32 state in the current run (seeded 0 on first use)."""
    states = current().rng_states
    if engine not in states:
        states[engine] = _seeded(0, engine)
    return states[engine]


def _seeded(seed: int, engine: str) -> np.ndarray:
    words = (current().config.partitions, STATE_WORDS[engine])
    return np.random.SeedSequence(seed).generate_state(words[0] * words[1], np.uint32).reshape(words)


def _draw(engine: str, parts: int) -> np.random.Generator:
    """A generator for one instruction over lanes [0, parts); advances those lanes' state."""
    states = _states(engine)
    generator = np.random.Generator(np.random.Philox(np.random.SeedSequence(states[:parts].ravel().tolist())))
    states[:parts] = generator.integers(0, 2 ** 32, states[:parts].shape, dtype=np.uint32)
    return generator


def _engine(engine: str | None, allowed: tuple[str, ...], what: str) -> str:
    chosen = engine or allowed[0]
    if chosen not in allowed:
        raise NKIError("engine", f"{what} runs on {' or '.join(allowed)}, not {chosen}")
    return chosen


def rng(dst: Any, engine: str | None = None) -> Any:
    """VectorE / GpSimd: 32 random bits per element, truncated to dst's integer dtype (low bits)."""
    what = "rng"
    chosen = _engine(engine, (cm.VECTOR, cm.GPSIMD), what)
    target = _ins.destination(dst, what, ("sbuf",) if chosen == cm.GPSIMD else ("sbuf", "psum"))
    opd.need_dtype(what, "dst", target, _INTEGER_OUT)
    bits = _draw(chosen, target.shape[0]).integers(0, 2 ** 32, target.shape, dtype=np.uint32)
    target.write(Ellipsis, bits.astype(target.dtype))  # integer narrowing keeps the low bits
    _ins._record_lanes(chosen, what, target.shape, target.dtype)
    return target


def rand2(dst: Any, low: Any, high: Any) -> Any:
    """VectorE (NeuronCore-v4+): uniform fp32 values in [low, high) (scalars or [P, 1] tiles), cast
    to dst's dtype."""
    what = "rand2"
    opd.need_generation(what, 4)
    target = _ins.destination(dst, what)
    parts = target.shape[0]
    lo = opd.per_partition(low, parts, what, "min")
    hi = opd.per_partition(high, parts, what, "max")
    if np.any(np.asarray(lo) >= np.asarray(hi)):
        raise NKIError("rand-range", f"{what} needs min < max in every partition")
    unit = _draw(cm.VECTOR, parts).random(target.shape, dtype=np.float32)
    values = _ins.align_partitions([lo, unit])[0] + unit * _ins.align_partitions([hi - lo, unit])[0]
    _ins.emit(values.astype(np.float32), float32, target, what)
    _ins._record_lanes(cm.VECTOR, what, target.shape, target.dtype)
    return target


def dropout(data: Any, prob: Any, dst: Any = None, dtype: Any = None) -> Any:
    """VectorE: data with each element replaced by 0 with probability `prob` (a scalar or [P, 1]
    tile per partition); kept elements are not rescaled."""
    what = "dropout"
    x = opd.tile(data, what, "data")
    if isinstance(prob, Tile) and not is_float(x.dtype) and prob.dtype != float32:
        raise NKIError("dtype", f"{what}: prob must be float32 for an integer data tile, got {prob.dtype}")
    values = opd.fp32(x, what)
    p = _ins.align_partitions([opd.per_partition(prob, x.shape[0], what, "prob"), values])[0]
    keep = _draw(cm.VECTOR, x.shape[0]).random(x.shape, dtype=np.float32) >= p
    out_dtype = _ins.destination(dst, what).dtype if dst is not None else opd.new_dtype(dtype, x.dtype)
    if out_dtype != x.dtype and not is_float(x.dtype):
        raise NKIError("dtype", f"{what}: dst must have data's dtype {x.dtype} for integer data, got {out_dtype}")
    tile = _ins.emit(np.where(keep, values, np.float32(0)), out_dtype, dst, what)
    _ins._record_lanes(cm.VECTOR, what, x.shape, tile.dtype)
    return tile


def set_rng_seed(src_seeds: Any) -> None:
    """Seed the VectorE generator from a [1, 1] 32-bit tile: the same seed gives the same numbers."""
    what = "set_rng_seed"
    seed = opd.tile(src_seeds, what, "src_seeds")
    if seed.shape != (1, 1) or seed.dtype.itemsize != 4:
        raise NKIError("seed", f"{what} takes a [1, 1] 32-bit tile, got {seed.dtype} {seed.shape}")
    current().rng_states[cm.VECTOR] = _seeded(int(seed.data.view(np.uint32)[0, 0]), cm.VECTOR)
    _ins._record_lanes(cm.VECTOR, what, seed.shape, seed.dtype)


def _state_engine(x: Any, engine: str | None, what: str) -> str:
    """The engine whose state `x` holds: given, or told by its words per partition (24 VectorE, 6 GpSimd)."""
    words = opd.rows(x.data).shape[1]
    chosen = engine or next((e for e, w in STATE_WORDS.items() if w == words), None)
    if chosen not in STATE_WORDS or STATE_WORDS[chosen] != words:
        raise NKIError("rng-state", f"{what}: a PRNG state is {STATE_WORDS[cm.VECTOR]} uint32 per partition on "
                       f"VectorE, {STATE_WORDS[cm.GPSIMD]} on GpSimd; got {words} for engine {chosen}")
    if chosen == cm.VECTOR:
        opd.need_generation(f"{what} on VectorE", 4)
    opd.need_dtype(what, "the state tile", x, (uint32,))
    return chosen


def rand_set_state(src_seeds: Any, engine: str | None = None) -> None:
    """Load per-lane PRNG state words from an SBUF uint32 tile [P, 6 (GpSimd) or 24 (VectorE)]."""
    what = "rand_set_state"
    x = opd.tile(src_seeds, what, "src_seeds")
    opd.need_buffer(what, "src_seeds", x, ("sbuf",))
    chosen = _state_engine(x, engine, what)
    _states(chosen)[:x.shape[0]] = opd.rows(x.data)
    _ins._record_lanes(chosen, what, x.shape, x.dtype)


def rand_get_state(dst: Any, engine: str | None = None) -> Any:
    """Store the per-lane PRNG state words into a uint32 tile [P, 6 (GpSimd) or 24 (VectorE)]."""
    what = "rand_get_state"
    target = _ins.destination(dst, what)
    chosen = _state_engine(target, engine, what)
    if chosen == cm.GPSIMD:
        opd.need_buffer(what, "dst", target, ("sbuf",))
    target.write(Ellipsis, _states(chosen)[:target.shape[0]].reshape(target.shape).copy())
    _ins._record_lanes(chosen, what, target.shape, target.dtype)
    return target
