"""Invariant 9: the schema is public input. A release from a store whose width was inferred from the data warns
and says in its privacy report that the shape is not covered; a declared width gives a plain report."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from dppca_dask import ingest, pca
from dppca_dask.cli import main
from dppca_dask.coordinator.sources import INFERRED_SCHEMA_CAVEAT
from dppca_dask.errors import InferredSchemaWarning
from dppca_dask.mechanisms.testing import AuditingNoiseSource


@pytest.fixture
def stores(tmp_path: Path, rng: np.random.Generator) -> tuple[str, str]:
    matrix = sp.random(400, 12, density=0.3, random_state=rng, format="csr")
    sp.save_npz(tmp_path / "m.npz", matrix)
    inferred = str(tmp_path / "inferred.zarr")
    declared = str(tmp_path / "declared.zarr")
    ingest(str(tmp_path / "m.npz"), inferred, progress=False)
    ingest(str(tmp_path / "m.npz"), declared, n_features=12, progress=False)
    return inferred, declared


def test_an_inferred_width_warns_and_is_a_caveat_of_the_report(stores: tuple[str, str], seed: int) -> None:
    inferred, declared = stores
    with pytest.warns(InferredSchemaWarning, match="--n-features"):
        result = pca(inferred, epsilon=1.0, delta=1e-6, n_iter=1, client="local", noise=AuditingNoiseSource(seed),
                     progress=False)
    assert result.privacy.caveats == (INFERRED_SCHEMA_CAVEAT,)
    assert INFERRED_SCHEMA_CAVEAT in result.privacy.summary()
    assert result.to_dict()["privacy"]["caveats"] == [INFERRED_SCHEMA_CAVEAT]
    assert result.provenance["input"]["schema"] == "inferred"
    with warnings.catch_warnings():
        warnings.simplefilter("error", InferredSchemaWarning)
        plain = pca(declared, epsilon=1.0, delta=1e-6, n_iter=1, client="local", noise=AuditingNoiseSource(seed),
                    progress=False)
    assert plain.privacy.caveats == () and "not covered" not in plain.privacy.summary()


def test_the_pca_command_states_the_caveat(stores: tuple[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    inferred, _ = stores
    with pytest.warns(InferredSchemaWarning, match="--n-features"):
        assert main(["pca", inferred, "--epsilon", "1", "--delta", "1e-6", "--n-iter", "1", "--scheduler", "local",
                     "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["privacy"]["caveats"] == [INFERRED_SCHEMA_CAVEAT]


def test_lowrank_states_the_caveat_and_keeps_timings_out_unless_asked(stores: tuple[str, str], seed: int) -> None:
    from dppca_dask import lowrank

    inferred, declared = stores
    with pytest.warns(InferredSchemaWarning):
        result = lowrank(inferred, rank=1, epsilon=1.0, delta=1e-6, client="local", noise=AuditingNoiseSource(seed))
    assert result.privacy.caveats == (INFERRED_SCHEMA_CAVEAT,)
    assert "timings" not in result.to_dict() and result.provenance["noise_sampler"] == "float"
    with warnings.catch_warnings():
        warnings.simplefilter("error", InferredSchemaWarning)
        timed = lowrank(declared, rank=1, epsilon=1.0, delta=1e-6, client="local", noise=AuditingNoiseSource(seed),
                        timings=True)
    assert timed.privacy.caveats == ()
    assert "NOT covered by the privacy guarantee" in timed.to_dict()["timings"]["note"]


def test_topics_and_the_tree_state_the_caveat(tmp_path: Path, stores: tuple[str, str], seed: int) -> None:
    """Invariant 9 for the releases that had no caveat: topics and the binary-tree window release."""
    from dppca_dask.api import topics
    from dppca_dask.methods.window.tree import TREE_CAVEAT, tree_window

    inferred, declared = stores
    counts = sp.csr_array(np.random.default_rng(seed).poisson(1.0, (60, 8)).astype(float))
    sp.save_npz(tmp_path / "counts.npz", counts)
    ingest(str(tmp_path / "counts.npz"), str(tmp_path / "words.zarr"), progress=False)
    args = {"n_topics": 2, "epsilon": 1.0, "delta": 1e-6, "n_restarts": 1, "n_iter": 2, "pca_iter": 2,
            "client": "local"}
    with pytest.warns(InferredSchemaWarning, match="--n-features"):
        result = topics(str(tmp_path / "words.zarr"), noise=AuditingNoiseSource(seed), **args)
    assert INFERRED_SCHEMA_CAVEAT in result.privacy.caveats
    ingest(str(tmp_path / "counts.npz"), str(tmp_path / "declared-words.zarr"), n_features=8, progress=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error", InferredSchemaWarning)
        plain = topics(str(tmp_path / "declared-words.zarr"), noise=AuditingNoiseSource(seed), **args)
    assert INFERRED_SCHEMA_CAVEAT not in plain.privacy.caveats

    def stamped(path: str, n_features: int | None) -> str:
        out = str(tmp_path / path)
        ingest(str(tmp_path / "m.npz"), out, n_features=n_features, timestamp="2026-11-01", progress=False)
        return out

    with pytest.warns(InferredSchemaWarning, match="--n-features"):
        tree = tree_window(stamped("t-inferred.zarr", None), last="1D", epsilon=1, delta=1e-6, horizon=4,
                           client="local", noise=AuditingNoiseSource(seed))
    assert tree.privacy.caveats == (INFERRED_SCHEMA_CAVEAT, TREE_CAVEAT)
    with warnings.catch_warnings():
        warnings.simplefilter("error", InferredSchemaWarning)
        plain_tree = tree_window(stamped("t-declared.zarr", 12), last="1D", epsilon=1, delta=1e-6, horizon=4,
                                 client="local", noise=AuditingNoiseSource(seed))
    assert plain_tree.privacy.caveats == (TREE_CAVEAT,)
