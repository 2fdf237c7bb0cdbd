"""Device memory of the simulated cores: the torch.cuda memory API, exact
statistics, out-of-memory errors and per-core isolation."""
from __future__ import annotations

import gc
import re

import pytest
import torch

import torch_neuronx
from helpers import held_queue, run_py
from torch_neuronx.runtime import set_hbm_capacity

GiB = 1 << 30
MiB = 1 << 20
DEFAULT_CAPACITY = 24 * GiB


def settle(device=None):
    """Finish queued work so that kernels release the tensors they hold."""
    torch.neuron.synchronize(device)


def rounded(nbytes: int) -> int:
    return (nbytes + 511) // 512 * 512


@pytest.fixture(autouse=True)
def exact_accounting():
    """Collect garbage of earlier tests (cycles may hold device tensors) and keep the cyclic
    collector from freeing device memory in the middle of a measurement."""
    gc.collect()
    for i in range(torch.neuron.device_count()):
        torch.neuron.synchronize(i)
    gc.disable()
    yield
    gc.enable()


@pytest.fixture
def small_capacity():
    """Give neuron:1 a 64 MiB capacity; restore the default 24 GiB afterwards."""
    settle(1)
    torch.neuron.empty_cache()
    set_hbm_capacity(64 * MiB, 1)
    yield 1
    settle(1)
    set_hbm_capacity(DEFAULT_CAPACITY, 1)
    torch.neuron.empty_cache()


@pytest.mark.parametrize("numel,dtype", [(1000, torch.float32), (1, torch.float32), (128, torch.float32),
                                         (1 << 20, torch.float32), (777, torch.bfloat16), (3, torch.int64)])
def test_memory_allocated_is_exact(numel, dtype):
    dev = "neuron:0"
    settle(dev)
    base = torch.neuron.memory_allocated(dev)
    t = torch.empty(numel, dtype=dtype, device=dev)
    nbytes = numel * t.element_size()
    settle(dev)
    assert torch.neuron.memory_allocated(dev) - base == rounded(nbytes)
    # computing a result of the same size allocates one more block of that size
    u = t.zero_() + 1
    settle(dev)
    assert torch.neuron.memory_allocated(dev) - base == 2 * rounded(nbytes)
    del t
    settle(dev)
    assert torch.neuron.memory_allocated(dev) - base == rounded(nbytes)
    del u
    settle(dev)
    assert torch.neuron.memory_allocated(dev) == base


def test_memory_functions_match_torch_accelerator_and_stats():
    dev = 0
    keep = torch.randn(4096, device="neuron:0")
    settle(dev)
    stats = torch.neuron.memory_stats(dev)
    for key in ("allocated_bytes.all.current", "allocated_bytes.all.peak", "allocated_bytes.all.allocated",
                "allocated_bytes.all.freed", "reserved_bytes.all.current", "reserved_bytes.all.peak",
                "active_bytes.all.current", "requested_bytes.all.current", "allocation.all.current",
                "segment.all.current", "num_ooms", "num_alloc_retries", "num_device_alloc",
                "num_device_free"):
        assert key in stats, key
    assert torch.neuron.memory_allocated(dev) == stats["allocated_bytes.all.current"]
    assert torch.neuron.memory_reserved(dev) == stats["reserved_bytes.all.current"]
    assert torch.neuron.max_memory_allocated(dev) == stats["allocated_bytes.all.peak"]
    assert torch.neuron.max_memory_reserved(dev) == stats["reserved_bytes.all.peak"]
    assert torch.accelerator.memory_allocated(dev) == torch.neuron.memory_allocated(dev)
    assert torch.accelerator.memory_reserved(dev) == torch.neuron.memory_reserved(dev)
    assert torch.accelerator.max_memory_allocated(dev) == torch.neuron.max_memory_allocated(dev)
    assert torch_neuronx.memory_allocated(dev) == torch.neuron.memory_allocated(dev)
    assert torch_neuronx.memory_stats(dev)["allocated_bytes.all.current"] == stats["allocated_bytes.all.current"]
    # device given as str / torch.device, and the current device by default
    assert torch.neuron.memory_allocated("neuron:0") == torch.neuron.memory_allocated(torch.device("neuron", 0))
    with torch.neuron.device(0):
        assert torch.neuron.memory_allocated() == torch.neuron.memory_allocated(0)
    assert torch.neuron.memory_reserved(dev) >= torch.neuron.memory_allocated(dev) >= 4096 * 4
    assert stats["requested_bytes.all.current"] <= stats["allocated_bytes.all.current"]
    assert stats["allocated_bytes.all.allocated"] - stats["allocated_bytes.all.freed"] == \
        stats["allocated_bytes.all.current"]
    summary = torch.neuron.memory_summary(dev)
    assert "neuron:0" in summary and "Allocated memory" in summary and "num_ooms" in summary
    del keep


