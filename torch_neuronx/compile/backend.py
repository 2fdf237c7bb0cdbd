"""The ``neuron`` torch.compile backend.

Dynamo captures an FX graph, AOTAutograd produces the forward and backward graphs decomposed
with the compiler's decomposition table, each graph is lowered for the simulated core
(:mod:`.lowering`) and compiled by Inductor's C++ backend — or loaded from the on-disk executable
cache (:mod:`.cache`) — and runs as one kernel on the core's hardware queue (:mod:`.executable`).
Registered only under the name ``neuron``: other backends and CPU compilation are untouched.
"""
from __future__ import annotations

import contextlib
import functools
import itertools
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import fx
from torch._dynamo.backends.common import aot_autograd

from . import artifacts, cache, kernel_batch, metrics, rng, settings, workarounds
from .executable import KERNEL_PREFIX, Executable
from .generated_module import device_source, load_module
from .lowering import is_symbolic, lower_for_host, refuse_dynamic

_graph_ids = itertools.count()
# Dynamo imports the backend when torch.compile names it, before tracing.
workarounds.apply()
cache.start_isa_probe()
_KNOWN_OPTIONS = {"fallback_execution"}


class NeuronCompileError(RuntimeError):
    """A stage of the neuron compile pipeline failed for a graph."""


@contextlib.contextmanager
def _stage(name: str, graph: str) -> Iterator[None]:
    """Time a compile stage and name it (and the graph) in any error it raises."""
    with metrics.stage(name):
        try:
            yield
        except NeuronCompileError:
            raise
        except Exception as error:
            raise NeuronCompileError(
                f"torch.compile(backend='neuron'): stage '{name}' failed for {graph}: {error}\n"
                "To run such graphs eagerly instead, set TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION=0 "
                "or pass options={'fallback_execution': True}.") from error


def _build(gm: fx.GraphModule, example_inputs: list[Any], graph_id: int,
           kind: str) -> tuple[str | None, Callable[[list[Any]], Any], int]:
    """Lower and compile a graph: (the generated module's source for the device
    (``generated_module.device_source``), None when the module carries constants, which live in the
    module object and not in its source; its entry function; the number of random seeds it takes
    as a trailing input)."""
    cache.wait_isa_probe()
    from torch._inductor.compile_fx import compile_fx_inner
    from torch._inductor.decomposition import select_decomp_table
    from torch._inductor.fx_passes.joint_graph import joint_graph_passes
    from torch._inductor.virtualized import V
    with _stage("lowering", f"the {kind} graph of graph {graph_id}"):
        host_gm, host_inputs = lower_for_host(gm, example_inputs, select_decomp_table())
    artifacts.preserve(f"lowered/graph_{graph_id}_{kind}.py", host_gm.print_readable(print_output=False))
    with _stage("compiler", f"the {kind} graph of graph {graph_id}"):
        # The passes Inductor's compile_fx applies before compile_fx_inner (RNG replacement,
        # pattern rewrites): without them random ops do not lower.
        with V.set_fake_mode(torch._guards.detect_fake_mode(host_inputs)):
            joint_graph_passes(host_gm)
        seeds, seeds_example = rng.seeds_as_input(host_gm)
        # As compile_fx tells it: a backward may reuse its donated inputs' (saved activations')
        # memory for results.
        with kernel_batch.one_unit():
            compiled = compile_fx_inner(host_gm, host_inputs + ([seeds_example] if seeds else []),
                                        is_backward=kind == "backward", is_inference=kind == "inference")
        # Inductor reported the layouts its code gives the outputs, for AOTAutograd to compile the
        # backward against; the executable gives them the graph's layouts instead (Executable's
        # first call), so AOTAutograd must keep the graph's (a saved activation laid out
        # otherwise made the backward's views impossible).
        _forget_output_strides()
    metrics.count("executables_compiled")
    if not hasattr(compiled, "source_code"):  # a graph of constants only: Inductor hands it back as is
        return None, compiled, seeds
    source = device_source(compiled.source_code)
    artifacts.preserve(f"executables/graph_{graph_id}_{kind}.py", source)
    return None if compiled.constants else source, load_module(source, compiled.constants), seeds


def _forget_output_strides() -> None:
    context = torch._guards.TracingContext.try_get()
    if context is not None and context.output_strides is not None:
        context.output_strides.clear()


def _region(graph_id: int) -> str:
    """The name of a graph's kernels on the queue and in profiles, before ``_<kind>``."""
    return f"{KERNEL_PREFIX}_{graph_id}"


