"""``--json`` is strict JSON (infinity as null), the embedded cluster's options, and lowrank's explained rank."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from dppca_dask.cli import _json, main


def _strict_loads(text: str) -> object:
    def refuse(name: str) -> None:
        raise ValueError(f"not strict JSON: {name}")

    return json.loads(text, parse_constant=refuse)


def _store(tmp_path: Path, seed: int) -> str:
    from dppca_dask import write_matrix

    rng = np.random.default_rng(seed)
    matrix = sp.random(400, 12, density=0.3, random_state=rng, format="csr")
    path = str(tmp_path / "m.zarr")
    write_matrix(path, matrix, rows_per_partition=100, schema="declared")
    return path


def test_strict_maps_non_finite_numbers_to_null() -> None:
    value = {"epsilon": math.inf, "delta": 0.0, "figures": {"rdp": "inf", "x": -math.inf, "n": np.float64("nan")},
             "var_ids": ["inf", "nan"], "job_id": "inf", "arr": np.array([1.0, np.inf]), "ok": True, "k": np.int64(3)}
    out = _json.strict(value)
    assert out == {"epsilon": None, "delta": 0.0, "figures": {"rdp": None, "x": None, "n": None},
                   "var_ids": ["inf", "nan"], "job_id": "inf", "arr": [1.0, None], "ok": True, "k": 3}
    json.dumps(out, allow_nan=False)


def test_pca_json_of_a_baseline_is_strict(tmp_path: Path, capsys: pytest.CaptureFixture[str], seed: int,
                                          local_client: object) -> None:
    store = _store(tmp_path, seed)
    code = main(["pca", store, "--epsilon", "1", "--delta", "1e-6", "--mechanism", "exact", "--json"])
    out = capsys.readouterr().out
    assert code == 0
    data = _strict_loads(out)
    assert data["private"] is False and data["privacy"]["epsilon"] is None  # type: ignore[index]


def test_info_and_budget_json_are_strict(tmp_path: Path, capsys: pytest.CaptureFixture[str], seed: int) -> None:
    store = _store(tmp_path, seed)
    assert main(["info", store, "--json"]) == 0
    assert _strict_loads(capsys.readouterr().out)["n_cols"] == 12  # type: ignore[index]
    ledger = str(tmp_path / "budget.db")
    assert main(["budget", "init", "--ledger", ledger, "--dataset", "d", "--total-epsilon", "1",
                 "--total-delta", "1e-6"]) == 0
    capsys.readouterr()
    assert main(["budget", "show", "--ledger", ledger, "--json"]) == 0
    shown = _strict_loads(capsys.readouterr().out)
    assert shown["datasets"][0]["total_epsilon"] == 1.0  # type: ignore[index]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--n-workers", "0"], "n_workers must be an integer >= 1; got 0"),
        (["--threads-per-worker", "0"], "threads_per_worker must be an integer >= 1; got 0"),
        (["--memory-limit", "lots"], "memory_limit must be bytes"),
    ],
)
def test_bad_cluster_options_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str],
                                    message: str) -> None:
    code = main(["pca", str(tmp_path / "none.zarr"), "--epsilon", "1", "--delta", "1e-6", *argv])
    assert code == 2
    assert message in capsys.readouterr().err


def test_cluster_options_land_in_dask_config(monkeypatch: pytest.MonkeyPatch) -> None:
    import argparse

    import dask.config

    from dppca_dask.cli._cluster import apply_cluster_arguments

    args = argparse.Namespace(n_workers=3, threads_per_worker=None, memory_limit="2GiB", dashboard_address=None)
    before = dask.config.get("dppca_dask.cluster.n-workers", default=None)
    with apply_cluster_arguments(args):
        assert dask.config.get("dppca_dask.cluster.n-workers") == 3
        assert dask.config.get("dppca_dask.cluster.memory-limit") == "2GiB"
    assert dask.config.get("dppca_dask.cluster.n-workers", default=None) == before  # restored after the command


def test_lowrank_explains_its_rank_and_epsilon(tmp_path: Path, capsys: pytest.CaptureFixture[str], seed: int,
                                               local_client: object) -> None:
    store = _store(tmp_path, seed)
    code = main(["lowrank", store, "--rank", "3", "--epsilon", "1", "--delta", "1e-6", "--out",
                 str(tmp_path / "out")])
    text = capsys.readouterr().out
    assert code == 0
    assert "rank: 5 (factors 400x5 and 5x12): the requested rank 3 + oversampling 2" in text
    assert "is the whole run's: the accountant composes every noisy step" in text
