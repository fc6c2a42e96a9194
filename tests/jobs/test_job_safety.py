"""What a job refuses before reserving (a missing ledger, an inferred schema, another store under a key, bad lowrank
parameters, an output path that is a file, a result already published), the refund rule, the lock through a
symlinked ledger, owner-only files and no entry counts at INFO."""

from __future__ import annotations

import json
import logging
import os
import stat
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from jobs_helpers import base_doc, declare_schema

from dppca_dask.cli import main
from dppca_dask.ledger import CHARGED, Ledger

DATE = "2026-03-01"


def _run(spec: Path, address: str, *extra: str) -> int:
    return main(["run", str(spec), "--scheduler", address, "--date", DATE, *extra])


def test_run_never_creates_a_ledger(tmp_path: Path, small_store: str, write_spec, capsys) -> None:
    spec = write_spec(base_doc(tmp_path, small_store), init=False)
    assert main(["run", str(spec), "--date", DATE]) == 2
    err = capsys.readouterr().err
    assert "does not exist" in err and "dppca-dask budget init --ledger" in err and "Traceback" not in err
    assert not (tmp_path / "ledger.sqlite").exists() and not (tmp_path / "out").exists()
    Ledger.create(tmp_path / "ledger.sqlite")  # a ledger without the key's budget is refused as well
    assert main(["run", str(spec), "--date", DATE]) == 2
    assert "dataset 'ds' has no budget" in capsys.readouterr().err


def test_an_inferred_schema_is_refused_and_a_declared_one_accepted(tmp_path: Path, small_store: str, local_client,
                                                                    write_spec, capsys) -> None:
    import shutil

    inferred = tmp_path / "inferred.zarr"
    shutil.copytree(small_store, inferred)
    declare_schema(inferred, None)
    spec = write_spec(base_doc(tmp_path, str(inferred)))
    address = local_client.scheduler.address
    assert _run(spec, address) == 2
    err = capsys.readouterr().err
    assert "width inferred from the data" in err and "--n-features D" in err and "[data] n_features" in err
    assert Ledger(tmp_path / "ledger.sqlite").budget("ds").entries == ()
    doc = base_doc(tmp_path, str(inferred))
    doc["data"]["n_features"] = 300  # the store's width, declared in the spec: the store's own is still inferred
    assert _run(write_spec(doc), address) == 2
    assert "width inferred from the data" in capsys.readouterr().err
    assert Ledger(tmp_path / "ledger.sqlite").budget("ds").entries == ()
    doc = base_doc(tmp_path, small_store)  # declared at ingest
    doc["data"]["n_features"] = 299  # a declared width the store does not have
    assert _run(write_spec(doc), address) == 2
    assert "n_features = 299 is declared but the store" in capsys.readouterr().err
    doc["data"]["n_features"] = 300
    assert _run(write_spec(doc), address, "--json") == 0
    assert json.loads(capsys.readouterr().out)["ledger"]["status"] == CHARGED


def test_a_dataset_key_refuses_another_store_unless_told(tmp_path: Path, small_store: str, local_client,
                                                         write_spec, capsys) -> None:
    from dppca_dask.datasets import PlantedSpec, write_low_coherence

    other = tmp_path / "other.zarr"
    write_low_coherence(other, PlantedSpec(n_rows=4_000, n_cols=300, nnz_per_row=20, support=40,
                                           signal_share=0.02, seed=12), rows_per_partition=2_000, progress=False)
    declare_schema(other)
    address = local_client.scheduler.address
    doc = base_doc(tmp_path, small_store, n_iter=2)
    doc["privacy"]["epsilon"] = 0.2
    assert _run(write_spec(doc), address) == 0
    doc["data"]["store"] = str(other)
    doc["job"]["name"] = "second"
    spec = write_spec(doc)
    capsys.readouterr()
    assert _run(spec, address) == 2
    assert "was budgeted on store" in capsys.readouterr().err
    assert Ledger(tmp_path / "ledger.sqlite").entry("ds", f"second@{DATE}") is None
    assert _run(spec, address, "--allow-new-store") == 0
    from dppca_dask.storage import open_matrix

    assert Ledger(tmp_path / "ledger.sqlite").budget("ds").store_id == open_matrix(other).store_id


