"""Builds torch_neuronx._C (runtime + PyTorch shim) against the installed torch."""
from pathlib import Path

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

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
