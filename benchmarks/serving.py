"""vLLM serving on `neuron` against vLLM's own CPU build, side by side in one run, on the same
saved model (a small Llama: 4 layers, hidden 256, 8 heads of 32, fp32), greedy, 1 engine core.

(a) offline: `LLM.generate` of 16 prompts x 64 new tokens in one batch (after a warm-up batch):
    output tokens per second and time per output token (the batch's seconds / 64 steps), for
    vLLM's CPU build (eager), neuron eager and neuron compiled (the neuron backend, token buckets);
(b) online: `vllm-neuron serve` (neuron) and `vllm-neuron serve --device cpu` (the CPU build), each
    eager (--enforce-eager) and compiled (vLLM's default), streaming completions of 32 tokens at 1,
    4 and 16 concurrent requests, after a warm-up round: median time to first token, TPOT (a
    request's (last - first token) / (tokens - 1)) and request latency over five rounds, and the
    rounds' output tokens/s, whose inverse is the time per output token the goal is on (TPOT alone
    misleads: a server that sends a request's tokens in bursts has a near-zero TPOT).

Beside them: the cost model's estimate of a decode step of the same batch on one trn2 logical core
(LNC=2), labelled as an estimate: the roofline of the step's HBM reads (weights and the KV cache
read so far) against its TensorE FLOPs; launch and host overheads are not modelled.
Goal: neuron at most 1.2x the CPU build's time per output token at 16 concurrent requests, each in
its faster mode (the simulator runs the CPU's kernels, so the CPU build is the floor).

    python benchmarks/serving.py                        # publishes to docs/benchmarks
    python benchmarks/serving.py --quick --out /tmp/b   # smoke test
"""
from __future__ import annotations

import concurrent.futures
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

import results
from torch_neuronx.testing.tiny_hf import save_tiny_causal_lm

TARGET = 1.2
MODEL = dict(hidden_size=256, intermediate_size=512, num_hidden_layers=4, num_attention_heads=8,
             num_key_value_heads=4, head_dim=32)
PROMPTS = [f"request {i}: " + "the quick brown fox jumps over the lazy dog " * (1 + i % 3) for i in range(16)]
ENV = {"HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", "VLLM_DO_NOT_TRACK": "1", "VLLM_HOST_IP": "127.0.0.1",
       "TOKENIZERS_PARALLELISM": "false", "VLLM_CPU_KVCACHE_SPACE": "1"}
ENGINE = dict(dtype="float32", max_model_len=512, seed=0, kv_cache_memory_bytes=256 << 20, max_num_batched_tokens=512)
RUNS = {"CPU build (eager)": ("cpu", {"enforce_eager": True}),
        "neuron eager": ("neuron", {"enforce_eager": True}),
        "neuron compiled": ("neuron", {"enforce_eager": False})}