@pytest.mark.parametrize("mechanism, parameters, message", [
    ("private-low-rank", {"rank": 2, "projection": "magic"}, "projection must be 'paper' or 'tight'"),
    ("private-low-rank", {"rank": 299, "oversampling": 2}, "rank \\+ oversampling = 301 must be <= min"),
    ("private-low-rank", {"rank": 2, "prune_alpha": -1.0}, "prune_alpha must be finite and > 0"),
    ("randomized-response", {"rank": 2, "max_dense_bytes": 1000}, "more than max_dense_bytes=1000"),
    ("private-low-rank", {"rank": 2, "row_norm_bound": float("inf")}, "row_norm_bound=inf leaves rows unbounded"),
    ("private-power", {"n_iter": 0}, "n_iter must be"),
])
def test_lowrank_and_pca_parameters_are_validated_before_reserving(tmp_path: Path, small_store: str, write_spec,
                                                                    capsys, mechanism, parameters, message) -> None:
    doc = base_doc(tmp_path, small_store)
    doc["mechanism"] = {"name": mechanism, **parameters}
    assert main(["run", str(write_spec(doc)), "--date", DATE, "--scheduler", "tcp://127.0.0.1:1"]) == 2
    assert pytest.importorskip("re").search(message, capsys.readouterr().err)
    budget = Ledger(tmp_path / "ledger.sqlite").budget("ds")
    assert budget.entries == () and budget.neighbouring is None  # nothing reserved; the relation not pinned


def test_an_output_path_that_is_a_file_fails_before_reserving(tmp_path: Path, small_store: str, write_spec,
                                                             capsys) -> None:
    blocker = tmp_path / "out"
    blocker.write_text("not a directory")
    spec = write_spec(base_doc(tmp_path, small_store))
    assert main(["run", str(spec), "--date", DATE, "--scheduler", "tcp://127.0.0.1:1"]) == 2
    err = capsys.readouterr().err
    assert "is a file, not a directory" in err and "Traceback" not in err
    assert Ledger(tmp_path / "ledger.sqlite").budget("ds").entries == ()
    doc = base_doc(tmp_path, small_store)
    doc["output"]["path"] = str(blocker)  # the output directory itself is a file
    assert main(["run", str(write_spec(doc)), "--date", DATE, "--scheduler", "tcp://127.0.0.1:1"]) == 2
    assert "exists and is not a directory" in capsys.readouterr().err


def test_an_unusable_scheduler_or_sampler_setting_fails_before_reserving(tmp_path: Path, small_store: str,
                                                                         write_spec, capsys, monkeypatch) -> None:
    spec = write_spec(base_doc(tmp_path, small_store))
    assert main(["run", str(spec), "--date", DATE, "--scheduler", "tcp://127.0.0.1:1"]) == 2  # nothing listens
    err = capsys.readouterr().err
    assert "Traceback" not in err and "127.0.0.1:1" in err
    assert Ledger(tmp_path / "ledger.sqlite").budget("ds").entries == ()
    monkeypatch.setenv("DPPCA_NOISE_SAMPLER", "fast")
    assert main(["run", str(spec), "--date", DATE]) == 2
    assert "DPPCA_NOISE_SAMPLER" in capsys.readouterr().err
    assert Ledger(tmp_path / "ledger.sqlite").budget("ds").entries == ()


