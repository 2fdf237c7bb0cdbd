"""Imports point downwards: the import graph of torch_neuronx, nki and vllm_neuron, built from the source
(every import statement, deferred ones inside functions included), has no cycle.

Importing a module first imports the packages it lies in: ``from torch_neuronx import _C`` in
``nki`` runs ``torch_neuronx/__init__.py``, so it depends on everything that file imports. A
module's own packages are left out of that rule (they are already loading when it runs)."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("torch_neuronx", "nki", "vllm_neuron")
EXTENSION = "torch_neuronx._C"  # compiled: a leaf


def modules() -> dict[str, Path | None]:
    found: dict[str, Path | None] = {EXTENSION: None}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def import_graph() -> dict[str, set[str]]:
    """Module -> the modules of ours it imports (a name imported from a package counts as its
    submodule when there is one, else as the package)."""
    mods = modules()

    def ours(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for module, path in mods.items():
        graph[module] = set()
        if path is None:
            continue
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(anchor + ([node.module] if node.module else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
            graph[module] |= {m for m in map(ours, targets) if m and m != module}
        own = set(packages_of(module))
        graph[module] |= {p for m in graph[module] for p in packages_of(m) if p in mods and p not in own}
    return graph


def packages_of(module: str) -> list[str]:
    """The packages importing `module` imports first: "a.b.c" -> ["a", "a.b"]."""
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while component[-1:] != [v]:
                component.append(stack.pop())
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_import_graph_has_no_cycle():
    graph = import_graph()
    assert len(graph) > 50 and "nki.simulator.tile" in graph["nki.simulator.instructions"]  # it sees imports
    assert cycles(graph) == []


def test_a_module_depends_on_the_packages_it_lies_in():
    graph = import_graph()
    assert "torch_neuronx" in graph["nki.device"]  # from torch_neuronx import _C runs the package
    assert "torch_neuronx" not in graph["torch_neuronx.ops.registration"]  # its own package


def test_the_vllm_plugin_is_the_top_layer():
    """vllm_neuron uses the device and the kernel library; nothing below imports it (or vLLM)."""
    graph = import_graph()
    assert "torch_neuronx.compile.backend" in graph["vllm_neuron.compiler"]
    below = [m for m, deps in graph.items() if not m.startswith("vllm_neuron") and
             any(d.startswith("vllm_neuron") for d in deps)]
    assert below == []


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