def test_peak_tracking_and_reset():
    dev = 2
    settle(dev)
    torch.neuron.reset_peak_memory_stats(dev)
    base = torch.neuron.memory_allocated(dev)
    assert torch.neuron.max_memory_allocated(dev) == base
    big = torch.empty(4 * MiB, dtype=torch.uint8, device="neuron:2")
    small = torch.empty(1000, dtype=torch.uint8, device="neuron:2")
    del big
    settle(dev)
    assert torch.neuron.memory_allocated(dev) == base + 1024
    assert torch.neuron.max_memory_allocated(dev) == base + 4 * MiB + 1024
    assert torch.neuron.max_memory_reserved(dev) >= base + 4 * MiB + 1024
    torch.neuron.reset_peak_memory_stats(dev)
    assert torch.neuron.max_memory_allocated(dev) == base + 1024
    assert torch.accelerator.max_memory_allocated(dev) == base + 1024
    del small


def test_reset_accumulated_memory_stats():
    dev = 2
    x = torch.ones(100, device="neuron:2")
    settle(dev)
    torch.neuron.reset_accumulated_memory_stats(dev)
    s = torch.neuron.memory_stats(dev)
    assert s["allocated_bytes.all.allocated"] == 0 and s["allocated_bytes.all.freed"] == 0
    y = x + 1
    del y
    settle(dev)
    s = torch.neuron.memory_stats(dev)
    assert s["allocated_bytes.all.allocated"] == 512 and s["allocated_bytes.all.freed"] == 512


def test_empty_cache_releases_reserved():
    dev = 3
    settle(dev)
    torch.neuron.empty_cache()
    before_alloc = torch.neuron.memory_allocated(dev)
    # nothing of this test suite keeps tensors on neuron:3 between tests
    assert before_alloc == 0
    ts = [torch.empty(n, device="neuron:3") for n in (1000, 50_000, 300_000)]
    settle(dev)
    assert torch.neuron.memory_reserved(dev) >= torch.neuron.memory_allocated(dev) > 0
    del ts
    settle(dev)
    assert torch.neuron.memory_allocated(dev) == 0
    assert torch.neuron.memory_reserved(dev) > 0  # cached, not yet released
    free_before, total = torch.neuron.mem_get_info(dev)
    torch.neuron.empty_cache()
    assert torch.neuron.memory_reserved(dev) == 0
    assert torch.accelerator.memory_reserved(dev) == 0
    free_after, total2 = torch.neuron.mem_get_info(dev)
    assert total == total2 == DEFAULT_CAPACITY
    assert free_after == total > free_before


def test_empty_cache_keeps_live_blocks():
    dev = 0
    keep = torch.empty(10_000, device="neuron:0")
    tmp = torch.empty(20_000, device="neuron:0")
    del tmp
    settle(dev)
    torch.neuron.empty_cache()
    # every cached block went back: what stays reserved is exactly what tensors occupy
    assert torch.neuron.memory_reserved(dev) == torch.neuron.memory_allocated(dev)
    assert keep.fill_(2.0).sum().item() == 20_000.0


def test_mem_get_info():
    for dev in range(torch.neuron.device_count()):
        free, total = torch.neuron.mem_get_info(dev)
        assert total == DEFAULT_CAPACITY
        assert free == total - torch.neuron.memory_reserved(dev)


def test_freed_block_is_reused():
    dev = 2
    settle(dev)
    a = torch.empty(256 * 1024, device="neuron:2")
    settle(dev)
    reserved = torch.neuron.memory_reserved(dev)
    n_alloc = torch.neuron.memory_stats(dev)["num_device_alloc"]
    del a
    settle(dev)
    b = torch.empty(256 * 1024, device="neuron:2")
    settle(dev)
    assert torch.neuron.memory_reserved(dev) == reserved
    assert torch.neuron.memory_stats(dev)["num_device_alloc"] == n_alloc
    del b


