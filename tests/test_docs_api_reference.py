"""The documentation's API reference (docs/api/index.rst) documents every public name of ``dppca_dask``,
``dppca_dask.estimator`` and ``dppca_dask.pp``: a name added to an ``__all__`` without its entry fails here."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

API_PAGE = Path(__file__).resolve().parent.parent / "docs" / "api" / "index.rst"


def _documented() -> set[str]:
    text = API_PAGE.read_text()
    names = set(re.findall(r"^\.\. (?:autofunction|autoclass|autodata|py:data):: ([\w.]+)", text, flags=re.M))
    return names


@pytest.mark.parametrize("module_name", ["dppca_dask", "dppca_dask.estimator", "dppca_dask.pp"])
def test_every_public_name_has_an_entry(module_name: str) -> None:
    if module_name == "dppca_dask.estimator":
        pytest.importorskip("sklearn")
    module = importlib.import_module(module_name)
    documented = _documented()
    missing = []
    for name in module.__all__:
        # documented where it is exported or where it is defined (the package's lazy map names the module:
        # dppca_dask.mechanisms is also a subpackage, whose import hides the function of that name)
        home = getattr(module, "_LAZY", {}).get(name) or getattr(getattr(module, name), "__module__", None)
        candidates = {f"{module_name}.{name}", f"{home}.{name}"}
        if not candidates & documented:
            missing.append(name)
    assert not missing, f"{API_PAGE} has no entry for {module_name}: {missing}"
