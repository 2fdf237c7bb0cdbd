"""In-place operators that compute through their out= kernel (self is also the output): they
resize self where the CPU does (addbmm_ on a broadcast input) and raise where it raises, with
its message (addr_, logical_and_, ldexp_ on an input that would have to grow)."""
from __future__ import annotations

import pytest
import torch

from helpers import assert_same

CASES = {
    "addbmm_grows_2d": lambda d: torch.full((1, 1), 2.0, device=d).addbmm_(torch.ones(2, 3, 4, device=d),
                                                                       torch.ones(2, 4, 5, device=d)),
    "addbmm_grows_0d": lambda d: torch.tensor(1.0, device=d).addbmm_(torch.ones(2, 3, 4, device=d),
                                                                   torch.ones(2, 4, 5, device=d)),
    "addbmm_broadcast_row": lambda d: torch.zeros(1, 5, device=d).addbmm_(torch.ones(2, 3, 4, device=d),
                                                                        torch.ones(2, 4, 5, device=d)),
    "addbmm_empty": lambda d: torch.zeros(0, device=d).addbmm_(torch.ones(2, 3, 4, device=d),
                                                             torch.ones(2, 4, 5, device=d)),
    "addr_grows": lambda d: torch.zeros(1, 1, device=d).addr_(torch.ones(3, device=d), torch.ones(4, device=d)),
    "addr_broadcast_row": lambda d: torch.zeros(1, 4, device=d).addr_(torch.ones(3, device=d),
                                                                    torch.ones(4, device=d)),
    "addr_empty": lambda d: torch.zeros(0, device=d).addr_(torch.ones(3, device=d), torch.ones(4, device=d)),
    "addr_out_self_grows": lambda d: (lambda x: torch.addr(x, torch.ones(3, device=d), torch.ones(4, device=d),
                                                           out=x))(torch.zeros(1, 1, device=d)),
    "logical_and_broadcast": lambda d: torch.zeros(1, 4, device=d).logical_and_(torch.ones(3, 4, device=d)),
    "logical_and_fits": lambda d: torch.ones(3, 4, device=d).logical_and_(torch.ones(1, 4, device=d)),
    "ldexp_broadcast": lambda d: torch.ones(1, 4, device=d).ldexp_(torch.ones(3, 4, device=d)),
    "ldexp_fits": lambda d: torch.ones(3, 4, device=d).ldexp_(torch.arange(4, dtype=torch.int32, device=d)),
}


def _outcome(fn, device: str):
    try:
        return fn(device), None
    except RuntimeError as exc:
        return None, str(exc).splitlines()[0]


@pytest.mark.filterwarnings("ignore:An output with one or more elements was resized")
@pytest.mark.parametrize("case", CASES)
def test_like_cpu(case):
    for _ in range(2):  # the second call takes the planned path of a cached signature
        expected, cpu_error = _outcome(CASES[case], "cpu")
        result, device_error = _outcome(CASES[case], "neuron")
        assert device_error == cpu_error
        if cpu_error is None:
            assert_same(expected, result)
