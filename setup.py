"""Builds torch_neuronx._C (runtime + PyTorch shim) against the installed torch."""
import os
from pathlib import Path

from setuptools import setup

# Building must not load an installed (possibly stale) copy of this backend through torch's
# backend auto-loading.
os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
from torch.utils.cpp_extension import BuildExtension, CppExtension, include_paths  # noqa: E402

# The runtime's own C++ tests (csrc/runtime/tests) are a program of their own: the test suite
# builds and runs them (tests/runtime/test_runtime_library.py).
sources = sorted(str(p) for p in Path("csrc").rglob("*.cpp") if "tests" not in p.parts)
# Kineto's headers ship in the wheel; the profiler (csrc/shim/profiler/session.cpp) registers a Kineto
# child profiler, which needs them and USE_KINETO.
kineto = [str(Path(p) / "kineto") for p in include_paths() if (Path(p) / "kineto").is_dir()]


class build_ext(BuildExtension.with_options(use_ninja=True)):  # type: ignore[misc]
    """Keeps the object files in build/ (pip's editable install builds in a new temporary
    directory each time), so ninja recompiles only what changed: the README's second command
    reuses what the first compiled, and a rebuild after editing one file compiles that file."""

    def finalize_options(self) -> None:
        super().finalize_options()
        self.build_temp = str(Path(__file__).resolve().parent / "build" / "temp")


setup(
    ext_modules=[
        CppExtension(
            "torch_neuronx._C",
            sources,
            include_dirs=kineto,
            extra_compile_args=["-O2", "-Wno-unused-parameter", "-DUSE_KINETO"],
        )
    ],
    cmdclass={"build_ext": build_ext},
)
