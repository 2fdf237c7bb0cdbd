"""Runs vLLM offline in its own process, as a user script does, and prints what the tests check
as one JSON line: ``python vllm_driver.py PLAN.json``. The plan names the model directory, the
``vllm.LLM`` arguments and batches of prompts with their sampling parameters; the platform is
the one vLLM picks (neuron, or the CPU build's with VLLM_TARGET_DEVICE=cpu)."""
from __future__ import annotations

import json
import sys
import time


def kv_report(worker) -> dict:
    """On each worker: where the KV cache lives and what the device's allocator holds."""
    import torch
    caches = worker.model_runner.kv_caches
    report = {"kv_devices": sorted({str(t.device) for t in caches}),
              "kv_bytes": sum(t.untyped_storage().nbytes() for t in {t.untyped_storage().data_ptr(): t
                                                                       for t in caches}.values())}
    if worker.device.type == "neuron":
        import torch.distributed as dist
        from vllm.distributed.parallel_state import get_tp_group

        import torch_neuronx
        tp = get_tp_group()
        report.update(tp_size=tp.world_size, tp_backend=dist.get_backend(tp.device_group),
                      tp_device_backend=type(tp.device_group._get_backend(worker.device)).__name__)
        stats = torch.neuron.memory_stats(worker.device)
        compiled = torch_neuronx.get_dynamo_metrics()
        report.update(executables=compiled["executables_compiled"] + compiled["cache_hits"],  # built or loaded
                      recompilations=compiled["recompilations"])
        report.update(attention=sorted({g.backend.__name__ for groups in worker.model_runner.attn_groups
                                        for g in groups}))
        report.update(kernel_library_calls={op: n for op, n in torch_neuronx.get_executed_ops().items()
                                            if op.startswith("nki_library::")})
        report.update(allocated=stats["allocated_bytes.all.current"], fallbacks=torch_neuronx.get_fallback_ops(),
                      capacity=torch.neuron.mem_get_info(worker.device)[1])
    return report


def outputs(results) -> list[dict]:
    return [{"prompt_token_ids": r.prompt_token_ids, "num_cached_tokens": r.num_cached_tokens,
             "outputs": [{"token_ids": list(c.token_ids), "text": c.text, "finish_reason": c.finish_reason,
                          "logprobs": [step[t].logprob for step, t in zip(c.logprobs, c.token_ids)]
                          if c.logprobs is not None else None} for c in r.outputs]} for r in results]


def main() -> None:
    plan = json.loads(open(sys.argv[1]).read())
    from vllm import LLM, SamplingParams
    from vllm.platforms import current_platform
    start = time.perf_counter()
    llm = LLM(model=plan["model"], **plan["engine"])
    report = {"platform": current_platform.device_type, "init_s": time.perf_counter() - start, "batches": []}
    for batch in plan["batches"]:
        if batch.get("fault"):
            import torch_neuronx.runtime
            torch_neuronx.runtime.inject_fault(batch["fault"])
        start = time.perf_counter()
        try:
            results = llm.generate(batch["prompts"], SamplingParams(**batch["sampling"]), use_tqdm=False)
            report["batches"].append({"outputs": outputs(results), "seconds": time.perf_counter() - start})
        except Exception as error:  # noqa: BLE001  the test checks which error and that it came back
            report["batches"].append({"error": f"{type(error).__name__}: {error}"})
            break
    else:
        report["workers"] = llm.collective_rpc(kv_report)
        if not plan["engine"].get("disable_log_stats", True):
            report["counters"] = {m.name: m.value for m in llm.get_metrics() if type(m).__name__ == "Counter"}
    print("RESULT " + json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
