"""The ``Examples`` sections of the entry points' docstrings run under doctest (the documentation site shows them).

Each entry point (``pca``, ``lowrank``, ``window``, ``topics``, ``ingest``, ``DPPCA``, ``pp.pca``) must have an
example, and every line of it must give the output it shows. The examples draw real (unseeded) noise on small
seeded data and show only what does not depend on the draw (shapes, the relation, ``private``), except ``pca``'s
first component on 20,000 rows with a wide spectral gap, whose first coordinate exceeds 0.9 in magnitude far
beyond a 1e-6 false-failure rate (sin² is about 1e-4 where the check fails at 0.19). About 10 s in all.
"""

from __future__ import annotations

import doctest
import importlib

import pytest

ENTRY_POINTS = {
    "pca": ("dppca_dask.api._pca", "pca"),
    "lowrank": ("dppca_dask.api._lowrank", "lowrank"),
    "window": ("dppca_dask.api._window", "window"),
    "topics": ("dppca_dask.api._topics", "topics"),
    "ingest": ("dppca_dask.ingest", "ingest"),
    "DPPCA": ("dppca_dask.estimator", "DPPCA"),
    "pp.pca": ("dppca_dask.pp", "pca"),
}


@pytest.mark.parametrize("name", sorted(ENTRY_POINTS))
def test_the_entry_point_examples_run(name: str) -> None:
    module_name, attribute = ENTRY_POINTS[name]
    if name == "DPPCA":
        pytest.importorskip("sklearn")
    if name == "pp.pca":
        pytest.importorskip("anndata")
    obj = getattr(importlib.import_module(module_name), attribute)
    assert "\n    Examples\n    --------\n" in (obj.__doc__ or ""), f"{name}'s docstring has no Examples section"
    tests = doctest.DocTestFinder(recurse=False).find(obj, name, globs={})
    assert tests and tests[0].examples, f"{name}'s docstring has no doctest examples"
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    failures = []
    for test in tests:
        runner.run(test, out=failures.append)
    assert runner.failures == 0, "".join(failures)