def test_a_published_result_is_never_released_again(tmp_path: Path, small_store: str, local_client, write_spec,
                                                    capsys) -> None:
    """The output holds this job id's result but the ledger does not know it (replaced by a new, empty ledger)."""
    doc = base_doc(tmp_path, small_store, n_iter=2)
    spec = write_spec(doc)
    address = local_client.scheduler.address
    assert _run(spec, address) == 0
    (tmp_path / "ledger.sqlite").unlink()
    assert main(["budget", "init", "--ledger", str(tmp_path / "ledger.sqlite"), "--dataset", "ds",
                 "--total-epsilon", "1", "--total-delta", "1e-6"]) == 0
    capsys.readouterr()
    out = tmp_path / "out" / "test-job" / DATE
    before = (out / "result.json").read_text()
    assert _run(spec, address) == 2
    assert "already holds a result of job 'test-job@2026-03-01'" in capsys.readouterr().err
    assert (out / "result.json").read_text() == before
    assert Ledger(tmp_path / "ledger.sqlite").budget("ds").entries == ()


def test_a_failure_after_reading_data_values_keeps_the_charge(tmp_path: Path, small_store: str, local_client,
                                                              write_spec, capsys, monkeypatch) -> None:
    """A failure after the first step aggregated data values, before any data-dependent noise, is charged, never
    refunded: whether it happens may depend on the data (fault injected where the SVT would draw)."""
    import dppca_dask.methods.adaptive_power.sequential as adaptive_power

    def failing_svt(*args: object, **kwargs: object) -> None:
        raise RuntimeError("injected failure after the data were read")

    monkeypatch.setattr(adaptive_power, "above_threshold", failing_svt)
    doc = base_doc(tmp_path, small_store, n_iter=2)
    assert _run(write_spec(doc), local_client.scheduler.address) == 1
    assert "RuntimeError" in capsys.readouterr().err
    entry = Ledger(tmp_path / "ledger.sqlite").entry("ds", f"test-job@{DATE}")
    assert (entry.status, entry.outcome) == (CHARGED, "failed")


def test_private_power_symmetric_runs_on_an_asymmetric_store(tmp_path: Path, local_client, write_spec) -> None:
    """`symmetric` symmetrises instead of checking: an asymmetric neighbour of a symmetric store takes the same
    path (no free bit), and the job completes under its reservation."""
    from dppca_dask.ingest import ingest

    rng = np.random.default_rng(5)
    matrix = sp.random(60, 60, density=0.1, random_state=rng, format="csr")  # square, not symmetric
    sp.save_npz(tmp_path / "square.npz", matrix)
    store = tmp_path / "square.zarr"
    ingest(str(tmp_path / "square.npz"), str(store), rows_per_partition=30, n_features=60)
    doc = base_doc(tmp_path, str(store))
    doc["mechanism"] = {"name": "private-power", "symmetric": True, "n_iter": 2}
    assert _run(write_spec(doc), local_client.scheduler.address) == 0
    entry = Ledger(tmp_path / "ledger.sqlite").entry("ds", f"test-job@{DATE}")
    assert (entry.status, entry.outcome) == (CHARGED, "succeeded")

def test_the_job_lock_holds_through_a_symlinked_ledger(tmp_path: Path, small_store: str, write_spec,
                                                       capsys) -> None:
    from dppca_dask.jobs.steps import job_lock

    doc = base_doc(tmp_path, small_store)
    write_spec(doc)  # creates the ledger at its real path
    link = tmp_path / "linked.sqlite"
    link.symlink_to(tmp_path / "ledger.sqlite")
    doc["budget"]["ledger"] = str(link)
    spec = write_spec(doc)
    with job_lock(Ledger(tmp_path / "ledger.sqlite"), "ds", f"test-job@{DATE}"):  # a run through the real path
        assert main(["run", str(spec), "--date", DATE]) == 2
    assert "already running in another process" in capsys.readouterr().err
    assert Ledger(link).entry("ds", f"test-job@{DATE}") is None
    with job_lock(Ledger(link), "ds", f"test-job@{DATE}"):  # and the other way round
        assert main(["budget", "resolve", "--ledger", str(tmp_path / "ledger.sqlite"), "--job-id", "x"]) == 2
    capsys.readouterr()


