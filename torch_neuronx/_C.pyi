# The C++ extension (csrc/shim/module.cpp): type checkers see its functions as untyped.
from typing import Any

def __getattr__(name: str) -> Any: ...
