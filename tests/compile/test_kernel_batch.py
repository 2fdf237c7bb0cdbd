"""A generated module's C++ kernels are built as one translation unit (torch_neuronx/compile/kernel_batch.py)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

import torch_neuronx  # noqa: F401
from torch_neuronx.compile import kernel_batch

COMPILED_STEP = """
import glob, os, torch, torch_neuronx

def f(x, w):
    h = torch.tanh(x @ w) * torch.sigmoid(x).sum(-1, keepdim=True)
    return (h.softmax(-1) + h.cumsum(-1)).pow(2).mean()

torch.manual_seed(0)
x, w = torch.randn(8, 16), torch.randn(16, 16, requires_grad=True)
expected = f(x, w)
expected.backward()
wn = w.detach().to("neuron").requires_grad_()
got = torch.compile(f, backend="neuron")(x.to("neuron"), wn)
got.backward()
# Inductor's fused float32 kernels reduce in another order than eager: fp32 tolerances for fused code.
torch.testing.assert_close(got.cpu(), expected, rtol=1e-4, atol=1e-5)
torch.testing.assert_close(wn.grad.cpu(), w.grad, rtol=1e-4, atol=1e-5)
cache = os.environ["TORCHINDUCTOR_CACHE_DIR"]
modules = [open(p).read() for p in glob.glob(cache + "/**/*.py", recursive=True)]
kernels = sum(m.count("async_compile.cpp_pybinding(") for m in modules if "_graph_allocate" in m)
# Kernels build as "<hash>.main.so" (the CPU ISA probes as other libraries).
print(kernels, len(glob.glob(cache + "/**/*.main.so", recursive=True)))
"""


def run_with_fresh_caches(script: str, tmp_path) -> str:
    """``script`` in a new Python process with empty compile caches under ``tmp_path``: its stdout."""
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor"),
           "TORCH_NEURONX_NEFF_CACHE_DIR": str(tmp_path / "neff")}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_a_compiled_graphs_kernels_build_as_one_library_per_module(tmp_path):
    out = run_with_fresh_caches(COMPILED_STEP, tmp_path)
    kernels, libraries = map(int, out.split()[-2:])
    # The forward's and the backward's modules: one library each, for their two kernels each.
    assert kernels == 4 and libraries == 2, out


KERNEL = """
#include <torch/csrc/inductor/cpp_prefix.h>
extern "C"  void  kernel(const float* in_ptr0, float* out_ptr0, const int64_t ks0)
{{
    for (int64_t i = 0; i < ks0; ++i) out_ptr0[i] = in_ptr0[i] {op};
}}
"""
# Valid on its own, not inside a namespace (an explicit specialization of std::hash).
NOT_NESTABLE = """
#include <torch/csrc/inductor/cpp_prefix.h>
#include <functional>
struct Marker {};
template <> struct std::hash<Marker> { size_t operator()(const Marker&) const { return 0; } };
extern "C"  void  kernel(float* out_ptr0)
{
    out_ptr0[0] = 7.0f;
}
"""
ARGTYPES = ["const float*", "float*", "const int64_t"]
VECTOR_WIDTH = """
#include <torch/csrc/inductor/cpp_prefix.h>
extern "C"  void  kernel(float* out_ptr0)
{
    out_ptr0[0] = static_cast<float>(at::vec::Vectorized<float>::size());
}
"""
# A model compiled with the user's Inductor settings (thread-local), its RMSNorm's loops vectorised.
WITH_SIMDLEN_256 = """
import torch, torch_neuronx

def f(x, w):
    return (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w).square().mean()

torch.manual_seed(0)
x, w = torch.randn(16, 520), torch.randn(520, requires_grad=True)
expected = f(x, w)
expected.backward()
wn = w.detach().to("neuron").requires_grad_()
with torch._inductor.config.patch({"cpp.simdlen": 256}):
    got = torch.compile(f, backend="neuron")(x.to("neuron"), wn)
    got.backward()
