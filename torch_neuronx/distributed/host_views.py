"""Device tensors as the transports take them: host tensors on the same bytes, dense.

Device memory is host memory of the process, so Gloo and the shared-memory link run on host
aliases of the device tensors (:func:`torch_neuronx._C._host_alias`): no copy to the host and
back. Both need dense tensors: a strided view goes through a contiguous copy, written back.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch

from .. import _C


def alias(t: torch.Tensor) -> torch.Tensor:
    """The host tensor on ``t``'s bytes (``t`` itself on the CPU)."""
    return _C._host_alias(t) if t.device.type == "neuron" else t


class Contiguous:
    """A host view Gloo can use (Gloo needs dense tensors): the alias itself, or a contiguous
    copy written back by :meth:`finish` for a strided view."""

    def __init__(self, t: torch.Tensor) -> None:
        self.target = alias(t)
        self.dense = self.target if self.target.is_contiguous() else self.target.contiguous()

    def finish(self) -> None:
        if self.dense is not self.target:
            self.target.copy_(self.dense)


def write_pieces(pieces: Iterable[torch.Tensor], tensors: Sequence[torch.Tensor]) -> None:
    """Each of ``tensors`` gets its piece of a collective's one host buffer (the list forms)."""
    for piece, t in zip(pieces, tensors):
        alias(t).copy_(piece.view(t.shape))
