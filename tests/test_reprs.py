"""Every result type prints a short repr: its type, mechanism, shape, privacy summary and diagnostics in a few
lines, never its arrays (a PCAResult's default dataclass repr was 26,801 characters over 373 lines)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dppca_dask import load_lowrank, load_result, lowrank, pca

pytestmark = pytest.mark.filterwarnings("ignore::dppca_dask.errors.NotPrivateWarning")

#: The bound every repr meets: a few lines, none of them long.
MAX_LINES, MAX_CHARS = 8, 800


def check_short(text: str, *must: str) -> None:
    lines = text.splitlines()
    assert len(lines) <= MAX_LINES and len(text) <= MAX_CHARS, text
    assert all(len(line) <= 160 for line in lines)
    for word in must:
        assert word in text, (word, text)


@pytest.fixture(scope="module")
def released(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    rng = np.random.default_rng(0)
    rows = rng.standard_normal((2_000, 300)) / np.sqrt(300)
    result = pca(rows, epsilon=1.0, delta=1e-6, n_components=5, mechanism="adaptive-power-block", center=True,
                 client="local", progress=False, seed=0)
    low = lowrank(rows, rank=3, epsilon=1.0, delta=1e-6, client="local", seed=0)
    directory = tmp_path_factory.mktemp("results")
    return {"pca": result, "loaded": load_result(result.save(directory / "pca")), "lowrank": low,
            "loaded_lowrank": load_lowrank(low.save(directory / "lowrank"))}


def test_pca_results_are_short(released: dict[str, Any]) -> None:
    for name in ("pca", "loaded"):
        text = repr(released[name])
        check_short(text, "PCAResult", "adaptive-power-block", "5x300", "privacy:", "diagnostics:",
                    "explained_variance_ratio")


def test_lowrank_results_are_short(released: dict[str, Any]) -> None:
    for name in ("lowrank", "loaded_lowrank"):
        check_short(repr(released[name]), "LowRankResult", "2000x300", "privacy:", "diagnostics:")


def test_tensor_and_topic_results_are_short(released: dict[str, Any]) -> None:
    from dppca_dask.methods.tensor.power import TensorPowerResult
    from dppca_dask.methods.tensor.private import PrivateTensorResult
    from dppca_dask.methods.tensor.rows import RowMomentResult
    from dppca_dask.methods.tensor.topics import TopicResult

    report = released["pca"].privacy
    k, d = 5, 500
    topics = np.full((k, d), 1.0 / d)
    check_short(repr(TopicResult(topics=topics, weights=np.full(k, 0.2), eigenvalues=np.ones(k), privacy=report,
                                 provenance={"big": list(range(10_000))})), "TopicResult", "5 topics", "privacy:")
    check_short(repr(PrivateTensorResult(eigenvalues=np.ones(k), components=np.ones((k, d)), privacy=report,
                                         calibration=None)), "PrivateTensorResult", "privacy:")
    check_short(repr(TensorPowerResult(eigenvalues=np.ones(k), components=np.ones((k, d)), n_queries=40)),
                "TensorPowerResult", "5 eigenpairs")
    check_short(repr(RowMomentResult(eigenvalues=np.ones(k), components=np.ones((k, d)),
                                     thresholds=np.ones((k, 6)), privacy=report, noise_multiplier=1.0)),
                "RowMomentResult", "privacy:")
