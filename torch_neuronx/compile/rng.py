"""Random numbers of compiled graphs come from the neuron core's generator.

Inductor replaces a graph's random ops by counter-based generation from per-graph seeds, which
its generated code draws from the CPU default generator when the graph runs. The lowering turns
that seed tensor into a trailing graph input instead; each call of the executable draws it with
a ``randint`` on the device, i.e. from the core's generator (``torch.neuron.manual_seed``), in
stream order with the eager random ops around it.
"""
from __future__ import annotations

import torch
from torch import fx

_SEED_RANGE = (torch.iinfo(torch.int64).min, torch.iinfo(torch.int64).max)  # Inductor's own


def seeds_as_input(gm: fx.GraphModule) -> tuple[int, torch.Tensor | None]:
    """Replace the graph's seed generation by a trailing input: (seed count, example input of the
    new placeholder); (0, None) when the graph has no random ops."""
    node = next((n for n in gm.graph.nodes if n.target is torch.ops.prims.inductor_seeds.default), None)
    if node is None:
        return 0, None
    last_input = [n for n in gm.graph.nodes if n.op == "placeholder"][-1]
    with gm.graph.inserting_after(last_input):
        seeds = gm.graph.placeholder("neuron_rng_seeds")
    seeds.meta.update(node.meta)
    node.replace_all_uses_with(seeds)
    gm.graph.erase_node(node)
    gm.recompile()
    return node.args[0], node.meta["val"]


def draw_seeds(count: int, device: torch.device) -> torch.Tensor:
    """``count`` seeds from the device's generator, as Inductor draws them."""
    return torch.randint(*_SEED_RANGE, (count,), dtype=torch.int64, device=device)
