"""Data shipped inside installed packages (model weights, benchmark tables, the sample dump)."""
from __future__ import annotations

import importlib.util
from pathlib import Path


def installed_dir(module: str, error: type[Exception], message: str) -> Path:
    """The directory of the installed package ``module``, found without importing it (its files are
    wanted, not its code, which may be slow or heavy to import); ``error(message)`` when it is not installed."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise error(message)
    return Path(list(spec.submodule_search_locations)[0])
