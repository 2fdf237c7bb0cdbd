"""The opt-in `neuronxcc` alias: SDK 2.26 kernels (`from neuronxcc import nki`) run unchanged through
`python -m nki.neuronxcc_alias` and `pytest -p nki.neuronxcc_alias`, and a real `neuronxcc` wins."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

KERNEL = textwrap.dedent('''
    import numpy as np
    from neuronxcc import nki
    import neuronxcc.nki.isa as nisa
    import neuronxcc.nki.language as nl


    @nki.jit
    def add_exp(a, b):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        x, y = nl.load(a), nl.load(b)
        s = nisa.tensor_tensor(x, y, op=nl.add)  # the return-a-tile form of SDK 2.26
        nl.store(out, value=nisa.activation(op=nl.exp, data=s))
        return out


    def check():
        a = np.random.default_rng(0).standard_normal((128, 16)).astype(np.float32)
        b = np.random.default_rng(1).standard_normal((128, 16)).astype(np.float32)
        np.testing.assert_allclose(nki.simulate_kernel(add_exp, a, b), np.exp(a + b), rtol=1e-5)
        np.testing.assert_allclose(add_exp(a, b), np.exp(a + b), rtol=1e-5)
''')


def run(args, cwd, extra_path=None):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (extra_path, str(ROOT)) if p))
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_script_runs_through_the_module_entry_point(tmp_path):
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "kernels_of_script.py").write_text(KERNEL)  # imported from the script's folder
    script = tmp_path / "scripts" / "kernel_script.py"
    script.write_text("import sys\nfrom kernels_of_script import check\ncheck()\nprint('ok', sys.argv[1:])\n")
    done = run(["-m", "nki.neuronxcc_alias", str(script), "--flag", "1"], tmp_path)
    assert done.returncode == 0, done.stderr
    assert "ok ['--flag', '1']" in done.stdout


def test_test_suite_runs_with_the_pytest_plugin(tmp_path):
    (tmp_path / "test_kernel.py").write_text(KERNEL + "\n\ndef test_kernel():\n    check()\n")
    done = run(["-m", "pytest", "-q", "-p", "nki.neuronxcc_alias", "-p", "no:cacheprovider", "test_kernel.py"],
               tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed" in done.stdout


def test_without_the_alias_neuronxcc_is_not_importable(tmp_path):
    done = run(["-c", "import neuronxcc"], tmp_path)
    assert done.returncode != 0 and "ModuleNotFoundError" in done.stderr


def test_a_real_neuronxcc_package_wins(tmp_path):
    real = tmp_path / "site" / "neuronxcc"
    real.mkdir(parents=True)
    (real / "__init__.py").write_text("REAL = True\n")
    code = ("import nki.neuronxcc_alias as alias\n"
            "assert alias.install() is False and not alias.installed()\n"
            "import neuronxcc\n"
            "assert neuronxcc.REAL\n"
            "print('real', neuronxcc.__file__)\n")
    done = run(["-c", code], tmp_path, extra_path=str(tmp_path / "site"))
    assert done.returncode == 0, done.stderr
    assert f"real {real / '__init__.py'}" in done.stdout


def test_install_uninstall_in_process():
    import nki.legacy.language
    import nki.neuronxcc_alias as alias
    assert alias.install() is True
    try:
        assert alias.install() is False  # already installed
        import neuronxcc.nki.language as nl
        assert nl.exp is nki.legacy.language.exp
    finally:
        alias.uninstall()
    assert "neuronxcc" not in sys.modules and not alias.installed()