def test_a_repeated_allocation_pattern_gets_the_same_blocks():
    """Among free blocks of one size the lowest address is taken (as the CUDA caching allocator
    orders them), so a step that frees and allocates the same way gets the same memory every
    time — whatever the order tensors were freed in."""
    dev = 2
    settle(dev)
    blocks = [torch.empty(4096, device="neuron:2") for _ in range(4)]
    rounds = []
    for _ in range(3):
        for i in (1, 3, 0, 2):  # freed in another order than allocated
            blocks[i] = None
        blocks = [torch.empty(4096, device="neuron:2") for _ in range(4)]
        rounds.append([b.data_ptr() for b in blocks])
    assert rounds[0] == rounds[1] == rounds[2]
    assert rounds[0] == sorted(rounds[0])


# ------------------------------------------------------------------------ out of memory

def test_oom_error_message_and_recovery(small_capacity):
    dev = small_capacity
    settle(dev)
    assert torch.neuron.mem_get_info(dev)[1] == 64 * MiB
    keep = torch.ones(1000, device="neuron:1")
    settle(dev)
    allocated = torch.neuron.memory_allocated(dev)
    reserved = torch.neuron.memory_reserved(dev)
    ooms = torch.neuron.memory_stats(dev)["num_ooms"]
    with pytest.raises(torch.OutOfMemoryError) as info:
        torch.empty(100 * MiB, dtype=torch.uint8, device="neuron:1")
    msg = str(info.value)
    assert "neuron:1" in msg
    assert "104857600" in msg or "100.00 MiB" in msg
    assert re.search(r"allocated", msg) and re.search(r"reserved", msg)
    assert "capacity 64.00 MiB" in msg
    # also catchable as the generic class torch.cuda code uses
    assert isinstance(info.value, RuntimeError)
    assert torch.cuda.OutOfMemoryError is torch.OutOfMemoryError
    settle(dev)
    stats = torch.neuron.memory_stats(dev)
    assert stats["num_ooms"] == ooms + 1
    assert torch.neuron.memory_allocated(dev) == allocated
    assert torch.neuron.memory_reserved(dev) <= max(reserved, allocated) + 0  # nothing new held
    # the device still works
    x = torch.randn(64, 32)
    w = torch.randn(32, 16)
    out = (x.to("neuron:1") @ w.to("neuron:1")).relu()
    torch.testing.assert_close(out.cpu(), (x @ w).relu())
    assert keep.sum().item() == 1000.0


def test_oom_counts_reserved_and_cache_is_released_on_retry(small_capacity):
    dev = small_capacity
    a = torch.empty(40 * MiB, dtype=torch.uint8, device="neuron:1")
    with pytest.raises(torch.OutOfMemoryError, match="neuron:1"):
        torch.empty(40 * MiB, dtype=torch.uint8, device="neuron:1")
    del a
    settle(dev)
    # 40 MiB is cached (too large to serve 25 MiB); 25 MiB does not fit beside it, so the
    # allocator releases its cache and retries
    retries = torch.neuron.memory_stats(dev)["num_alloc_retries"]
    assert torch.neuron.memory_reserved(dev) >= 40 * MiB
    b = torch.empty(25 * MiB, dtype=torch.uint8, device="neuron:1")
    settle(dev)
    assert torch.neuron.memory_stats(dev)["num_alloc_retries"] == retries + 1
    assert torch.neuron.memory_reserved(dev) == torch.neuron.memory_allocated(dev) < 64 * MiB
    del b


def test_oom_inside_an_operation(small_capacity):
    dev = small_capacity
    x = torch.ones(10 * MiB, device="neuron:1")  # 40 MiB
    settle(dev)
    allocated = torch.neuron.memory_allocated(dev)
    with pytest.raises(torch.OutOfMemoryError, match="neuron:1"):
        x * 2  # the 40 MiB result does not fit
    settle(dev)
    assert torch.neuron.memory_allocated(dev) == allocated
    x.mul_(3)  # in place needs no new memory
    assert x[:4].cpu().tolist() == [3.0] * 4
    del x


def test_oom_is_per_device(small_capacity):
    with pytest.raises(torch.OutOfMemoryError, match="neuron:1"):
        torch.empty(100 * MiB, dtype=torch.uint8, device="neuron:1")
    ooms2 = torch.neuron.memory_stats(2).get("num_ooms", 0)
    # the same request fits on a core with the default capacity
    t = torch.empty(100 * MiB, dtype=torch.uint8, device="neuron:2")
    assert torch.neuron.mem_get_info(2)[1] == DEFAULT_CAPACITY
    assert torch.neuron.memory_stats(2)["num_ooms"] == ooms2
    del t
    settle(2)
    torch.neuron.empty_cache()


