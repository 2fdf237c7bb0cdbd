"""Executables write results into device outputs: in place after the first call, else copied."""
import torch

import torch_neuronx  # noqa: F401


def several_outputs(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, ...]:
    y = torch.tanh(x @ w) * 2
    z = (y + 1).relu()
    return y, y.t(), z, z[1:], (x * 3).sum(0), y @ z.t()


def test_repeated_calls_with_views_and_fresh_buffers_match_cpu():
    torch._dynamo.reset()
    compiled = torch.compile(several_outputs, backend="neuron")
    for seed in range(3):  # the first call learns the output allocations; later calls use them
        gen = torch.Generator().manual_seed(seed)
        x, w = torch.randn(8, 16, generator=gen), torch.randn(16, 8, generator=gen)
        results = compiled(x.to("neuron"), w.to("neuron"))
        for got, want in zip(results, several_outputs(x, w)):
            assert got.device.type == "neuron" and got.stride() == want.stride()
            torch.testing.assert_close(got.cpu(), want, rtol=1e-5, atol=1e-5)
    torch._dynamo.reset()


def _shared_memory(outputs: tuple[torch.Tensor, ...]) -> list[tuple[int, int]]:
    storages = [t.untyped_storage().data_ptr() for t in outputs]
    return [(i, j) for i in range(len(storages)) for j in range(i) if storages[i] == storages[j]]


def views_of_inputs_and_buffers(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, ...]:
    h = torch.relu(x @ w)
    flat = h.reshape(-1)
    return x.t(), w[1:], h, flat[4:20].view(4, 4), h.t(), (h * 2).transpose(0, 1), x.sum()


def test_outputs_alias_as_on_cpu_inductor():
    """Outputs computed in one buffer (or viewing an input) share memory exactly as CPU
    Inductor's do, from the first call (copied) through later ones (computed in place)."""
    torch._dynamo.reset()
    neuron = torch.compile(views_of_inputs_and_buffers, backend="neuron")
    inductor = torch.compile(views_of_inputs_and_buffers, backend="inductor")
    for seed in range(3):
        gen = torch.Generator().manual_seed(seed)
        x, w = torch.randn(8, 16, generator=gen), torch.randn(16, 8, generator=gen)
        want = inductor(x, w)
        got = neuron(x.to("neuron"), w.to("neuron"))
        assert _shared_memory(got) == _shared_memory(want)
        for g, e in zip(got, want):
            assert g.device.type == "neuron" and g.shape == e.shape and g.stride() == e.stride()
            assert g.storage_offset() == e.storage_offset()
            torch.testing.assert_close(g.cpu(), e, rtol=1e-5, atol=1e-5)
    torch._dynamo.reset()


def test_saved_views_give_cpu_gradients_over_steps():
    """Saved activations that are views of one buffer (attention-shaped reshapes and transposes)
    feed the backward correctly on every call, not only the first."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    layer = torch.nn.MultiheadAttention(16, 4, batch_first=True)
    cpu_layer, neuron_layer = layer, torch.nn.MultiheadAttention(16, 4, batch_first=True).to("neuron")
    neuron_layer.load_state_dict(cpu_layer.state_dict())
    compiled = torch.compile(neuron_layer, backend="neuron")
    for seed in range(3):
        x = torch.randn(2, 5, 16, generator=torch.Generator().manual_seed(seed))
        want, _ = cpu_layer(x, x, x)
        got, _ = compiled(*(x.to("neuron"),) * 3)
        want.square().sum().backward()
        got.square().sum().backward()
        torch.testing.assert_close(got.cpu(), want, rtol=1e-5, atol=1e-5)
        for p_cpu, p_neuron in zip(cpu_layer.parameters(), neuron_layer.parameters()):
            torch.testing.assert_close(p_neuron.grad.cpu(), p_cpu.grad, rtol=1e-4, atol=1e-5)
    torch._dynamo.reset()


def test_backward_hands_gradients_to_autograd_without_copies():
    """Autograd steals a gradient that nothing else references (CPU Inductor's gradients are
    stolen); a queued kernel holding the output tensors would make it clone each one."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.LayerNorm(16), torch.nn.Linear(16, 4))
    reference = torch.nn.Sequential(*(torch.nn.Linear(16, 16), torch.nn.LayerNorm(16), torch.nn.Linear(16, 4)))
    reference.load_state_dict(model.state_dict())
    model.to("neuron")
    compiled = torch.compile(model, backend="neuron")
    x = torch.randn(8, 16)
    for _ in range(2):  # the second call runs the learned plan
        model.zero_grad()
        loss = compiled(x.to("neuron")).square().sum()
        torch_neuronx.clear_op_tracking()
        loss.backward()
        torch.neuron.synchronize()
        copies = {op: n for op, n in torch_neuronx.get_executed_ops().items() if "copy" in op or "clone" in op}
        assert copies == {}
    reference(x).square().sum().backward()
    for p, r in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad.cpu(), r.grad, rtol=1e-5, atol=1e-5)
    torch._dynamo.reset()


