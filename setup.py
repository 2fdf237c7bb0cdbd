"""Builds torch_neuronx._C (runtime + PyTorch shim) against the installed torch."""
import os
from pathlib import Path

from setuptools import setup

# Building must not load an installed (possibly stale) copy of this backend through torch's
# backend auto-loading.
os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
from torch.utils.cpp_extension import BuildExtension, CppExtension  # noqa: E402

sources = sorted(str(p) for p in Path("csrc").rglob("*.cpp"))

setup(
    ext_modules=[
        CppExtension(
            "torch_neuronx._C",
            sources,
            extra_compile_args=["-O2", "-Wno-unused-parameter"],
        )
    ],
    cmdclass={"build_ext": BuildExtension.with_options(use_ninja=True)},
)
