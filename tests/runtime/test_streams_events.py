"""Streams and events with torch.cuda semantics, through torch_neuronx, torch.neuron,
torch.Stream / torch.Event and torch.accelerator."""
from __future__ import annotations

import time

import pytest
import torch

import torch_neuronx


@pytest.fixture(autouse=True)
def restore_streams():
    dev = torch.neuron.current_device()
    yield
    for i in range(torch.neuron.device_count()):
        torch.accelerator.set_stream(torch.neuron.default_stream(i))
    torch.neuron.set_device(dev)
    torch.neuron.synchronize()


def test_stream_classes():
    s = torch_neuronx.Stream()
    assert torch_neuronx.Stream is torch.neuron.Stream
    assert isinstance(s, torch.Stream)
    assert s.device == torch.device("neuron:0")
    assert s.stream_id != 0
    s2 = torch.neuron.Stream()
    assert s2.stream_id != s.stream_id and s2 != s
    assert torch_neuronx.Event is torch.neuron.Event
    assert isinstance(torch.neuron.Event(), torch.Event)
    assert torch.neuron.Stream(device=1).device == torch.device("neuron:1")
    assert torch.neuron.Stream(device="neuron:2").device_index == 2
    assert torch.Stream(device="neuron:0").device == torch.device("neuron:0")


def test_torch_stream_without_index_uses_current_device():
    with torch.neuron.device(1):
        s = torch.Stream(device="neuron")
    assert s.device == torch.device("neuron:1")


def test_default_and_current_stream():
    d = torch.neuron.default_stream()
    assert d.stream_id == 0
    assert torch.neuron.current_stream() == d
    assert torch.neuron.default_stream(2).device == torch.device("neuron:2")
    assert torch.neuron.default_stream(2).stream_id == 0
    assert torch.accelerator.current_stream() == d


def test_stream_context_manager():
    s = torch.neuron.Stream()
    x_cpu = torch.randn(300, 300)
    x = x_cpu.to("neuron")
    with torch.neuron.stream(s) as entered:
        assert entered is s
        assert torch.neuron.current_stream() == s
        assert torch.accelerator.current_stream() == s
        y = x @ x + 1
        ev = torch.neuron.Event()
        ev.record()  # on the current stream, s
    assert torch.neuron.current_stream() == torch.neuron.default_stream()
    torch.neuron.current_stream().wait_event(ev)
    torch.testing.assert_close((y * 2).cpu(), (x_cpu @ x_cpu + 1) * 2, rtol=0, atol=0)
    with torch.neuron.stream(None):  # no-op, like torch.cuda.stream(None)
        assert torch.neuron.current_stream().stream_id == 0


def test_stream_on_other_device_switches_device_in_context():
    s = torch.neuron.Stream(device=1)
    assert torch.neuron.current_device() == 0
    with torch.neuron.stream(s):
        assert torch.neuron.current_device() == 1
        assert torch.neuron.current_stream() == s
        t = torch.ones(4, device="neuron") * 3
    assert torch.neuron.current_device() == 0
    assert t.device == torch.device("neuron:1")
    s.synchronize()
    assert t.cpu().tolist() == [3.0] * 4
    assert torch.neuron.current_stream(1).stream_id == 0


def test_producer_consumer_with_events():
    a_stream, b_stream = torch.neuron.Stream(), torch.neuron.Stream()
    x_cpu = torch.randn(512, 512)
    x = x_cpu.to("neuron")
    torch.neuron.synchronize()  # x is ready for both streams
    with torch.neuron.stream(a_stream):
        y = x * 2
        for _ in range(20):
            y = y @ torch.eye(512, device="neuron")  # keep the producer busy
        done = torch.neuron.Event()
        done.record(a_stream)
    with torch.neuron.stream(b_stream):
        b_stream.wait_event(done)
        z = y + 1
    b_stream.synchronize()
    assert done.query()
    torch.testing.assert_close(z.cpu(), x_cpu * 2 + 1, rtol=0, atol=0)