def test_capacity_restored_by_fixture():
    assert torch.neuron.mem_get_info(1)[1] == DEFAULT_CAPACITY


def test_allocations_on_one_core_do_not_touch_another():
    settle(0)
    settle(1)
    s0 = torch.neuron.memory_stats(0)
    a1 = torch.neuron.memory_allocated(1)
    t = torch.randn(123_456, device="neuron:1")
    u = t * 2
    settle(1)
    s0_after = torch.neuron.memory_stats(0)
    for key in ("allocated_bytes.all.current", "allocated_bytes.all.allocated", "reserved_bytes.all.current",
                "allocation.all.allocated", "num_device_alloc"):
        assert s0_after[key] == s0[key], key
    assert torch.neuron.memory_allocated(1) - a1 == 2 * rounded(123_456 * 4)
    assert u.device == torch.device("neuron:1")
    del t, u


def test_cross_core_copy_accounts_on_destination():
    settle(0)
    settle(3)
    a0, a3 = torch.neuron.memory_allocated(0), torch.neuron.memory_allocated(3)
    src = torch.arange(2048, dtype=torch.float32, device="neuron:0")
    dst = src.to("neuron:3")
    settle(0)
    settle(3)
    assert torch.neuron.memory_allocated(0) - a0 == 8192
    assert torch.neuron.memory_allocated(3) - a3 == 8192
    assert torch.equal(dst.cpu(), torch.arange(2048, dtype=torch.float32))
    del src, dst


# ---------------------------------------------------------------------------- leaks

def _tiny_training(device: str, steps: int, sync_every_step: bool):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(8, 16).to(device)
    y = torch.randn(8, 4).to(device)

    def step():
        opt.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
        return loss
    return model, step


def test_no_leak_over_1000_training_steps():
    dev = 0
    model, step = _tiny_training("neuron:0", 1000, True)
    step()
    settle(dev)
    after_first = torch.neuron.memory_allocated(dev)
    for _ in range(20):  # warm-up: every signature built, every block size cached
        step().item()
    settle(dev)
    torch.neuron.empty_cache()  # forget blocks cached by earlier tests
    vol0 = torch.neuron.memory_stats(dev)["allocated_bytes.all.allocated"]
    step().item()
    per_step_volume = torch.neuron.memory_stats(dev)["allocated_bytes.all.allocated"] - vol0
    assert per_step_volume > 0
    losses = []
    for i in range(1000):
        losses.append(step().item())  # the usual logging loop: one host read per step
        if i == 499:
            settle(dev)
            assert torch.neuron.memory_allocated(dev) == after_first
    settle(dev)
    assert torch.neuron.memory_allocated(dev) == after_first
    # With one step in flight at most, the cache never needs more than what one step allocates
    # on top of the persistent tensors; a leak of one block per step would exceed it.
    assert torch.neuron.memory_reserved(dev) <= after_first + per_step_volume
    assert losses[-1] < losses[0]


def test_async_training_frees_everything_after_synchronize():
    dev = 0
    model, step = _tiny_training("neuron:0", 300, False)
    step()
    settle(dev)
    after_first = torch.neuron.memory_allocated(dev)
    for _ in range(300):
        step()  # no host reads: everything is queued
    settle(dev)
    assert torch.neuron.memory_allocated(dev) == after_first


def test_queue_depth_bounds_memory_held_by_queued_kernels():
    # Queued kernels keep their (already dropped) results alive until they run; the queue
    # depth (TORCH_NEURONX_SIM_CONF max_inflight_kernels, default 256) makes the host wait instead of
    # running ahead without limit.
    dev = 3
    x = torch.randn(512, 512, device="neuron:3")
    w = torch.randn(512, 512, device="neuron:3")
    y = x @ w  # build the kernel
    settle(dev)
    torch.neuron.reset_peak_memory_stats(dev)
    base = torch.neuron.memory_allocated(dev)
    for _ in range(600):
        y = x @ w  # each result (1 MiB) replaces the previous one
    settle(dev)
    peak = torch.neuron.max_memory_allocated(dev) - base
    del x, w, y
    settle(dev)
    torch.neuron.empty_cache()
    depth = torch_neuronx.runtime.current_topology().max_inflight
    assert peak <= (depth + 8) * MiB, f"peak {peak / MiB:.0f} MiB for 600 dropped 1 MiB results"