def test_an_executable_pickles_as_its_cache_entry_and_loads_for_another_graph(tmp_path, monkeypatch):
    """What AOTAutograd's cache keeps of an executable, and how a later process gets it back."""
    import pickle

    from torch.fx.experimental.proxy_tensor import make_fx

    from torch_neuronx.compile.backend import _compile_graph
    monkeypatch.setenv("TORCH_NEURONX_NEFF_CACHE_DIR", str(tmp_path))
    x = torch.randn(8, 16)
    gm = make_fx(lambda a: (a.sin() * 2, a.t()), tracing_mode="fake")(x)
    fake_inputs = [n.meta["val"] for n in gm.graph.nodes if n.op == "placeholder"]
    compiled = _compile_graph(gm, fake_inputs, graph_id=900, kind="inference")
    loaded = pickle.loads(pickle.dumps(compiled))
    assert loaded.digest == compiled.digest and not hasattr(loaded, "compiled")
    assert loaded != compiled and len({compiled, loaded}) == 2  # identity, hashable
    loaded.post_compile([], None, {"compile_region_name": "neuron::compiled_graph_901"})
    assert loaded.name == "neuron::compiled_graph_901_inference"
    for executable in (compiled, loaded):
        y, t = executable([x.to("neuron")])
        torch.testing.assert_close(y.cpu(), x.sin() * 2)
        assert t.stride() == x.t().stride() and torch.equal(t.cpu(), x.t())


def test_training_steps_reuse_the_same_device_memory():
    """From step to step a compiled training loop gets the same blocks for its activations and
    gradients (the allocator's lowest-address reuse), so each graph's host aliases stay valid."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.LayerNorm(32), torch.nn.Tanh(),
                                torch.nn.Linear(32, 4)).to("neuron")
    compiled = torch.compile(model, backend="neuron")
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randn(8, 16, device="neuron")
    addresses = []
    for _ in range(4):
        optimizer.zero_grad()
        out = compiled(x)
        out.square().mean().backward()
        optimizer.step()
        addresses.append([out.data_ptr()] + [p.grad.data_ptr() for p in model.parameters()])
        del out  # as a training loop drops a step's tensors before the next
    assert addresses[1] == addresses[2] == addresses[3]
    torch._dynamo.reset()


def test_two_threads_making_the_first_call_at_once_both_get_correct_outputs():
    """The first call learns the graph's output plan; a second thread arriving meanwhile waits for
    it and then runs the planned call, instead of learning it a second time."""
    import threading
    torch._dynamo.reset()
    compiled = torch.compile(several_outputs, backend="neuron")
    gen = torch.Generator().manual_seed(0)
    x, w = torch.randn(8, 16, generator=gen), torch.randn(16, 8, generator=gen)
    inputs = (x.to("neuron"), w.to("neuron"))
    start = threading.Barrier(2)
    results: list = [None, None]

    def call(i: int) -> None:
        start.wait()
        results[i] = [t.cpu() for t in compiled(*inputs)]

    threads = [threading.Thread(target=call, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    for got in results:
        assert got is not None
        for g, want in zip(got, several_outputs(x, w)):
            torch.testing.assert_close(g, want, rtol=1e-5, atol=1e-5)
    torch._dynamo.reset()


def test_a_cpu_graph_of_the_same_code_keeps_inductors_allocator():
    """The device runs its own module (the generated source with the device's allocator line):
    a CPU torch.compile of the same function in this process gets Inductor's module untouched
    (overwriting the loaded module's globals changed the CPU module that Inductor's module cache
    shares between graphs of the same code)."""
    from torch._inductor.codecache import PyCodeCache

    from torch_neuronx.compile.generated_module import _DEVICE_ALLOCATOR

    def f(x: torch.Tensor) -> torch.Tensor:
        return (x * 2).sin() + x

    torch._dynamo.reset()
    x = torch.randn(64)
    device_out = torch.compile(f, backend="neuron")(x.to("neuron"))
    torch._dynamo.reset()
    cpu_out = torch.compile(f, backend="inductor")(x)
    torch._dynamo.reset()
    torch.testing.assert_close(device_out.cpu(), cpu_out, rtol=0, atol=0)  # the same C++ kernel
    ours = torch_neuronx._C._graph_allocate
    modules = [m for m in PyCodeCache.modules if hasattr(m, "empty_strided_cpu")]
    assert any(m.empty_strided_cpu is ours for m in modules)
    assert any(m.empty_strided_cpu is not ours for m in modules)  # the CPU graph's
    for m in modules:
        with open(m.__file__) as source:
            assert (m.empty_strided_cpu is ours) == (_DEVICE_ALLOCATOR in source.read()), m.__file__