def test_wait_stream():
    producer, consumer = torch.neuron.Stream(), torch.neuron.Stream()
    x_cpu = torch.randn(400, 400)
    x = x_cpu.to("neuron")
    torch.neuron.synchronize()
    with torch.neuron.stream(producer):
        y = x
        for _ in range(10):
            y = y @ torch.eye(400, device="neuron") + 1
    consumer.wait_stream(producer)
    with torch.neuron.stream(consumer):
        z = y * 3
    consumer.synchronize()
    torch.testing.assert_close(z.cpu(), (x_cpu + 10) * 3, rtol=1e-4, atol=1e-3)


def test_default_stream_waits_on_side_stream_with_torch_event():
    s = torch.Stream(device="neuron:0")
    x_cpu = torch.randn(256, 256)
    x = x_cpu.to("neuron")
    torch.neuron.synchronize()
    e = torch.Event(device="neuron")
    with torch.neuron.stream(s):
        y = x.exp()
        for _ in range(10):
            y = y @ torch.eye(256, device="neuron")
        e.record(s)
    torch.accelerator.current_stream().wait_event(e)
    z = y.sum(0)
    torch.testing.assert_close(z.cpu(), x_cpu.exp().sum(0), rtol=1e-4, atol=1e-3)


def test_query_and_synchronize():
    s = torch.neuron.Stream()
    x = torch.randn(300, 300, device="neuron")
    e = torch.neuron.Event()
    with torch.neuron.stream(s):
        y = x
        for _ in range(5):
            y = y @ x
        s.record_event(e)
    s.synchronize()
    assert s.query() is True
    assert e.query() is True
    e.synchronize()
    torch.neuron.synchronize()
    assert torch.neuron.current_stream().query() is True
    assert torch.neuron.Event().query() is True  # never recorded: complete


def test_record_event_returns_event():
    s = torch.neuron.Stream()
    e = s.record_event()
    assert isinstance(e, torch.Event)
    e.synchronize()
    assert e.query()


def sleeping_kernel(device: int, seconds: float) -> None:
    """A kernel that takes at least `seconds` on the core (a Python kernel that sleeps)."""
    torch_neuronx._C._launch_python_kernel(device, lambda: time.sleep(seconds), "test sleep", wait=False)


@pytest.mark.parametrize("make", [lambda: torch.Event(device="neuron", enable_timing=True),
                                  lambda: torch.neuron.Event(enable_timing=True)], ids=["torch.Event", "neuron.Event"])
def test_elapsed_time_measures_the_kernels_between_the_events(make):
    """The markers are timed when the core reaches them: a 50 ms kernel between them is inside."""
    start, end = make(), make()
    start.record()
    sleeping_kernel(torch.neuron.current_device(), 0.05)
    end.record()
    end.synchronize()
    ms = start.elapsed_time(end)
    assert isinstance(ms, float) and 50.0 <= ms < 60_000.0


def test_elapsed_time_requires_timing():
    a, b = torch.Event(device="neuron"), torch.Event(device="neuron")
    a.record()
    b.record()
    b.synchronize()
    with pytest.raises((RuntimeError, ValueError), match="enable_timing"):
        a.elapsed_time(b)


@pytest.mark.parametrize("recorded", [False, True])
def test_record_stream_keeps_a_freed_block_from_other_streams_until_that_stream_ran(recorded):
    """As on CUDA: after y.record_stream(s), y's block waits for the work queued on s at the free
    before another stream gets it; without it, the stream it was allocated on takes it at once."""
    s = torch.neuron.Stream()
    x = torch.randn(1000, device="neuron")
    y = x * 2
    torch.neuron.synchronize()
    with torch.neuron.stream(s):
        sleeping_kernel(torch.neuron.current_device(), 0.2)  # s is busy when y is freed
    if recorded:
        y.record_stream(s)
    block = y.data_ptr()
    del y
    z = torch.empty(1000, device="neuron")
    assert (z.data_ptr() != block) == recorded
    s.synchronize()


def test_priorities():
    assert torch.neuron.Stream(priority=-1).priority == -1
    assert torch.neuron.Stream().priority == 0
    assert torch.neuron.Stream(priority=0).priority == 0
    assert torch.neuron.Stream.priority_range() == (0, -1)
    assert torch.neuron.default_stream().priority == 0
    hi = torch.neuron.Stream(priority=-1)
    with torch.neuron.stream(hi):
        r = torch.arange(5.0, device="neuron") * 2
    hi.synchronize()
    assert r.cpu().tolist() == [0.0, 2.0, 4.0, 6.0, 8.0]


