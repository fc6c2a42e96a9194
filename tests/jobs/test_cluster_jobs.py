"""Jobs against real ``dask scheduler`` / ``dask worker`` processes on loopback started by ``cluster/local.sh``:
plain TCP, TLS, and a worker killed mid-job."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
import warnings
from pathlib import Path

import numpy as np
from _local_cluster import running_cluster
from jobs_helpers import base_doc, daily_store, declare_schema

from dppca_dask.cli import main
from dppca_dask.jobs import load_job, run_job
from dppca_dask.ledger import CHARGED, Ledger


def test_job_on_a_local_sh_cluster_twice_with_a_budget_for_one(tmp_path: Path, small_store: str, loopback_cluster,
                                                              write_spec, capsys) -> None:
    doc = base_doc(tmp_path, small_store)
    doc["cluster"] = {"address": loopback_cluster.address}
    spec = str(write_spec(doc))
    assert main(["run", spec, "--date", "2026-05-01"]) == 0
    assert "completed" in capsys.readouterr().out
    assert main(["run", spec, "--date", "2026-05-02"]) == 3
    assert "budget exceeded" in capsys.readouterr().err
    assert main(["budget", "show", "--ledger", str(tmp_path / "ledger.sqlite")]) == 0
    shown = capsys.readouterr().out
    assert "test-job@2026-05-01" in shown and "test-job@2026-05-02" in shown and "refused" in shown


def test_job_over_tls(tmp_path: Path, small_store: str, loopback_tls_cluster, write_spec, capsys) -> None:
    certs = loopback_tls_cluster.cert_dir
    doc = base_doc(tmp_path, small_store)
    doc["cluster"] = {"address": loopback_tls_cluster.address, "tls_ca_file": str(certs / "ca.pem"),
                      "tls_cert": str(certs / "node.pem"), "tls_key": str(certs / "node-key.pem")}
    assert loopback_tls_cluster.address.startswith("tls://")
    assert main(["run", str(write_spec(doc)), "--date", "2026-05-01", "--json"]) == 0
    outcome = json.loads(capsys.readouterr().out)
    assert outcome["status"] == "completed" and outcome["ledger"]["status"] == CHARGED
    doc["cluster"]["tls_key"] = str(tmp_path / "missing-key.pem")
    assert main(["run", str(write_spec(doc)), "--date", "2026-05-02"]) == 2
    assert "tls_key" in capsys.readouterr().err
    assert Ledger(tmp_path / "ledger.sqlite").entry("ds", "test-job@2026-05-02") is None  # refused before reserving


def test_window_job_over_tls(tmp_path: Path, loopback_tls_cluster, write_spec, capsys) -> None:
    """A sliding-window job reaches a TLS-only scheduler with the spec's ``[cluster] tls*`` settings, as an
    ordinary job does; a missing key file fails before anything is reserved."""
    certs = loopback_tls_cluster.cert_dir
    doc = base_doc(tmp_path, daily_store(tmp_path / "days.zarr"))
    doc["job"] = {"name": "win"}
    doc["mechanism"] = {"name": "sliding-window", "last": "7D", "release": "gaussian"}
    doc["privacy"]["epsilon"] = 0.3  # two releases on the same partitions fit the budget
    doc["cluster"] = {"address": loopback_tls_cluster.address, "tls_ca_file": str(certs / "ca.pem"),
                      "tls_cert": str(certs / "node.pem"), "tls_key": str(certs / "node-key.pem")}
    assert main(["run", str(write_spec(doc)), "--date", "2026-11-03", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["status"] == "completed"
    saved = json.loads((tmp_path / "out" / "win" / "2026-11-03" / "release.json").read_text())
    assert saved["provenance"]["executor"] == "cluster"
    assert Ledger(tmp_path / "ledger.sqlite").find("win@2026-11-03")
    doc["cluster"]["tls_key"] = str(tmp_path / "missing-key.pem")
    assert main(["run", str(write_spec(doc)), "--date", "2026-11-02"]) == 2
    assert "tls_key" in capsys.readouterr().err
    assert not Ledger(tmp_path / "ledger.sqlite").find("win@2026-11-02")  # refused before reserving
    # a scheduler address given by the caller is reached with the spec's TLS settings too
    doc["cluster"]["tls_key"] = str(certs / "node-key.pem")
    outcome = run_job(load_job(write_spec(doc)), date="2026-11-02", client=loopback_tls_cluster.address)
    assert outcome.status == "completed" and outcome.result.provenance["executor"] == "cluster"


def test_worker_killed_mid_job(tmp_path: Path, write_spec) -> None:
    """SIGKILL a worker after two releases: the job completes, is charged once, and its result is identical to an
    uninterrupted run with the same seeded noise (so no release drew its noise twice)."""
    from distributed import Client

    from dppca_dask.datasets import PlantedSpec, write_low_coherence
    from dppca_dask.mechanisms import NoiseSource

    store = tmp_path / "store.zarr"
    write_low_coherence(store, PlantedSpec(n_rows=60_000, n_cols=300, nnz_per_row=25, support=50,
                                           signal_share=0.02, seed=8), rows_per_partition=6_000, progress=False)
    declare_schema(store)
    with running_cluster(tmp_path / "cluster", workers=2) as cluster:
        doc = base_doc(tmp_path, str(store), n_iter=12, persist=False)
        doc["cluster"] = {"address": cluster.address}
        spec = load_job(write_spec(doc))
        checkpoint = Path(spec.output_dir("2026-06-01")) / "checkpoint.json"
        killed: list[int] = []

        def killer() -> None:
            with Client(cluster.address, set_as_default=False, timeout="30s") as watcher:
                pids = list(watcher.run(os.getpid).values())
                deadline = time.monotonic() + 120
                while time.monotonic() < deadline:
                    try:
                        if checkpoint.exists() and json.loads(checkpoint.read_text())["releases"] >= 2:
                            os.kill(pids[0], signal.SIGKILL)
                            killed.append(pids[0])
                            return
                    except (OSError, ValueError, KeyError):
                        pass
                    time.sleep(0.005)

        thread = threading.Thread(target=killer, daemon=True)
        with warnings.catch_warnings():
            from dppca_dask.errors import NotPrivateWarning
            warnings.simplefilter("ignore", NotPrivateWarning)  # seeded noise: reproducible, not private (the point of the test)
            noise = NoiseSource.from_seed(17)
            thread.start()
            outcome = run_job(spec, date="2026-06-01", noise=noise)
            thread.join(timeout=30)
            assert killed, "the worker was not killed during the job"
            assert len(noise.released_keys) == 1 + 2 * 12  # start vector + SVT and Gaussian per iteration
            entry = Ledger(spec.budget.ledger).entry("ds", "test-job@2026-06-01")
            assert (entry.status, entry.attempts) == (CHARGED, 1)
    with warnings.catch_warnings():
        from dppca_dask.errors import NotPrivateWarning
        warnings.simplefilter("ignore", NotPrivateWarning)
        from dppca_dask import pca

        reference = pca(str(store), epsilon=0.8, delta=1e-7, n_iter=12, client="local", seed=17,
                        mechanism="adaptive-power")
    # Same noise, same released thresholds; the components differ only by the order of floating-point sums.
    np.testing.assert_array_equal(outcome.result.thresholds, reference.thresholds)
    np.testing.assert_allclose(outcome.result.components, reference.components, rtol=0, atol=1e-9)
    assert outcome.result.privacy.private is False  # seeded; the ledger charged it all the same