def environment(device: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCH_NEURONX_", "VLLM_"))}
    return {**env, **ENV, **({"VLLM_TARGET_DEVICE": "cpu"} if device == "cpu" else {})}


def offline_worker(plan_path: str) -> None:
    """In its own process: warm up, then time one batch; prints one JSON line."""
    from vllm import LLM, SamplingParams
    plan = json.loads(open(plan_path).read())
    llm = LLM(model=plan["model"], **plan["engine"])
    params = SamplingParams(temperature=0, max_tokens=plan["tokens"], ignore_eos=True)
    llm.generate(PROMPTS, params, use_tqdm=False)
    start = time.perf_counter()
    outputs = llm.generate(PROMPTS, params, use_tqdm=False)
    seconds = time.perf_counter() - start
    print("RESULT " + json.dumps({"seconds": seconds, "tokens": sum(len(o.outputs[0].token_ids) for o in outputs),
                                  "ids": [list(o.outputs[0].token_ids) for o in outputs]}), flush=True)


def offline(model: str, device: str, engine: dict, tokens: int) -> dict:
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump({"model": model, "engine": {**ENGINE, **engine}, "tokens": tokens}, f)
    env = {**environment(device), "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
    done = subprocess.run([sys.executable, __file__, "--worker", f.name], env=env, capture_output=True, text=True)
    os.unlink(f.name)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if done.returncode or not lines:
        sys.exit(f"offline run on {device} failed:\n{done.stderr[-4000:]}")
    return json.loads(lines[-1][len("RESULT "):])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve(model: str, device: str, eager: bool) -> tuple[subprocess.Popen, str]:
    port = free_port()
    args = [shutil.which("vllm-neuron"), "serve", model, "--device", device, "--host", "127.0.0.1", "--port",
            str(port), "--dtype", "float32", "--max-model-len", str(ENGINE["max_model_len"]),
            "--kv-cache-memory-bytes", str(ENGINE["kv_cache_memory_bytes"]), "--seed", "0",
            *(["--enforce-eager"] if eager else [])]
    process = subprocess.Popen(args, env=environment(device), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               start_new_session=True)
    import httpx
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and process.poll() is None:
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return process, url
        except httpx.HTTPError:
            time.sleep(1)
    stop(process)
    sys.exit(f"vllm-neuron serve --device {device} did not start")


def stop(process: subprocess.Popen) -> None:
    os.killpg(process.pid, signal.SIGINT)
    try:
        process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)


def stream_once(client, model: str, prompt: str, tokens: int) -> tuple[float, float, float]:
    """Time to first token, time per output token after it ((last - first) / (tokens - 1), as
    `vllm bench` reports TPOT) and the request's latency (s) of one streamed completion."""
    start = time.perf_counter()
    stamps = [time.perf_counter() for chunk in client.completions.create(
        model=model, prompt=prompt, max_tokens=tokens, temperature=0, stream=True,
        extra_body={"ignore_eos": True}) if chunk.choices and chunk.choices[0].text]
    return stamps[0] - start, (stamps[-1] - stamps[0]) / (tokens - 1), stamps[-1] - start


def online(url: str, concurrency: int, tokens: int, rounds: int) -> dict[str, float]:
    """Medians of `rounds` rounds of `concurrency` concurrent requests, after a warm-up round (the
    server's first steps of each size build their kernels): TTFT, TPOT, the request's latency, and
    the output tokens per second of the rounds."""
    import openai
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=600)
    model = client.models.list().data[0].id
    timed, seconds = [], 0.0
    for round_ in range(rounds + 1):
        start = time.perf_counter()
        with concurrent.futures.ThreadPoolExecutor(concurrency) as pool:
            done = list(pool.map(lambda p: stream_once(client, model, p, tokens), PROMPTS[:concurrency]))
        if round_:
            timed += done
            seconds += time.perf_counter() - start
    return {"ttft": statistics.median(t[0] for t in timed), "tpot": statistics.median(t[1] for t in timed),
            "latency": statistics.median(t[2] for t in timed), "tokens_per_s": len(timed) * tokens / seconds}