torch.testing.assert_close(got.cpu(), expected, rtol=1e-4, atol=1e-5)  # fused fp32: another order
torch.testing.assert_close(wn.grad.cpu(), w.grad, rtol=1e-4, atol=1e-5)
"""


def isa_widths() -> set[int]:
    from torch._inductor import cpu_vec_isa
    return {isa.bit_width() for isa in cpu_vec_isa.valid_vec_isa_list()}


needs_avx2_and_avx512 = pytest.mark.skipif(not {256, 512} <= isa_widths(), reason="needs a CPU with AVX2 and AVX-512")


def inductor_register(argtypes: list[str], source: str):
    """Inductor's own per-kernel build (outside ``one_unit``), as a batch's fallback."""
    from torch._inductor.async_compile import AsyncCompile
    return AsyncCompile().cpp_pybinding(argtypes, source)


@pytest.mark.parametrize("pooled", [False, True])
def test_unit_kernels_compute_what_each_kernel_computes(pooled):
    # Pooled (Inductor compiles with several threads): two units built side by side.
    from torch._inductor.async_compile import AsyncCompile
    batch = kernel_batch.Batch(inductor_register, AsyncCompile.submit if pooled else None)
    ops = ("* 2.0f", "+ 1.0f", "* in_ptr0[i]", "- 3.0f")
    pending = [batch.add(ARGTYPES, KERNEL.format(op=op)) for op in ops]
    x = torch.arange(5, dtype=torch.float32)
    outs = []
    for p in pending:
        out = torch.empty(5)
        p.result()(x, out, 5)
        outs.append(out)
    torch.testing.assert_close(outs, [x * 2, x + 1, x * x, x - 3], rtol=0, atol=0)
    modules = {f.__module__ for f in batch.functions()}
    assert len(modules) == (2 if pooled else 1), modules


def test_a_unit_that_does_not_build_falls_back_to_one_build_per_kernel():
    batch = kernel_batch.Batch(inductor_register)
    doubled = batch.add(ARGTYPES, KERNEL.format(op="* 2.0f"))
    marker = batch.add(["float*"], NOT_NESTABLE)
    x, out, seven = torch.arange(3, dtype=torch.float32), torch.empty(3), torch.zeros(1)
    doubled.result()(x, out, 3)
    marker.result()(seven)
    torch.testing.assert_close(out, x * 2, rtol=0, atol=0)
    assert seven.item() == 7.0


def test_outside_the_context_inductor_builds_kernels_itself():
    from torch._inductor.async_compile import AsyncCompile
    with kernel_batch.one_unit():
        pending = AsyncCompile().cpp_pybinding(ARGTYPES, KERNEL.format(op="- 1.0f"))
    assert isinstance(pending, kernel_batch.PendingKernel)
    kernel = AsyncCompile().cpp_pybinding(ARGTYPES, KERNEL.format(op="- 1.0f"))
    assert not isinstance(kernel, kernel_batch.PendingKernel)
    x, out = torch.arange(4, dtype=torch.float32), torch.empty(4)
    (kernel.result() if hasattr(kernel, "result") else kernel)(x, out, 4)
    torch.testing.assert_close(out, x - 1, rtol=0, atol=0)


@needs_avx2_and_avx512
def test_a_unit_builds_for_the_vector_isa_its_kernels_were_generated_for():
    # The unit builds on another thread; Inductor's settings are per thread. Built for AVX-512,
    # kernels generated for AVX2 (cpp.simdlen=256) would step 8 floats and store 16.
    from torch._inductor import config
    with config.patch({"cpp.simdlen": 256}):
        batch = kernel_batch.Batch(inductor_register)
        pending = batch.add(["float*"], VECTOR_WIDTH)
        batch.start()
    out = torch.zeros(1)
    pending.result()(out)
    assert out.item() == 8  # floats in an AVX2 vector


@needs_avx2_and_avx512
def test_a_model_compiled_with_a_narrower_simdlen_matches_the_cpu(tmp_path):
    # In a child process: kernels built for the wrong ISA corrupt the heap (the process aborts).
    run_with_fresh_caches(WITH_SIMDLEN_256, tmp_path)


def test_unit_source_hoists_includes_and_renames_each_entry():
    source = kernel_batch.unit_source([(["float*"], NOT_NESTABLE), (ARGTYPES, KERNEL.format(op="+ 0.0f"))])
    assert source.count("#include <torch/csrc/inductor/cpp_prefix.h>") == 1
    assert source.index("#include <functional>") < source.index("namespace k0")
    assert 'extern "C"' not in source.split("PyMODINIT_FUNC")[0]
    assert "k1::kernel(arg<float*>(args, 0), arg<float*>(args, 1), arg<int64_t>(args, 2))" in source
    assert source.count("PyInit_kernel") == 1


def test_a_modules_kernels_build_in_the_background_and_resolve_at_their_first_call():
    from torch._inductor.async_compile import AsyncCompile
    scope: dict = {}
    with kernel_batch.one_unit():  # as a generated module's load runs it
        compile_ = AsyncCompile()
        scope["doubled"] = compile_.cpp_pybinding(ARGTYPES, KERNEL.format(op="* 3.0f"))
        scope["shifted"] = compile_.cpp_pybinding(ARGTYPES, KERNEL.format(op="+ 5.0f"))
        compile_.wait(scope)  # starts the unit's build, does not wait for it
    assert all(isinstance(k, kernel_batch.DeferredKernel) for k in scope.values())
    x, out = torch.arange(4, dtype=torch.float32), torch.empty(4)
    scope["doubled"](x, out, 4)
    torch.testing.assert_close(out, x * 3, rtol=0, atol=0)
    assert not isinstance(scope["doubled"], kernel_batch.DeferredKernel)  # the built kernel from now on
    scope["shifted"](x, out, 4)
    torch.testing.assert_close(out, x + 5, rtol=0, atol=0)