def test_files_are_owner_only_and_counts_stay_out_of_info_logs(tmp_path: Path, local_client, write_spec, caplog,
                                                               capsys) -> None:
    from sklearn.datasets import dump_svmlight_file

    rng = np.random.default_rng(9)
    matrix = sp.random(3_001, 40, density=0.0731, random_state=rng, format="csr")
    source = tmp_path / "data.svm"
    dump_svmlight_file(matrix, np.zeros(matrix.shape[0]), str(source), zero_based=True)
    doc = base_doc(tmp_path, str(tmp_path / "store.zarr"), n_iter=2)
    doc["data"]["ingest"] = {"source": str(source), "n_features": 40, "zero_based": True}
    spec = write_spec(doc)
    old = os.umask(0o022)
    try:
        with caplog.at_level(logging.INFO, logger="dppca_dask"):
            assert _run(spec, local_client.scheduler.address) == 0
    finally:
        os.umask(old)
    capsys.readouterr()
    # The next day's refresh writes a new store (new store_id) from the same source: still the key's store.
    assert main(["run", str(spec), "--scheduler", local_client.scheduler.address, "--date", "2026-03-02"]) == 3
    assert "budget exceeded" in capsys.readouterr().err
    counts = {str(matrix.nnz), str(matrix.shape[0])}
    info = [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO]
    assert info and not [m for m in info if any(c in m for c in counts)]
    assert "store" in " ".join(info)  # the count-free line about the refresh
    out = tmp_path / "out" / "test-job" / DATE
    assert stat.S_IMODE(out.stat().st_mode) == 0o700
    for path in [out / "job.json", out / "result.json", tmp_path / "ledger.sqlite"]:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    for path in out.rglob("*"):
        assert stat.S_IMODE(path.stat().st_mode) == (0o700 if path.is_dir() else 0o600), path


def test_no_module_of_the_package_imports_fcntl() -> None:
    """Locks use the portable ``filelock`` package: fcntl is POSIX-only, and importing it made the package
    unimportable elsewhere."""
    import ast

    import dppca_dask

    root = Path(dppca_dask.__file__).parent
    offenders = []
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            if any(name.split(".")[0] == "fcntl" for name in names):
                offenders.append(str(path.relative_to(root)))
    assert offenders == []


def test_store_ids_and_schemas(tmp_path: Path, small_store: str) -> None:
    """A dppca_dask store's id is its recorded store_id; an AnnData store opened directly gets one derived from its
    format metadata and path, the same at every opening. The schema comes from ``MatrixStore.schema`` when the
    storage layer has it, else from the root group attribute (absent: inferred)."""
    from types import SimpleNamespace

    from dppca_dask.jobs.steps import store_id, store_schema
    from dppca_dask.storage import open_matrix

    native = open_matrix(small_store)
    assert store_id(native) == native.store_id and store_schema(native) == "declared"
    anndata = pytest.importorskip("anndata")
    matrix = sp.random(50, 8, density=0.3, random_state=np.random.default_rng(1), format="csr")
    path = tmp_path / "cells.zarr"
    anndata.AnnData(X=matrix).write_zarr(str(path))
    first, second = open_matrix(path), open_matrix(path)
    assert store_id(first).startswith("derived:") and store_id(first) == store_id(second)
    assert store_schema(first) == "inferred"
    copy = tmp_path / "copy.zarr"
    import shutil

    shutil.copytree(path, copy)
    assert store_id(open_matrix(copy)) != store_id(first)  # another store
    assert store_schema(SimpleNamespace(schema="declared", path=str(path))) == "declared"
    assert store_schema(SimpleNamespace(schema="inferred", path=small_store)) == "inferred"
