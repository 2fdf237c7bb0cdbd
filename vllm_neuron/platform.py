"""The ``neuron`` platform as vLLM sees it: which device, worker, attention backend, data types
and memory, and the configuration changes a simulated NeuronCore needs.

Modelled on vLLM's out-of-tree platforms (``vllm/platforms/interface.py``): the device is a
PrivateUse1 torch device, so vLLM's custom ops register for the ``PrivateUse1`` dispatch key, and
``Platform.__getattr__`` finds the rest (``synchronize``, ``Stream``, ``mem_get_info``, ...) on
``torch.neuron``."""
from __future__ import annotations

import os
from typing import Any

import torch
from vllm.logger import init_logger
from vllm.platforms.interface import Platform, PlatformEnum

import torch_neuronx  # noqa: F401  (registers the `neuron` device and torch.neuron)

logger = init_logger(__name__)

DEFAULT_BLOCK_SIZE = 32  # vLLM's CPU build needs a multiple of 32: the same default compares with it


class NeuronPlatform(Platform):
    _enum = PlatformEnum.OOT
    device_name: str = "neuron"
    device_type: str = "neuron"
    # vLLM registers its custom ops (torch.ops.vllm.*) for this key; "CPU" would send them on
    # neuron tensors to the device's CPU fallback.
    dispatch_key: str = "PrivateUse1"
    # c10d: neuron tensors through the neuron backend (tensor-parallel collectives), CPU ones through Gloo.
    dist_backend: str = "cpu:gloo,neuron:neuron"
    # vLLM compiles a few helpers with dynamic shapes (torch.compile(dynamic=True, backend=this), the
    # tensor-parallel embedding's vocabulary mask); neuron executables are static, so they run eagerly.
    simple_compile_backend: str = "eager"
    device_control_env_var: str = "NEURON_RT_VISIBLE_CORES"
    ray_device_key: str = "neuron_cores"

    @property
    def supported_dtypes(self) -> list[torch.dtype]:
        return [torch.float32, torch.bfloat16, torch.float16]

    @classmethod
    def check_if_supports_dtype(cls, dtype: torch.dtype) -> None:
        if dtype not in (torch.float32, torch.bfloat16, torch.float16):
            raise ValueError(f"vllm_neuron: the model's dtype {dtype} is not supported on neuron; "
                             "pass --dtype float32, bfloat16 or float16")

    @classmethod
    def get_device_name(cls, device_id: int = 0) -> str:
        return torch.neuron.get_device_name(device_id)

    @classmethod
    def get_device_total_memory(cls, device_id: int = 0) -> int:
        return torch.neuron.mem_get_info(device_id)[1]

    @classmethod
    def set_device(cls, device: torch.device) -> None:
        torch.neuron.set_device(device)

    @classmethod
    def manual_seed_all(cls, seed: int) -> None:
        torch.neuron.manual_seed_all(seed)

    @classmethod
    def get_current_memory_usage(cls, device: torch.types.Device | None = None) -> float:
        torch.neuron.reset_peak_memory_stats(device)
        return float(torch.neuron.max_memory_allocated(device))

    @classmethod
    def is_pin_memory_available(cls) -> bool:
        return True  # the device has a pinned host allocator: host-to-device copies run asynchronously

    @classmethod
    def get_attn_backend_cls(cls, selected_backend: Any, attn_selector_config: Any,
                             num_heads: int | None = None) -> str:
        if attn_selector_config.use_mla or attn_selector_config.use_sparse:
            raise NotImplementedError("vllm_neuron: MLA and sparse attention are not supported on neuron; "
                                      "serve a model with standard multi-head or grouped-query attention")
        if selected_backend is not None and selected_backend.name != "CUSTOM":
            logger.warning("vllm_neuron: attention backend %s is not available on neuron; using the paged "
                           "attention backend of the neuron platform", selected_backend.name)
        from vllm.config import get_current_vllm_config

        from vllm_neuron import cpu_kernels
        from vllm_neuron.kernel_attention import NeuronKernelAttentionBackend
        from vllm_neuron.options import neuron_option
        choice = neuron_option(get_current_vllm_config(), "attention", "paged_kernel")
        head_size, block_size = attn_selector_config.head_size, attn_selector_config.block_size or DEFAULT_BLOCK_SIZE
        kernel_fits = head_size in NeuronKernelAttentionBackend.get_supported_head_sizes() and block_size % 32 == 0
        if choice == "paged_kernel" and cpu_kernels.available() and kernel_fits:
            return "vllm_neuron.kernel_attention.NeuronKernelAttentionBackend"
        if choice == "paged_kernel":
            logger.info("vllm_neuron: paged attention through block gathers and SDPA (vLLM's paged-attention "
                        "kernel needs its CPU build, head sizes %s and blocks of a multiple of 32 tokens; here "
                        "head size %d, block size %d)", NeuronKernelAttentionBackend.get_supported_head_sizes(),
                        head_size, block_size)
        return "vllm_neuron.attention.NeuronPagedAttentionBackend"

    @classmethod
    def get_device_communicator_cls(cls) -> str:
        return "vllm.distributed.device_communicators.base_device_communicator.DeviceCommunicatorBase"

    @classmethod
    def check_and_update_config(cls, vllm_config: Any) -> None:
        from vllm.config import CompilationMode
        from vllm.config.compilation import CUDAGraphMode

        cache = vllm_config.cache_config
        if not cache.user_specified_block_size:
            cache.block_size = DEFAULT_BLOCK_SIZE
        parallel = vllm_config.parallel_config
        if parallel.worker_cls == "auto":
            parallel.worker_cls = "vllm_neuron.worker.NeuronWorker"
        # Async scheduling overlaps the next step's host work with device work through CUDA streams
        # and events; the simulated queue already runs asynchronously, one step at a time.
        vllm_config.scheduler_config.async_scheduling = False
        compilation = vllm_config.compilation_config
        compilation.cudagraph_mode = CUDAGraphMode.NONE
        compilation.cudagraph_capture_sizes = []
        if vllm_config.model_config is not None and vllm_config.model_config.enforce_eager:
            compilation.mode = CompilationMode.NONE
        else:
            # vLLM's own compilation (VLLM_COMPILE): the graph is split at the attention ops, which
            # run eagerly between the pieces, and the neuron backend compiles each piece for each
            # token bucket (vllm_neuron/compiler.py).
            from vllm_neuron.compiler import token_buckets
            if compilation.backend != "eager":
                compilation.backend = cls.get_compile_backend()
            compilation.compile_sizes = token_buckets(vllm_config)
            os.environ.setdefault("VLLM_USE_AOT_COMPILE", "0")  # it serializes Inductor's output
            # vLLM's fusion passes rewrite the graph into its CUDA kernels (quantization, all-reduce,
            # RoPE + KV cache); the neuron backend (Inductor underneath) fuses the pieces' operators.
            for name in vars(compilation.pass_config):
                if name.startswith("fuse_") or name == "enable_qk_norm_rope_fusion":
                    setattr(compilation.pass_config, name, False)
        # The simulated runtime refuses to run in a forked child (torch.neuron._check_not_forked).
        os.environ["VLLM_WORKER_MULTIPROC_METHOD"] = "spawn"

    @classmethod
    def get_compile_backend(cls) -> str:
        return "vllm_neuron.compiler.NeuronCompiler"

    @classmethod
    def opaque_attention_op(cls) -> bool:
        return True  # attention is a custom op (torch.ops.vllm.unified_attention_with_output) in compiled graphs

    @classmethod
    def import_kernels(cls) -> None:
        """vLLM's C++ kernels built for this host's instruction set, as its CPU platform picks them:
        the simulated core runs some of them (vllm_neuron/cpu_kernels.py)."""
        from vllm.platforms.cpu import CpuPlatform
        CpuPlatform.import_kernels()

    @classmethod
    def register_triton_kernel_overrides(cls) -> None:
        from vllm.triton_utils.dispatcher import register_kernels

        from vllm_neuron import slot_mapping
        register_kernels({slot_mapping.KERNEL: slot_mapping.compute_slot_mapping})