def _compile_graph(gm: fx.GraphModule, example_inputs: list[Any], *, graph_id: int, kind: str) -> Executable:
    """AOTAutograd's forward/backward/inference compiler: the graph's executable, from the
    executable cache when it has the graph."""
    artifacts.preserve(f"fx_graphs/graph_{graph_id}_{kind}_aot.py", gm.print_readable(print_output=False))
    root = settings.cache_dir()
    # Entered again here: a backward compiled lazily (cache disabled) runs outside _aot_compile.
    with cache.inductor_caches(root):
        if root is None:
            _, entry_function, seeds = _build(gm, example_inputs, graph_id, kind)
            return Executable(entry_function, gm, seeds, _region(graph_id), kind, None)
        from torch._inductor.utils import get_donated_idxs
        # A backward's code depends on which of its inputs AOTAutograd donated.
        donated = get_donated_idxs() if kind == "backward" else None
        digest: str | None = cache.key(gm, kind, str(donated))
        with cache.lock(root, digest):
            with metrics.stage("cache_load"):
                entry = cache.load(root, digest)
            metrics.count("cache_hits" if entry else "cache_misses")
            if entry is None:
                source, entry_function, seeds = _build(gm, example_inputs, graph_id, kind)
                entry = entry_function, seeds
                if source is None:
                    digest = None
                else:
                    cache.store(root, digest, source, seeds)
        return Executable(entry[0], gm, entry[1], _region(graph_id), kind, digest)


def _partition(gm: fx.GraphModule, joint_inputs: list[Any], **kwargs: Any) -> Any:
    """Inductor's partitioner, imported when a graph is partitioned: a warm start, whose graphs
    come partitioned from the cache, does not pay the ~0.7 s import. Its joint-graph passes read
    the fake mode from Inductor's virtualized context (the pass that fuses random ops' seeds makes
    fake tensors), which Inductor's own compile sets around this call."""
    from torch._guards import detect_fake_mode
    from torch._inductor.compile_fx import partition_fn
    from torch._inductor.virtualized import V
    with V.set_fake_mode(detect_fake_mode(joint_inputs)):
        return partition_fn(gm, joint_inputs, **kwargs)


def _aot_compile(gm: fx.GraphModule, example_inputs: list[Any], graph_id: int,
                 options: dict[str, Any] | None) -> Callable[..., Any]:
    from torch._functorch._aot_autograd.schemas import SerializableAOTDispatchCompiler
    from torch._inductor.decomposition import select_decomp_table
    root = settings.cache_dir()
    # AOTAutograd's own cache keeps a graph's forward/backward partition and runtime wrappers
    # with its executables (which pickle as their executable-cache entries): a warm start skips
    # tracing. Its entries live in Inductor's cache directory, as for CPU compiles; its key is
    # tagged with this backend's source, and the backward compiles with the forward, inside
    # this call, so the entry is complete when it is saved.
    aot_cache = (root is not None and torch._functorch.config.enable_autograd_cache
                 and not torch.compiler.config.force_disable_caches)

    def compiler(kind: str) -> Callable[..., Executable]:
        compile_graph = functools.partial(_compile_graph, graph_id=graph_id, kind=kind)
        return SerializableAOTDispatchCompiler(Executable, compile_graph) if aot_cache else compile_graph

    # As CPU Inductor: its joint-graph passes and partitioner (cheap intermediates are
    # recomputed in the backward instead of saved), and in-place updates of inputs kept in
    # inference graphs (a compiled optimizer step writes parameters in its one kernel).
    backend = aot_autograd(fw_compiler=compiler("forward"), bw_compiler=compiler("backward"),
                           inference_compiler=compiler("inference"), partition_fn=_partition,
                           decompositions=select_decomp_table(), keep_inference_input_mutations=True,
                           compile_region_name=_region(graph_id))
    # With the eager fallback on, the backward also compiles with the forward, so that a failure
    # of either makes the whole graph run eagerly.
    ahead = aot_cache or settings.fallback_execution(options)
    hits = _aot_cache_hits()
    with _stage("aot_autograd", f"graph {graph_id}"), cache.inductor_caches(root), \
            torch._functorch.config.patch(force_non_lazy_backward_lowering=ahead,
                                          bundled_autograd_cache=True):
        compiled = backend(gm, example_inputs)
    if _aot_cache_hits() > hits:
        metrics.count("graph_cache_hits")
    return compiled


def _aot_cache_hits() -> int:
    from torch._dynamo.utils import counters
    return counters["aot_autograd"]["autograd_cache_hit"]


