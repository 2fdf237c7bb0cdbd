"""The backend's changes to PyTorch functions (compile/workarounds.py) affect neuron inputs only:
every other input behaves exactly as in a process without the package."""
import json
import os
import subprocess
import sys

import torch_neuronx

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(torch_neuronx.__file__)))

# FlexAttention's device check, for every kind of input PyTorch's own check decides on: the
# outcome (result checksum or exception type and message) of each.
FLEX_ATTENTION_OUTCOMES = """
import json, sys, torch
from torch.nn.attention.flex_attention import flex_attention
if sys.argv[1] == "with":
    import torch_neuronx.compile.backend  # what torch.compile(backend="neuron") imports
    import torch_neuronx.compile.workarounds as workarounds
    workarounds.apply()  # a second time: idempotent
torch.manual_seed(0)
cases = {"cpu": dict(device="cpu"), "cpu requires_grad": dict(device="cpu", requires_grad=True),
         "meta": dict(device="meta"), "meta requires_grad": dict(device="meta", requires_grad=True)}
outcomes = {}
for name, kwargs in cases.items():
    q = torch.randn(1, 2, 128, 16, **kwargs)
    try:
        out = flex_attention(q, q, q)
        outcomes[name] = ["ok", str(out.dtype), list(out.shape),
                          None if out.device.type == "meta" else out.double().sum().item()]
    except Exception as error:
        outcomes[name] = [type(error).__name__, str(error)]
print(json.dumps(outcomes))
"""


def outcomes(mode: str, **env: str) -> dict:
    result = subprocess.run([sys.executable, "-c", FLEX_ATTENTION_OUTCOMES, mode], check=True, text=True,
                            capture_output=True, env={**os.environ, "PYTHONPATH": REPO_ROOT, **env})
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_flex_attention_validates_other_devices_exactly_as_without_the_package():
    without = outcomes("without", TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    assert without["cpu requires_grad"][0] == "NotImplementedError"  # PyTorch's check ran
    assert without["meta"][0] == "ValueError"
    assert outcomes("with") == without


EAGER_NEURON = """
import torch
from torch.nn.attention.flex_attention import flex_attention  # the package is loaded by import torch
torch.manual_seed(0)
q = torch.randn(1, 2, 128, 16)
out = flex_attention(q.to("neuron"), q.to("neuron"), q.to("neuron"))
torch.testing.assert_close(out.cpu(), flex_attention(q, q, q))
print("ok")
"""


def test_eager_flex_attention_accepts_neuron_tensors_once_imported():
    # No compile and no backend import: the check is changed when PyTorch imports the module.
    result = subprocess.run([sys.executable, "-W", "ignore", "-c", EAGER_NEURON], text=True, capture_output=True,
                            env={**os.environ, "PYTHONPATH": REPO_ROOT})
    assert result.returncode == 0 and result.stdout.split()[-1] == "ok", result.stderr[-2000:]