def test_pinned_host_memory_and_non_blocking_copies():
    x = torch.randn(64, 8)
    pinned = x.pin_memory()
    assert pinned.is_pinned() and not x.is_pinned()
    assert torch.equal(pinned, x)
    on_device = pinned.to("neuron", non_blocking=True)
    back = on_device.to("cpu", non_blocking=True)
    torch.neuron.synchronize()
    assert torch.equal(back, x)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x), batch_size=16, pin_memory=True)
    assert all(batch.is_pinned() for (batch,) in loader)


def test_the_device_has_a_host_allocator():
    """torch.accelerator.empty_host_cache() (vLLM calls it at shutdown) reaches the device's host
    allocator, the pinned one: it caches nothing, so pinned tensors keep their data. In a process
    of its own: without a host allocator the call crashed the interpreter."""
    done = run_py("""
        import torch, torch_neuronx
        x = torch.arange(6.0, device="neuron")
        pinned = x.to("cpu", non_blocking=True)
        torch.neuron.synchronize()
        torch.accelerator.empty_host_cache()
        print(pinned.is_pinned(), pinned.tolist() == torch.arange(6.0).tolist(), (x + 1).cpu().tolist())
    """)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "True", "[1.0,", "2.0,", "3.0,", "4.0,", "5.0,", "6.0]"]


def test_an_empty_pinned_tensor_is_freed_cleanly():
    """A zero-byte pinned block has no pointer (vLLM makes empty pinned buffers): freeing it left
    the host statistics alone and crashed the process. In a process of its own for that reason."""
    done = run_py("""
        import torch, torch_neuronx
        torch.ones(1, device="neuron")
        empty = torch.empty(0, pin_memory=True)
        some = torch.empty(4, pin_memory=True)
        print(empty.is_pinned(), some.is_pinned())
        del empty, some
        print("freed")
    """)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "True", "freed"]


def test_non_blocking_copy_to_pinned_memory_returns_before_the_queue_drains():
    """As cudaMemcpyAsync into page-locked memory: the copy is queued on the current stream, the
    caller does not wait, and the data is valid once the stream is synchronized (a later write to
    the source on the same stream comes after the copy)."""
    x_cpu = torch.arange(1000.0)
    x = x_cpu.to("neuron:1")
    x.add_(0)  # builds add_'s kernel: a signature's first launch runs synchronously
    torch.neuron.synchronize(1)
    with held_queue(1) as held, torch.neuron.device(1):  # a blocking copy would wait for the gate
        y = x.to("cpu", non_blocking=True)  # torch allocates the destination pinned, as for CUDA
        copied = torch.neuron.Event()
        copied.record()
        assert y.is_pinned() and not copied.query()  # returned while the queue is held
        x.add_(1)  # after the copy on the same stream
        assert not held.released_by_timer
    assert torch.equal(y, x_cpu) and torch.equal(x.cpu(), x_cpu + 1)
    pageable = torch.empty(1000)
    pageable.copy_(x, non_blocking=True)  # into pageable memory: blocking, as on CUDA
    assert torch.equal(pageable, x_cpu + 1)


def test_statistics_split_small_and_large_pools_as_cuda():
    """Blocks of at most 1 MiB are the small pool, larger ones the large pool; "all" is their sum."""
    torch.neuron.synchronize(2)
    before = torch.neuron.memory_stats(2)
    small = torch.empty(1000, device="neuron:2")          # 4,000 bytes -> a 4,096-byte block
    large = torch.empty(1 << 20, device="neuron:2")       # 4 MiB
    after = torch.neuron.memory_stats(2)

    def grew(key: str) -> int:
        return after[key] - before[key]
    assert grew("allocated_bytes.small_pool.current") == 4096
    assert grew("allocated_bytes.large_pool.current") == 4 << 20
    assert grew("allocated_bytes.all.current") == 4096 + (4 << 20)
    assert grew("allocation.small_pool.current") == 1 and grew("allocation.large_pool.current") == 1
    for stat in ("allocated_bytes", "reserved_bytes", "active_bytes", "requested_bytes", "allocation", "segment"):
        assert after[f"{stat}.all.current"] == (after[f"{stat}.small_pool.current"]
                                               + after[f"{stat}.large_pool.current"]), stat
    del small, large


