"""Package attributes loaded on first use (PEP 562), for cheap-to-import packages.

``walstream`` and ``driver`` name their public classes at the top level, but
executors import those packages for one small submodule (errors, codecs, the
block reader), which must not load PySpark's driver side, the engine or gRPC.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, MutableMapping
from typing import Any


def lazy_exports(
    package: str, namespace: MutableMapping[str, Any], exports: dict[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package``: ``exports`` maps each public name
    to the module defining it; a name is imported once, then cached in ``namespace``."""

    def getattr_(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value  # later lookups skip this function
        return value

    def dir_() -> list[str]:
        return sorted({*namespace, *exports})

    return getattr_, dir_
