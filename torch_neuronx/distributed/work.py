"""The handle a neuron collective returns: completion is a device event, as with NCCL.

A collective runs as a kernel on its process group's communication stream, after the kernels
that were queued on the issuing stream before it. :meth:`NeuronWork.wait` makes the *current*
stream wait for that kernel (the host goes on), :meth:`NeuronWork.synchronize` and a
:meth:`get_future` result wait on the host; an error of the collective surfaces at the next
synchronization of the device, naming the collective. A point-to-point operation's handle
(:class:`DeferredWork`) queues its completion when waited for; a coalescing block's
(:class:`DoneWork`) has nothing to wait for.
"""
from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from .eager_frames import never_traced


@never_traced
class NeuronWork(dist.Work):
    """One collective queued on a communication stream."""

    def __init__(self, name: str, done: torch.Event, future: torch.futures.Future, outputs: list[torch.Tensor]) -> None:
        super().__init__()
        self.name = name
        self._done = done
        self._future = future
        self._outputs = outputs

    def wait(self, timeout: timedelta | None = None) -> bool:
        """Make the current stream wait for the collective (NCCL's semantics): kernels launched
        after this read its results; the host does not block."""
        torch.neuron.current_stream(self._done.device.index).wait_event(self._done)
        return True

    def synchronize(self) -> None:
        """Block the host until the collective has run; raises its error."""
        self._future.wait()

    def is_completed(self) -> bool:
        return self._done.query()

    def is_success(self) -> bool:
        return self.is_completed() and self._future.done() and self.exception() is None

    def exception(self) -> Any:
        if not self._future.done():
            return None
        try:
            self._future.value()
        except Exception as error:  # the collective's own error, reported as a value
            return error
        return None

    def get_future(self) -> torch.futures.Future:
        """Completes with the output tensors once the collective has run (CUDA: once its kernel
        is done)."""
        return self._future

    def result(self) -> list[torch.Tensor]:
        return self._outputs


@never_traced
class DoneWork(dist.Work):
    """The work of a coalescing block whose operations each returned their own work."""

    def wait(self, timeout: timedelta | None = None) -> bool:
        return True

    def is_completed(self) -> bool:
        return True


@never_traced
class DeferredWork(dist.Work):
    """A point-to-point operation: its completion is queued on the communication stream when the
    caller waits (or when it is garbage: the receive still lands before later collectives).
    ``queue`` queues it (once) and returns its work."""

    def __init__(self, queue: Callable[[], dist.Work]) -> None:
        super().__init__()
        self._work: dist.Work | None = None
        self._queue = queue

    def _queued(self) -> dist.Work:
        if self._work is None:
            self._work = self._queue()
        return self._work

    def wait(self, timeout: timedelta | None = None) -> bool:
        return self._queued().wait(timeout)

    def is_completed(self) -> bool:
        return self._work is not None and self._work.is_completed()

    def get_future(self) -> torch.futures.Future:
        return self._queued().get_future()

    def synchronize(self) -> None:
        self._queued().synchronize()
