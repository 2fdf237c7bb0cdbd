"""vLLM's C++ CPU kernels as neuron device kernels (vllm_neuron/cpu_kernels.py), each against the
same kernel on CPU tensors: bit-exact, as the same CPU kernel runs (``python kernels_check.py
THREADS``; exits non-zero on a mismatch, prints one "ok" line per check). In a process of its
own: importing vLLM changes the environment (Inductor's settings) for good."""
from __future__ import annotations

import sys

import torch
import torch.nn.functional as F

import torch_neuronx
from vllm_neuron import cpu_kernels
from vllm_neuron.kernel_attention import relocated

assert cpu_kernels.available()
from vllm import _custom_ops as ops  # noqa: E402

DEVICE = torch.device("neuron:0")


def same(device_result: torch.Tensor, cpu_result: torch.Tensor, what: str) -> None:
    assert device_result.device == DEVICE, what
    torch.testing.assert_close(device_result.cpu(), cpu_result, rtol=0, atol=0, msg=lambda m: f"{what}: {m}")
    print("ok", what, flush=True)


def rotary(dtype: torch.dtype, neox: bool) -> None:
    tokens, heads, kv_heads, head_size = 9, 4, 2, 32
    qkv = torch.randn(tokens, (heads + 2 * kv_heads) * head_size, dtype=dtype)
    cache = torch.randn(64, head_size, dtype=dtype)  # [positions, cos | sin]
    positions = torch.randint(0, 64, (tokens,))
    results = {}
    for device in ("cpu", DEVICE):
        x = qkv.clone().to(device)  # the kernel writes in place
        q, k = x[:, :heads * head_size], x[:, heads * head_size:(heads + kv_heads) * head_size]  # strided views
        for _ in range(2):  # the second launch takes the queued path
            ops.rotary_embedding(positions.to(device), q, k, head_size, cache.to(device), neox)
        results[str(device)] = x
    same(results[str(DEVICE)], results["cpu"], f"rotary_embedding {dtype} neox={neox}")


def paged_attention(window: int) -> None:
    """Two decodes and three prefill chunks (one after cached tokens), GQA, in one call."""
    heads, kv_heads, head_size, block_size, num_blocks = 8, 2, 32, 32, 24
    query_lens, seq_lens = [1, 1, 40, 70, 5], [37, 90, 40, 70, 33]
    tokens = sum(query_lens)
    starts = torch.tensor([0] + torch.tensor(query_lens).cumsum(0).tolist(), dtype=torch.int32)
    lens = torch.tensor(seq_lens, dtype=torch.int32)
    table = torch.zeros(len(seq_lens), 4, dtype=torch.int32)
    free = iter(torch.randperm(num_blocks - 1).add(1).tolist())  # block 0 is vLLM's null block
    for r, n in enumerate(seq_lens):
        for j in range(-(-n // block_size)):
            table[r, j] = next(free)
    slots = torch.cat([table[r].long().repeat_interleave(block_size)[n - q:n] * 0
                       + table[r, torch.arange(n - q, n) // block_size].long() * block_size
                       + torch.arange(n - q, n) % block_size
                       for r, (q, n) in enumerate(zip(query_lens, seq_lens))])
    slots[3] = -1  # a padding token of a compiled bucket: skipped
    qkv = torch.randn(tokens, (heads + 2 * kv_heads) * head_size)
    cache = torch.randn(num_blocks, kv_heads, block_size, 2 * head_size)  # the context already cached
    results = {}
    for device in ("cpu", DEVICE):
        x, kv = qkv.clone().to(device), cache.clone().to(device)  # the kernels write in place
        q = x[:, :heads * head_size].view(tokens, heads, head_size)
        k = x[:, heads * head_size:(heads + kv_heads) * head_size].view(tokens, kv_heads, head_size)
        v = x[:, (heads + kv_heads) * head_size:].view(tokens, kv_heads, head_size)
        key_cache, value_cache = kv.view(num_blocks, kv_heads, 2 * block_size, head_size).chunk(2, dim=2)
        out = torch.zeros(tokens, heads, head_size, device=device)
        for _ in range(2):
            ops.cpu_attn_reshape_and_cache(k, v, key_cache, value_cache, slots.to(device), "vec")
            plan = ops.cpu_attn_get_scheduler_metadata(
                num_reqs=len(seq_lens), num_heads=heads, num_kv_heads=kv_heads, head_dim=head_size, seq_lens=lens,
                dtype=torch.float32, query_start_loc=starts, causal=True, sliding_window_size=window, isa="vec",
                enable_kv_split=False)
            ops.cpu_attention_with_kv_cache(
                query=q, key_cache=key_cache, value_cache=value_cache, output=out, query_start_loc=starts.to(device),
                seq_lens=lens.to(device), scale=head_size ** -0.5, causal=True, alibi_slopes=None,
                sliding_window=window, block_table=table.to(device), softcap=0.0,
                scheduler_metadata=plan if device == "cpu" else relocated(plan, DEVICE), s_aux=None)
        results[str(device)] = (out, kv)
    same(results[str(DEVICE)][1], results["cpu"][1], f"cpu_attn_reshape_and_cache (window {window})")
    same(results[str(DEVICE)][0], results["cpu"][0], f"cpu_attention_with_kv_cache (window {window})")
    # The test's own sanity: the kernel computes attention. Request 3 is a whole prompt (nothing
    # cached), so its keys and values are its own rows of qkv, whatever the cache's block layout.
    out = results["cpu"][0]
    rows = slice(int(starts[3]), int(starts[4]))
    n = seq_lens[3]
    q, k, v = qkv[rows].split([heads * head_size, kv_heads * head_size, kv_heads * head_size], dim=1)
    mask = torch.ones(n, n, dtype=torch.bool).tril()
    if window > 0:
        mask &= ~torch.ones(n, n, dtype=torch.bool).tril(-window)
    expected = F.scaled_dot_product_attention(*(t.reshape(n, -1, head_size).transpose(0, 1) for t in (q, k, v)),
                                              attn_mask=mask, enable_gqa=True)
    torch.testing.assert_close(out[rows].transpose(0, 1), expected, rtol=1e-4, atol=1e-5)


if __name__ == "__main__":
    torch.set_num_threads(int(sys.argv[1]))
    torch_neuronx.set_strict_fallback(True)
    torch.manual_seed(0)
    for dtype in (torch.float32, torch.bfloat16):
        for neox in (True, False):
            rotary(dtype, neox)
    for window in (-1, 16):
        paged_attention(window)
    assert torch_neuronx.get_fallback_ops() == {}, torch_neuronx.get_fallback_ops()
    print("ok no fallback", flush=True)
