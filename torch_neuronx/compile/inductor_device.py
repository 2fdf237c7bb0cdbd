"""``torch.compile`` with Inductor, the default backend, on neuron tensors.

Inductor generates code per device type, and has no generator for ``neuron``; code that
compiles with the default backend (TorchTitan compiles ``create_block_mask`` and
``flex_attention`` that way) would stop at its first graph. Inductor's extension point for a
device (``register_backend_for_device``) takes a graph pass that runs on the device's graphs
after Inductor's own passes. Ours hands each graph, whole, to the ``neuron`` backend's
pipeline (``backend._compile_graph``: lowering for the host, Inductor C++, one kernel on the
core's queue) and leaves Inductor one node to generate code for: a call of
``neuron_inductor::graph``, whose first argument carries the graph itself, so the code Inductor
keeps in its own cache works in a later process too. So both backends compile alike, and what
``backend="neuron"`` supports (FlexAttention included) works with the default one.

Registered when Inductor's Python wrapper generator is imported (every compile imports it before it
runs a pass), so that ``import torch`` does not pay for Inductor.
"""
from __future__ import annotations

import base64
import contextvars
import copy
import functools
import io
import operator
import pickle
import threading
import weakref
import zlib
from types import ModuleType
from typing import Any

import torch
from torch import fx
from torch._library.utils import lookup_op
from torch.multiprocessing.reductions import StorageWeakRef

from ..import_hooks import after_import
from ..runtime.devices import DEVICE_TYPE

# Imported by every Inductor compile, after the device registry (torch._inductor.codegen.common).
WRAPPER = "torch._inductor.codegen.wrapper"
_library = torch.library.Library("neuron_inductor", "DEF")
_library.define("graph(str graph, Tensor[] inputs) -> Tensor[]")
_library.define("write_back(Tensor(a!) dst, Tensor src) -> ()")

_executables: dict[str, Any] = {}  # encoded graph -> its executable in this process
_executables_lock = threading.Lock()
# Graphs as Inductor passed them, for HOP subgraphs (see GraphAsOneKernel).
_originals: weakref.WeakKeyDictionary[fx.GraphModule, fx.Graph] = weakref.WeakKeyDictionary()


def _higher_order(name: str) -> torch._ops.HigherOrderOperator:
    return getattr(torch.ops.higher_order, name)


def _graph_module(graph: fx.Graph, attrs: dict[str, Any]) -> fx.GraphModule:
    return fx.GraphModule(attrs, graph)


def _tensor_on(value: torch.Tensor, device: str) -> torch.Tensor:
    return value.to(device)


class _GraphPickler(pickle.Pickler):
    """Pickles an fx graph module as its nodes (no metadata: it is propagated again) and the
    attributes they read. Operators, which do not pickle, by name; not the GraphModule's own
    pickling, which keeps its code and traces it symbolically when loaded (HOPs such as
    FlexAttention refuse that)."""

    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, torch._ops.OpOverload):
            return lookup_op, (f"{obj._schema.name}.{obj._overloadname}",)
        if isinstance(obj, torch._ops.HigherOrderOperator):
            return _higher_order, (obj.name(),)
        if isinstance(obj, fx.GraphModule):
            graph = fx.Graph()
            graph.output(graph.graph_copy(obj.graph, {}))
            for node in graph.nodes:
                node.meta = {}
            attrs = {node.target: functools.reduce(getattr, node.target.split("."), obj)
                     for node in graph.find_nodes(op="get_attr")}
            return _graph_module, (graph, attrs)
        if isinstance(obj, torch.Tensor) and obj.device.type != "cpu":
            return _tensor_on, (obj.detach().cpu(), str(obj.device))
        return NotImplemented


def _encode(gm: fx.GraphModule, outputs: list[tuple[Any, ...]]) -> str:
    """The layouts of the graph's results, and the graph pickled apart: the fake implementation
    reads the layouts without rebuilding the graph."""
    buffer = io.BytesIO()
    _GraphPickler(buffer).dump(gm)
    return base64.b64encode(zlib.compress(pickle.dumps((outputs, buffer.getvalue())))).decode()


def _decode(graph: str) -> tuple[list[tuple[Any, ...]], bytes]:
    """The result layouts and the pickled graph (``pickle.loads`` rebuilds it)."""
    return pickle.loads(zlib.decompress(base64.b64decode(graph)))


