"""One vLLM worker per ``neuron`` core: sets the device up, sizes the KV cache from the core's
memory, and runs the model runner.

vLLM's GPU worker does the rest unchanged (loading, profiling, executing); what it does only for
CUDA (device set-up, the sleep-mode memory pool, Triton kernel warm-up) is replaced here."""
from __future__ import annotations

import gc
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import psutil
import torch
from vllm.logger import init_logger
from vllm.platforms import current_platform
from vllm.utils.mem_utils import MemorySnapshot, format_gib
from vllm.utils.torch_utils import set_random_seed
from vllm.v1.worker.gpu_worker import Worker, init_worker_distributed_environment
from vllm.v1.worker.utils import request_memory

from vllm_neuron import (
    cpu_kernels,
    moe,  # noqa: F401  (registers the MoE method before the model is built)
    rotary,
)
from vllm_neuron.model_runner import NeuronModelRunner

if cpu_kernels.available():
    rotary.register()  # before the model is built, as moe's method

logger = init_logger(__name__)

# The simulator backs device memory with host memory: a KV cache sized from the simulated HBM may
# not fit in the host. It gets at most this share of the host memory available at start-up.
HOST_MEMORY_SHARE = 0.5


class NeuronWorker(Worker):
    def init_device(self) -> None:
        """The GPU worker's set-up for CUDA (gpu_worker.py), on core ``neuron:<local_rank>``."""
        self.device = torch.device(f"neuron:{self.local_rank}")
        torch.neuron.set_device(self.device)
        current_platform.check_if_supports_dtype(self.model_config.dtype)
        init_worker_distributed_environment(self.vllm_config, self.rank, self.distributed_init_method,
                                            self.local_rank, current_platform.dist_backend)
        set_random_seed(self.model_config.seed)
        gc.collect()
        torch.neuron.empty_cache()
        self.init_snapshot = MemorySnapshot(device=self.device)
        self.requested_memory = request_memory(self.init_snapshot, self.cache_config)
        self._init_workspace_and_model_runner()

    def _make_model_runner(self) -> NeuronModelRunner:
        return NeuronModelRunner(self.vllm_config, self.device)

    def _maybe_get_memory_pool_context(self, tag: str) -> AbstractContextManager[None]:
        # The base asks other platforms for the CUDA sleep-mode allocator; the device's own
        # caching allocator holds weights and KV cache, as on CPU and XPU.
        return nullcontext()

    def determine_available_memory(self) -> int:
        """The GPU worker's figure (``gpu_memory_utilization`` of the core's HBM less weights and
        the profiled peak, or ``kv_cache_memory_bytes``), capped at a share of the host memory."""
        available = super().determine_available_memory()
        host = int(psutil.virtual_memory().available * HOST_MEMORY_SHARE)
        if available > host:
            logger.warning(
                "vllm_neuron: the KV cache would take %s GiB of neuron:%d's %s GiB, but the simulator "
                "keeps device memory in host memory and the host has %s GiB available; using %s GiB. "
                "Set --kv-cache-memory-bytes (or TORCH_NEURONX_SIM_CONF=hbm_bytes:N for a smaller core) to "
                "choose the size.", format_gib(available), self.device.index,
                format_gib(self.init_snapshot.total_memory), format_gib(2 * host), format_gib(host))
            available = host
        return available

    def compile_or_warm_up_model(self) -> Any:
        """Skip the base's Triton kernel warm-ups (kernel_warmup), which do not apply here."""
        from vllm.v1.worker.worker_base import CompilationTimes
        set_random_seed(self.model_config.seed)
        return CompilationTimes(language_model=self.compilation_config.compilation_time,
                                encoder=self.compilation_config.encoder_compilation_time)
