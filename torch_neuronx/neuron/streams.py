r"""Streams and events (the ``torch.cuda`` stream API).

Streams are multiplexed onto each core's single hardware queue: each stream keeps its order,
a higher priority (lower number) runs first when several are ready, and
:meth:`Stream.wait_event` blocks only the waiting stream. Kernels keep the tensors they use
alive until they have run, so :meth:`torch.Tensor.record_stream` is always satisfied.
"""
from __future__ import annotations

from typing import Any

import torch

from .. import _C
from ..runtime.devices import device_index as _device_index


class Stream(torch.Stream):
    r"""A queue of work on a neuron device.

    Args:
        device (torch.device or int, optional): device of the stream (default: current).
        priority (int, optional): 0 (default) or a negative number for higher priority.
    """

    def __new__(cls, device: Any = None, priority: int = 0, **kwargs: Any) -> "Stream":
        if "stream_id" in kwargs:  # wrap an existing stream (torch.Stream protocol)
            return super().__new__(cls, **kwargs)
        with torch.neuron.device(_device_index(device)):
            return super().__new__(cls, device=torch.device("neuron", torch.neuron.current_device()),
                                   priority=priority)

    @property
    def priority(self) -> int:
        return _C._stream_priority(self.device_index, self.stream_id)

    @staticmethod
    def priority_range() -> tuple[int, int]:
        r"""(lowest, highest) priority, as ``torch.cuda.Stream.priority_range``."""
        return (0, -1)

    def wait_event(self, event: torch.Event) -> None:
        r"""Make all future work on this stream wait for ``event``."""
        event.wait(self)

    def wait_stream(self, stream: torch.Stream) -> None:
        r"""Make all future work on this stream wait for the work queued on ``stream`` so far."""
        self.wait_event(stream.record_event())

    def record_event(self, event: torch.Event | None = None) -> torch.Event:
        r"""Record an event on this stream (a new one if none is given) and return it."""
        event = Event() if event is None else event
        event.record(self)
        return event

    def __repr__(self) -> str:
        return f"<torch_neuronx.Stream device=neuron:{self.device_index} stream_id={self.stream_id}>"


class _EventMeta(type):
    def __instancecheck__(cls, obj: object) -> bool:
        return isinstance(obj, torch.Event) and obj.device.type == "neuron"


class Event(metaclass=_EventMeta):
    r"""A marker in a stream; with ``enable_timing=True`` it records when it was reached.

    Constructing one returns a :class:`torch.Event` on the neuron device: PyTorch's event
    methods (``elapsed_time``, ``Stream.record_event``) accept only exact ``torch.Event``
    objects, so a subclass could not be paired with events made elsewhere.
    ``isinstance(e, torch.neuron.Event)`` holds for every neuron event.
    """

    def __new__(cls, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False,
                device: Any = None) -> torch.Event:
        if interprocess:
            raise NotImplementedError("Event(interprocess=True) is not supported on neuron")
        return torch.Event(device="neuron" if device is None else device,
                           enable_timing=enable_timing, blocking=blocking)


def _wrap(stream: torch.Stream) -> Stream:
    return Stream(stream_id=stream.stream_id, device_index=stream.device_index,
                  device_type=stream.device_type)


def current_stream(device: Any = None) -> Stream:
    r"""Return the currently selected stream of a device."""
    return _wrap(torch.accelerator.current_stream(_device_index(device)))


def default_stream(device: Any = None) -> Stream:
    r"""Return the default stream (stream 0) of a device."""
    current = current_stream(device)
    return Stream(stream_id=0, device_index=current.device_index, device_type=current.device_type)


def set_stream(stream: torch.Stream | None) -> None:
    r"""Select a stream (and its device) for the calling thread."""
    if stream is not None:
        torch.accelerator.set_stream(stream)


class StreamContext:
    r"""Context manager that selects a stream; restores the previous one on exit."""

    def __init__(self, stream: torch.Stream | None) -> None:
        self.stream = stream
        self.prev: torch.Stream | None = None
        self.prev_device = -1

    def __enter__(self) -> torch.Stream | None:
        if self.stream is None:
            return None
        self.prev_device = torch.neuron.current_device()
        torch.neuron.set_device(self.stream.device_index)
        self.prev = torch.accelerator.current_stream(self.stream.device_index)
        torch.accelerator.set_stream(self.stream)
        return self.stream

    def __exit__(self, *args: object) -> None:
        if self.stream is None:
            return
        torch.accelerator.set_stream(self.prev)
        torch.neuron.set_device(self.prev_device)


def stream(stream: torch.Stream | None) -> StreamContext:
    r"""Context manager that makes ``stream`` current (``with torch.neuron.stream(s): ...``)."""
    return StreamContext(stream)