def estimated_decode_step(model: str, batch: int, context: int, dtype_bytes: int = 4) -> float:
    """Roofline of one decode step of the benchmark model on a trn2 logical core (LNC=2): the
    weights (the saved file's size) and the KV cache read so far, against the matmul FLOPs."""
    from torch_neuronx.runtime.chips import FP32, logical_core
    core = logical_core("trn2", 2)
    weight_bytes = os.path.getsize(os.path.join(model, "model.safetensors"))
    layers, h = MODEL["num_hidden_layers"], MODEL["hidden_size"]
    kv_bytes = batch * context * layers * 2 * MODEL["num_key_value_heads"] * MODEL["head_dim"] * dtype_bytes
    flops = 2 * (weight_bytes // dtype_bytes) * batch + batch * layers * 4 * context * h
    return max((weight_bytes + kv_bytes) / core.hbm_bytes_per_s, flops / core.tensor_flops[FP32])


def main() -> None:
    p = results.parser(__doc__)
    p.add_argument("--quick", action="store_true", help="fewer tokens and rounds (smoke test)")
    args = p.parse_args()
    tokens, stream_tokens, rounds = (16, 8, 1) if args.quick else (64, 32, 5)
    model = save_tiny_causal_lm(tempfile.mkdtemp(prefix="serving-bench-"), "llama", **MODEL)
    model = str(model)

    measured = {name: offline(model, device, engine, tokens) for name, (device, engine) in RUNS.items()}
    cpu = measured["CPU build (eager)"]
    rows, figures = [], {}
    for name, run in measured.items():
        per_token = run["seconds"] / tokens
        ratio = per_token / (cpu["seconds"] / tokens)
        same = "yes" if run["ids"] == cpu["ids"] else "NO"
        rows.append([name, f"{run['tokens'] / run['seconds']:.0f}", f"{per_token * 1e3:.1f}", f"{ratio:.2f}x", same])
    figures["offline_eager_ratio"] = f"{measured['neuron eager']['seconds'] / cpu['seconds']:.2f}x"
    figures["offline_compiled_ratio"] = f"{measured['neuron compiled']['seconds'] / cpu['seconds']:.2f}x"
    context = 40 + tokens // 2  # the prompts' mean length, and half the new tokens
    estimate = estimated_decode_step(model, len(PROMPTS), context)
    rows.append(["trn2, one logical core (ESTIMATE: cost-model roofline)", f"{len(PROMPTS) / estimate:.0f}",
                 f"{estimate * 1e3:.3f}", "", ""])
    tables = [results.Table(f"(a) offline: {len(PROMPTS)} prompts x {tokens} new tokens, one batch",
                            ["run", "output tokens/s", "ms per output token (per step)", "vs CPU build",
                             "CPU build's tokens"], rows)]

    servers = {}  # (device, eager) -> concurrency -> (TTFT, TPOT)
    for device, eager in (("cpu", True), ("cpu", False), ("neuron", True), ("neuron", False)):
        process, url = serve(model, device, eager)
        try:
            servers[device, eager] = {c: online(url, c, stream_tokens, rounds) for c in (1, 4, 16)}
        finally:
            stop(process)
    def per_token(device: str, eager: bool, c: int) -> float:
        """Time per output token of the rounds: their seconds over the tokens they streamed."""
        return 1 / servers[device, eager][c]["tokens_per_s"]

    def best(device: str, c: int) -> float:
        return min(per_token(device, e, c) for e in (True, False))

    latency_rows = []
    for device, eager in servers:
        for c in (1, 4, 16):
            run = servers[device, eager][c]
            latency_rows.append([f"{'CPU build' if device == 'cpu' else 'neuron'} {'eager' if eager else 'compiled'}",
                                 str(c), f"{run['ttft'] * 1e3:.1f}", f"{run['tpot'] * 1e3:.2f}",
                                 f"{run['latency'] * 1e3:.0f}", f"{run['tokens_per_s']:.0f}",
                                 f"{per_token(device, eager, c) / per_token('cpu', eager, c):.2f}x",
                                 f"{per_token(device, eager, c) / best('cpu', c):.2f}x"])
    best16 = best("neuron", 16) / best("cpu", 16)
    for name, eager in (("eager", True), ("compiled", False)):
        figures[f"online16_{name}_ratio"] = f"{per_token('neuron', eager, 16) / per_token('cpu', eager, 16):.2f}x"
    figures["online16_ratio"] = f"{best16:.2f}x"
    figures["online16_verdict"] = results.verdict(best16, TARGET)
    tables.append(results.Table(
        f"(b) online: streamed completions of {stream_tokens} tokens, medians over {rounds} rounds after a warm-up "
        f"round; time per output token = the rounds' seconds / the tokens they streamed (goal: neuron's at 16 "
        f"concurrent, in its faster mode, at most {TARGET}x the CPU build's in its faster mode: "
        f"{figures['online16_verdict']})",
        ["run", "concurrent requests", "TTFT (ms)", "TPOT (ms)", "request latency (ms)", "output tokens/s",
         "time per output token vs CPU build, same mode", "vs CPU build's faster mode"], latency_rows))
    print(results.render(tables))
    results.publish(__file__, tables, figures, args.out)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--worker"]:
        offline_worker(sys.argv[2])
    else:
        main()
