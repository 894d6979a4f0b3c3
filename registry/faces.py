"""A package's public face, imported on first use: `__getattr__ = lazy_face(__name__, {...})`
keeps `import package` cheap while `from package import Name` works (PEP 562)."""
from __future__ import annotations

import importlib
import sys
from typing import Any, Callable, Mapping


def lazy_face(package: str, face: Mapping[str, str]) -> Callable[[str], Any]:
    """`face` maps each public name to the module that defines it."""
    def __getattr__(name: str) -> Any:
        module = face.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)  # later lookups skip this function
        return value
    return __getattr__