def _compile(graph: str, inputs: list[torch.Tensor]) -> Any:
    """The executable of an encoded graph, compiled by the neuron backend on first use."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.passes.fake_tensor_prop import FakeTensorProp

    from . import backend
    gm = pickle.loads(_decode(graph)[1])
    mode = FakeTensorMode(allow_non_fake_inputs=True)  # the graph's constants are real tensors
    fakes = [mode.from_tensor(t) for t in inputs]
    FakeTensorProp(gm, mode).propagate_dont_convert_inputs(*fakes)
    return backend._compile_graph(gm, fakes, graph_id=next(backend._graph_ids), kind="inference")


def _on_fresh_thread(function: Any, *args: Any) -> Any:
    """``function(*args)`` on a thread of its own, waited for. The op's kernel runs inside the
    dispatcher, below the keys its caller went through (and under its caller's dispatch modes):
    compiling traces, and tracing must see none of that (factory functions such as ``arange``
    would escape the fake tensor mode). The caller's Python context goes along: Inductor's
    settings are thread-local (context variables), and the user's apply to this compile too."""
    result: dict[str, Any] = {}
    context = contextvars.copy_context()

    def run() -> None:
        try:
            result["value"] = context.run(function, *args)
        except BaseException as error:  # re-raised on the calling thread
            result["error"] = error

    thread = threading.Thread(target=run, name="torch_neuronx-inductor-graph-compile")
    thread.start()
    thread.join()
    if "error" in result:
        raise result["error"]
    return result["value"]


def _run_graph(graph: str, inputs: list[torch.Tensor]) -> list[torch.Tensor]:
    with _executables_lock:
        executable = _executables.get(graph)
        if executable is None:
            executable = _executables[graph] = _on_fresh_thread(_compile, graph, list(inputs))
    return list(executable(list(inputs)))


def _graph_layouts(graph: str, inputs: list[torch.Tensor]) -> list[torch.Tensor]:
    outputs, _ = _decode(graph)
    return [torch.empty_strided(size, stride, dtype=dtype, device=device) for size, stride, dtype, device in outputs]


def _write_back(dst: torch.Tensor, src: torch.Tensor) -> None:
    dst.copy_(src)


# Any dispatch key: a graph may take no tensor (create_block_mask makes its own on the device).
_library.impl("graph", _run_graph, "CompositeExplicitAutograd")
_library.impl("write_back", _write_back, "CompositeExplicitAutograd")
torch.library.register_fake("neuron_inductor::graph", _graph_layouts, lib=_library)
torch.library.register_fake("neuron_inductor::write_back", lambda dst, src: None, lib=_library)


def _storage(node: Any) -> StorageWeakRef | None:
    value = node.meta.get("val") if isinstance(node, fx.Node) else None
    return StorageWeakRef(value.untyped_storage()) if isinstance(value, torch.Tensor) else None


def _layout(node: fx.Node) -> tuple[Any, ...]:
    value = node.meta["val"]
    return tuple(value.shape), tuple(value.stride()), value.dtype, str(value.device)


def _delete_attribute(gm: fx.GraphModule, target: str) -> None:
    """Delete ``gm.<target>``: a tensor or a submodule (``nn.Module`` deletes either)."""
    owner, _, name = target.rpartition(".")
    module = gm.get_submodule(owner) if owner else gm
    if hasattr(module, name):
        delattr(module, name)


def _restore_subgraphs(gm: fx.GraphModule) -> None:
    """Inductor runs its passes on a graph's HOP subgraphs (FlexAttention's score_mod, ...) before
    the graph; the graph goes to the pipeline whole, with its subgraphs as they came."""
    for node in gm.graph.find_nodes(op="get_attr"):
        child = getattr(gm, node.target, None)
        if isinstance(child, fx.GraphModule) and child in _originals:
            child.graph = _originals.pop(child)
            child.recompile()


def _input_mutations(gm: fx.GraphModule, placeholders: list[fx.Node]) -> list[tuple[fx.Node, fx.Node]]:
    """Remove AOTAutograd's kept input mutations (``copy_(input, value)``): (input, value) pairs."""
    pairs = []
    for node in list(gm.graph.nodes):
        if node.target is torch.ops.aten.copy_.default and node.args[0] in placeholders:
            pairs.append((node.args[0], node.args[1]))
            node.replace_all_uses_with(node.args[1])
            gm.graph.erase_node(node)
    return pairs


class _Results:
    """Which results the kernel returns (one per storage: its results may not alias its inputs or
    each other) and how the graph rebuilds every result from them: a tensor on an input's storage
    or on the storage of an earlier result is a view (``as_strided``) made outside the kernel."""

    def __init__(self, results: list[Any], placeholders: list[fx.Node]) -> None:
        inputs = {_storage(p): p for p in placeholders if _storage(p) is not None}
        self.returned: list[fx.Node] = []
        self.plan: list[tuple[str, Any, Any]] = []
        first: dict[StorageWeakRef, int] = {}
        for result in results:
            storage = _storage(result)
            if storage is None:
                self.plan.append(("value", result, None))
            elif storage in inputs:
                self.plan.append(("view_of_input", inputs[storage], result))
            elif storage in first:
                self.plan.append(("view_of_result", first[storage], result))
            else:
                first[storage] = len(self.returned)
                self.plan.append(("result", first[storage], result))
                self.returned.append(result)

    def rebuild(self, graph: fx.Graph, inputs: dict[fx.Node, fx.Node], items: list[fx.Node]) -> list[Any]:
        def view(base: fx.Node, like: fx.Node) -> fx.Node:
            size, stride, _, _ = _layout(like)
            offset = like.meta["val"].storage_offset()
            return graph.call_function(torch.ops.aten.as_strided.default, (base, size, stride, offset))

        rebuilt = []
        for kind, source, result in self.plan:
            if kind == "value":
                rebuilt.append(source)
            elif kind == "view_of_input":
                rebuilt.append(view(inputs[source], result))
            elif kind == "view_of_result":
                rebuilt.append(view(items[source], result))
            else:
                rebuilt.append(items[source])
        return rebuilt


def _make_graph_pass() -> Any:
    from torch._inductor.custom_graph_pass import CustomGraphModulePass

    class GraphAsOneKernel(CustomGraphModulePass):
        """Replace a neuron graph by one ``neuron_inductor::graph`` call carrying the graph; its
        input mutations become ``write_back`` calls after it."""

        def __call__(self, gm: fx.GraphModule) -> None:
            _restore_subgraphs(gm)
            _originals[gm] = copy.deepcopy(gm.graph)  # gm may be a HOP subgraph, whose parent comes next
            output = next(iter(gm.graph.find_nodes(op="output")))
            if not isinstance(output.args[0], (tuple, list)):  # a HOP subgraph: its parent is replaced whole
                return
            placeholders = list(gm.graph.find_nodes(op="placeholder"))
            mutations = _input_mutations(gm, placeholders)
            visible = len(output.args[0])  # the graph's results; the mutated inputs' values follow
            results = _Results(list(output.args[0]) + [value for _, value in mutations], placeholders)
            output.args = (tuple(results.returned),)
            gm.graph.eliminate_dead_code()
            gm.recompile()
            encoded = _encode(gm, [_layout(r) for r in results.returned])
            graph = fx.Graph()
            inputs = {}
            for p in placeholders:
                inputs[p] = graph.placeholder(p.name)
                inputs[p].meta = dict(p.meta)
            call = graph.call_function(torch.ops.neuron_inductor.graph.default, (encoded, list(inputs.values())))
            items = [graph.call_function(operator.getitem, (call, k)) for k in range(len(results.returned))]
            rebuilt = results.rebuild(graph, inputs, items)
            for (destination, _), value in zip(mutations, rebuilt[visible:]):
                graph.call_function(torch.ops.neuron_inductor.write_back.default, (inputs[destination], value))
            graph.output(tuple(rebuilt[:visible]))
            read = [node.target for node in gm.graph.find_nodes(op="get_attr")]
            gm.graph = graph
            for target in read:  # now in the encoded graph (Inductor pickles the module with its attributes)
                _delete_attribute(gm, target)
            gm.recompile()

        def uuid(self) -> Any:
            from . import cache
            return f"torch_neuronx graph pass {cache.backend_version()}"

    return GraphAsOneKernel()


def _register(wrapper: ModuleType) -> None:
    """Register ``neuron`` in Inductor's device registry: Inductor's Python wrapper, and a
    scheduling with nothing to schedule (a neuron graph reaches the scheduler as extern kernels
    only, see the graph pass)."""
    import sys
    common = sys.modules["torch._inductor.codegen.common"]  # imported by the wrapper module
    scheduler = sys.modules["torch._inductor.scheduler"]  # likewise

    class NeuronScheduling(scheduler.BaseScheduling):
        """Nothing to fuse or generate: every node of a neuron graph is an extern kernel."""

        def ready_to_flush(self) -> bool:
            return False

        def flush(self) -> None:
            pass

        def codegen_sync(self) -> None:
            pass

    common.register_backend_for_device(DEVICE_TYPE, NeuronScheduling, wrapper.PythonWrapperCodegen,
                                       device_custom_pass=_make_graph_pass())
    common.register_device_op_overrides(DEVICE_TYPE, common.DeviceOpOverrides())


def install() -> None:
    """Register the device with Inductor when (if ever) its code generators are imported."""
    after_import(WRAPPER, _register)