def test_streams_come_from_a_bounded_pool_per_priority_as_on_cuda():
    """Libraries create streams per call: like CUDA's, they are 32 per device and priority,
    handed out round-robin, so a loop of Stream() does not grow what every dequeue scans."""
    normal = {torch.neuron.Stream(device=3).stream_id for _ in range(100)}
    normal |= {torch.Stream(device="neuron:3").stream_id for _ in range(100)}
    high = {torch.neuron.Stream(device=3, priority=-1).stream_id for _ in range(100)}
    assert len(normal) == 32 and len(high) == 32 and not normal & high and 0 not in normal | high
    assert {torch.neuron.Stream(device=3, priority=-1).priority for _ in range(40)} == {-1}
    assert {torch.neuron.Stream(device=3).priority for _ in range(40)} == {0}
    with torch.neuron.device(3):
        for _ in range(40):  # a reused stream keeps its order
            with torch.neuron.stream(torch.neuron.Stream()):
                x = torch.arange(4.0, device="neuron:3") + 1
            assert x.cpu().tolist() == [1.0, 2.0, 3.0, 4.0]


def test_set_stream():
    s = torch.neuron.Stream()
    torch.neuron.set_stream(s)
    assert torch.neuron.current_stream() == s
    x = torch.ones(3, device="neuron") + 1
    torch.neuron.set_stream(torch.neuron.default_stream())
    assert torch.neuron.current_stream().stream_id == 0
    s.synchronize()
    assert x.cpu().tolist() == [2.0] * 3


def test_accelerator_api():
    assert torch.accelerator.is_available()
    assert torch.accelerator.current_accelerator() == torch.device("neuron")
    assert torch.accelerator.device_count() == torch.neuron.device_count() == 4
    assert torch.accelerator.current_device_index() == torch.neuron.current_device()
    s = torch.neuron.Stream()
    torch.accelerator.set_stream(s)
    assert torch.accelerator.current_stream() == s
    assert torch.neuron.current_stream() == s
    _y = torch.randn(50, 50, device="neuron") @ torch.eye(50, device="neuron")
    torch.accelerator.set_stream(torch.neuron.default_stream())
    torch.accelerator.synchronize()
    assert s.query()
    torch.accelerator.synchronize(0)


def test_streams_on_other_cores():
    for dev in (1, 3):
        s = torch.neuron.Stream(device=dev)
        x_cpu = torch.randn(64, 64)
        x = x_cpu.to(f"neuron:{dev}")
        torch.neuron.synchronize(dev)
        with torch.neuron.stream(s):
            y = x @ x
            e = torch.neuron.Event()
            e.record()
        torch.neuron.current_stream(dev).wait_event(e)
        with torch.neuron.device(dev):
            z = y - 1
        torch.testing.assert_close(z.cpu(), x_cpu @ x_cpu - 1, rtol=0, atol=0)
        assert torch.neuron.current_stream(dev).stream_id == 0


def test_event_cannot_be_recorded_on_another_core():
    e = torch.neuron.Event()
    e.record(torch.neuron.Stream(device=0))
    with pytest.raises(RuntimeError, match="Event device"):
        e.record(torch.neuron.Stream(device=1))


def test_cross_core_event_wait():
    s0 = torch.neuron.Stream(device=0)
    x_cpu = torch.randn(256, 256)
    x = x_cpu.to("neuron:0")
    torch.neuron.synchronize(0)
    with torch.neuron.stream(s0):
        y = x @ x
        e = torch.neuron.Event()
        e.record()
    s1 = torch.neuron.Stream(device=1)
    s1.wait_event(e)  # neuron:1's stream waits for neuron:0's event
    e.synchronize()
    with torch.neuron.stream(s1):
        z = y.to("neuron:1") + 1
    s1.synchronize()
    torch.testing.assert_close(z.cpu(), x_cpu @ x_cpu + 1, rtol=0, atol=0)


def test_interprocess_event_is_refused():
    with pytest.raises(NotImplementedError):
        torch.neuron.Event(interprocess=True)
