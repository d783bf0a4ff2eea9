"""How to install this package and its extras (it is not on the package index yet: from its git repository, as the
README's Install says), and imports of optional dependencies that say which extra brings them."""
from __future__ import annotations

import importlib
from types import ModuleType

__all__ = []

REPOSITORY = 'https://github.com/fastai-gpu-tabular/fastai_gpu_tabular'   # pyproject.toml's Repository (tested)

def install_command(extra:str|None=None) -> str:
    "The pip command that installs this package, with `extra`, from its git repository."
    return f'pip install "fastai_gpu_tabular{f"[{extra}]" if extra else ""} @ git+{REPOSITORY}"'

def import_extra(module:str, extra:str, what:str) -> ModuleType:
    "`import module`, or a ModuleNotFoundError saying that `what` needs it and how to install the `extra` bringing it"
    try: return importlib.import_module(module)
    except ModuleNotFoundError as e:
        if e.name is None or e.name.split('.')[0] != module.split('.')[0]: raise   # a dependency of it is missing
        raise ModuleNotFoundError(f"{what} needs {module}, which comes with this package's `{extra}` extra: "
                                  f"{install_command(extra)} (in a clone: pip install \".[{extra}]\")",
                                  name=e.name) from e