def built_kernels(x: torch.Tensor) -> None:
    """Run once the operators the tests below queue: a signature's first launch waits for the core."""
    (x * 2).sum()
    torch.empty_like(x).fill_(7.0)
    torch.neuron.synchronize(x.device)


BLOCK = rounded(4096 * 4)


def test_del_lowers_memory_allocated_at_once_and_the_same_stream_reuses_the_block():
    """As CUDA's caching allocator: a tensor freed while queued kernels still read it leaves the
    statistics at once, and its stream may take the block at once (its later kernels run after
    the ones queued before the free)."""
    x_cpu = torch.randn(4096)
    x = x_cpu.to("neuron:2")
    built_kernels(x)
    with held_queue(2) as held:
        y = x * 2  # queued behind the gate: reads x when it runs
        block, allocated = x.data_ptr(), torch.neuron.memory_allocated(2)
        del x
        assert torch.neuron.memory_allocated(2) == allocated - BLOCK
        z = torch.empty(4096, device="neuron:2")
        assert z.data_ptr() == block  # the same stream takes the block at once
        z.fill_(7.0)  # queued after the kernel that reads x
        assert not held.released_by_timer
    torch.testing.assert_close(y.cpu(), x_cpu * 2, rtol=0, atol=0)  # the CPU's kernel: exact
    assert torch.equal(z.cpu(), torch.full((4096,), 7.0))


def test_a_block_freed_behind_queued_kernels_waits_for_them_on_other_streams():
    x_cpu = torch.randn(4096)
    x = x_cpu.to("neuron:2")
    built_kernels(x)
    side = torch.neuron.Stream(2)
    with held_queue(2):
        y = x * 2
        block = x.data_ptr()
        del x
        with torch.neuron.stream(side):
            z = torch.empty(4096, device="neuron:2")
            assert z.data_ptr() != block  # another stream's kernels might run before y's
            z.fill_(7.0)
    torch.testing.assert_close(y.cpu(), x_cpu * 2, rtol=0, atol=0)
    assert torch.equal(z.cpu(), torch.full((4096,), 7.0))


def test_a_block_used_on_another_stream_waits_for_that_stream_as_after_record_stream():
    """Launches note the streams that use a block (CUDA needs record_stream for that): a block
    read by a queued kernel of a side stream is not handed to its own stream until that ran."""
    x_cpu = torch.randn(4096)
    x = x_cpu.to("neuron:2")
    built_kernels(x)
    side = torch.neuron.Stream(2)
    torch.neuron.synchronize(2)
    with held_queue(2):
        with torch.neuron.stream(side):
            y = x * 2  # the side stream reads x, allocated on the default stream
        block = x.data_ptr()
        del x
        z = torch.empty(4096, device="neuron:2")
        assert z.data_ptr() != block
        z.fill_(7.0)
    torch.testing.assert_close(y.cpu(), x_cpu * 2, rtol=0, atol=0)
    assert torch.equal(z.cpu(), torch.full((4096,), 7.0))


def test_memory_queued_kernels_still_use_is_waited_for_instead_of_out_of_memory(small_capacity):
    dev = small_capacity
    x = torch.ones(10 * MiB, device=f"neuron:{dev}")  # 40 of the 64 MiB
    x.sum()  # built: a signature's first launch waits for the core
    torch.neuron.synchronize(dev)
    side = torch.neuron.Stream(dev)
    ooms = torch.neuron.memory_stats(dev).get("num_ooms", 0)
    with held_queue(dev, timeout=0.5) as held:
        with torch.neuron.stream(side):
            total = x.sum()  # reads x on the side stream: x's block waits for it
        del x
        y = torch.empty(10 * MiB, device=f"neuron:{dev}")  # fits once the sum has run
        assert held.released_by_timer  # the allocation waited for the queue
    assert torch.neuron.memory_stats(dev).get("num_ooms", 0) == ooms
    assert total.item() == 10 * MiB
    assert y.numel() == 10 * MiB


def test_empty_cache_releases_blocks_freed_behind_queued_kernels():
    x = torch.randn(1 << 20, device="neuron:2")  # a 4 MiB block
    built_kernels(x)
    torch.neuron.empty_cache()
    with held_queue(2, timeout=0.5) as held:
        y = x.sum()
        reserved = torch.neuron.memory_reserved(2)
        del x
        torch.neuron.empty_cache()  # waits for the sum, then releases x's block
        assert held.released_by_timer
        assert torch.neuron.memory_reserved(2) == reserved - (4 << 20)
    del y