def _compile_or_fallback(gm: fx.GraphModule, example_inputs: list[Any], graph_id: int,
                         options: dict[str, Any] | None) -> Callable[..., Any]:
    """The compiled graph, or with the fallback switch on and a failing compile, the graph
    itself (run eagerly on the device)."""
    try:
        return _aot_compile(gm, example_inputs, graph_id, options)
    except Exception as error:
        if not settings.fallback_execution(options):
            raise
        metrics.count("eager_fallbacks")
        warnings.warn(f"torch.compile(backend='neuron'): graph {graph_id} runs eagerly because its "
                      f"compile failed ({error}).", stacklevel=3)
        return gm.forward


class PerShapeExecutables:
    """Automatic dynamic shapes made Dynamo trace a symbolic graph (its default after a second
    input shape, which only a backend-wide config could switch off): compile it for each concrete
    shape instead, so executables stay static. Each new shape is a counted recompilation, up to
    Dynamo's ``recompile_limit`` shapes; later shapes run eagerly (or raise with
    ``fail_on_recompile_limit_hit``), as Dynamo treats a frame over its limit."""

    def __init__(self, gm: fx.GraphModule, graph_id: int, options: dict[str, Any] | None) -> None:
        self.gm = gm
        self.graph_id = graph_id
        self.options = options
        self.by_spec: dict[tuple[Any, ...], Callable[..., Any]] = {}

    @torch._disable_dynamo
    def __call__(self, *args: Any) -> Any:
        spec = tuple((a.dtype, a.shape, a.stride()) if isinstance(a, torch.Tensor) else a for a in args)
        compiled = self.by_spec.get(spec)
        if compiled is None and len(self.by_spec) >= torch._dynamo.config.recompile_limit:
            return self._over_limit(spec)(*args)
        if compiled is None:
            metrics.count("recompilations")
            compiled = self.by_spec[spec] = _compile_or_fallback(self.gm, list(args), self.graph_id, self.options)
        return compiled(*args)

    def _over_limit(self, spec: tuple[Any, ...]) -> Callable[..., Any]:
        shapes = [tuple(s[1]) for s in spec if isinstance(s, tuple)]
        message = (f"torch.compile(backend='neuron'): graph {self.graph_id} has been compiled for "
                   f"{len(self.by_spec)} input shapes (torch._dynamo.config.recompile_limit); "
                   f"input shapes {shapes} run eagerly. Give the compiled region fewer distinct "
                   "shapes (pad inputs to a few sizes, or mark_static the varying dimension), or "
                   "raise torch._dynamo.config.recompile_limit.")
        if torch._dynamo.config.fail_on_recompile_limit_hit:
            raise RuntimeError(message)
        warnings.warn(message, stacklevel=3)
        return self.gm.forward


def _warn_unused(mode: str | None, options: dict[str, Any] | None) -> None:
    if mode is not None:
        warnings.warn(f"torch.compile(backend='neuron'): mode={mode!r} has no effect; neuron "
                      "executables are compiled the same way in every mode.", stacklevel=3)
    unknown = sorted(set(options or ()) - _KNOWN_OPTIONS)
    if unknown:
        warnings.warn(f"torch.compile(backend='neuron'): options {unknown} have no effect; the "
                      f"backend reads only {sorted(_KNOWN_OPTIONS)}.", stacklevel=3)


def _is_recompile() -> bool:
    compile_id = torch._guards.CompileContext.current_compile_id()
    return compile_id is not None and (compile_id.frame_compile_id or 0) > 0


def neuron_backend(gm: fx.GraphModule, example_inputs: list[Any], mode: str | None = None,
                   options: dict[str, Any] | None = None) -> Callable[..., Any]:
    """``torch.compile(model, backend="neuron")``. Dynamo finds it through the
    ``torch_dynamo_backends`` entry point, so importing the backend costs nothing until then."""
    _warn_unused(mode, options)
    graph_id = next(_graph_ids)
    metrics.count("graphs")
    artifacts.preserve(f"fx_graphs/graph_{graph_id}_dynamo.py", gm.print_readable(print_output=False))
    if any(is_symbolic(x) for x in example_inputs):
        if not torch._dynamo.config.assume_static_by_default:  # torch.compile(dynamic=True)
            raise refuse_dynamic()
        return PerShapeExecutables(gm, graph_id, options)
    if _is_recompile():
        metrics.count("recompilations")
    return _compile_or_fallback(gm, example_inputs, graph_id, options)
