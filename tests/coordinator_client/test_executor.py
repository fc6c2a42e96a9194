"""The executor choice: in this process (an ``InProcessClient`` under the same coordinator) or on Dask."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import dask.config
import numpy as np
import pytest
import scipy.sparse as sp

import dppca_dask
from dppca_dask.coordinator import Coordinator, as_source, run_algorithm
from dppca_dask.coordinator.client import EXECUTORS, InProcessClient, choose_executor, executor_client
from dppca_dask.errors import InvalidParameterError
from dppca_dask.storage import write_matrix


@pytest.fixture
def store(tmp_path: Path, rng: np.random.Generator) -> str:
    matrix = sp.random(300, 20, density=0.2, format="csr", random_state=np.random.RandomState(3))
    return str(write_matrix(tmp_path / "m.zarr", matrix, rows_per_partition=100, schema="declared").path)


def test_config_defaults() -> None:
    assert EXECUTORS == ("auto", "local", "cluster")
    assert dask.config.get("dppca_dask.executor.default") == "auto"
    assert dask.config.get("dppca_dask.executor.in-process-max-partitions") == 16
    assert dask.config.get("dppca_dask.executor.in-process-max-columns") == 100_000
    assert dask.config.get("dppca_dask.executor.threads") is None


@pytest.fixture
def no_active_client() -> object:
    """Whatever client an earlier test left active, ``auto`` decides here as it does without one."""
    with dask.config.set({"dppca_dask.cluster.use-active-client": False}):
        yield


@pytest.mark.usefixtures("no_active_client")
def test_auto_runs_small_inputs_in_process_and_larger_ones_on_a_cluster() -> None:
    assert choose_executor(None, "auto", n_cols=300, n_partitions=2).executor == "in-process"
    assert choose_executor(None, "auto", n_cols=300, n_partitions=17).executor == "cluster"
    assert choose_executor(None, "auto", n_cols=100_001, n_partitions=1).executor == "cluster"
    # partitions that are not public (an AnnData file's blocks, sized by its entries): the width alone decides
    assert choose_executor(None, "auto", n_cols=300, n_partitions=None).executor == "in-process"
    assert choose_executor(None, "auto", n_cols=100_001, n_partitions=None).executor == "cluster"
    with dask.config.set({"dppca_dask.executor.in-process-max-partitions": 0}):
        assert choose_executor(None, "auto", n_cols=3, n_partitions=1).executor == "cluster"
    with dask.config.set({"dppca_dask.executor.default": "cluster"}):
        assert choose_executor(None, "auto", n_cols=3, n_partitions=1).executor == "cluster"
    assert choose_executor(None, "local", n_cols=10**9, n_partitions=10**6).executor == "in-process"
    assert choose_executor(None, "cluster", n_cols=3, n_partitions=1).executor == "cluster"
    assert choose_executor("tcp://127.0.0.1:8786", "auto", n_cols=3, n_partitions=1).executor == "cluster"


def test_an_active_client_is_a_cluster(local_client: object) -> None:
    assert choose_executor(None, "auto", n_cols=3, n_partitions=1).executor == "cluster"
    with dask.config.set({"dppca_dask.cluster.use-active-client": False}):
        assert choose_executor(None, "auto", n_cols=3, n_partitions=1).executor == "in-process"


@pytest.mark.parametrize(
    ("client", "executor", "config", "match"),
    [
        (None, "threads", {}, "executor must be one of auto, local, cluster; got 'threads'"),
        ("tcp://127.0.0.1:8786", "local", {}, "executor='local' runs in this process, but a Dask client"),
        (None, "auto", {"dppca_dask.executor.in-process-max-partitions": -1},
         "dppca_dask.executor.in-process-max-partitions must be an integer >= 0; got -1"),
    ],
)
def test_bad_choices_are_refused(client: object, executor: str, config: dict[str, object], match: str) -> None:
    with dask.config.set(config), pytest.raises(InvalidParameterError, match=match):
        choose_executor(client, executor, n_cols=3, n_partitions=1)


def test_bad_thread_count_is_refused() -> None:
    with pytest.raises(InvalidParameterError, match="dppca_dask.executor.threads must be an integer >= 1; got 0"):
        InProcessClient(0)


def test_the_in_process_client_runs_the_coordinators_tasks_in_submission_order(store: str) -> None:
    from dppca_dask.coordinator.requests import GramTimes

    source = as_source(store)
    x = np.linspace(-1.0, 1.0, source.n_cols)
    keys: list[str] = []
    with InProcessClient(2) as tasks:
        submit = tasks.submit

        def recording(func, *args, key=None, **kwargs):  # type: ignore[no-untyped-def]
            keys.append(key)
            return submit(func, *args, key=key, **kwargs)

        tasks.submit = recording  # type: ignore[method-assign]
        with Coordinator(tasks, source, persist=False) as coordinator:
            got = coordinator.execute(GramTimes(x=x, row_norm_bound=1.0))
    dense = sp.vstack([p.block for p in (loader(*args) for loader, args in source.loaders)]).toarray()
    norms = np.linalg.norm(dense, axis=1)
    clipped = dense / np.maximum(norms / 1.0, 1.0)[:, None]
    np.testing.assert_allclose(got, clipped.T @ (clipped @ x), rtol=1e-12, atol=1e-12)
    # the Dask path's task names: the broadcast and one map task per partition (at most fan_in partials are
    # merged at the client, as on a cluster)
    assert [k.rsplit("-", 1)[-1] if "map" in k else k.split("-")[-1] for k in keys] == ["broadcast", "0", "1", "2"]
    assert keys[0].startswith("dppca-gramtimes-") and all("-map-" in k for k in keys[1:])


def test_in_process_and_cluster_runs_give_the_same_result(store: str, local_client: object) -> None:
    kwargs = {"epsilon": 1.0, "delta": 1e-6, "n_iter": 5, "seed": 7}
    with pytest.warns(dppca_dask.errors.NotPrivateWarning):
        with dask.config.set({"dppca_dask.cluster.use-active-client": False}):
            local = dppca_dask.pca(store, **kwargs)
        cluster = dppca_dask.pca(store, **kwargs)  # the active client
        reference = dppca_dask.pca(store, client="local", **kwargs)
    assert (local.provenance["executor"], cluster.provenance["executor"]) == ("in-process", "cluster")
    assert reference.provenance["executor"] == "in-process"
    np.testing.assert_allclose(local.components, cluster.components, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(local.components, reference.components, rtol=1e-9, atol=1e-12)
    np.testing.assert_array_equal(local.thresholds, cluster.thresholds)


def test_local_executor_with_a_client_is_refused(store: str, local_client: object) -> None:
    with pytest.raises(InvalidParameterError, match="executor='local' runs in this process"):
        dppca_dask.pca(store, epsilon=1.0, delta=1e-6, client=local_client, executor="local")
    with pytest.raises(InvalidParameterError, match="cannot use executor='cluster'"):
        dppca_dask.pca(store, epsilon=1.0, delta=1e-6, client="local", executor="cluster")


def test_an_in_process_run_does_not_import_distributed(store: str) -> None:
    code = (
        "import sys, dppca_dask\n"
        f"r = dppca_dask.pca({store!r}, epsilon=1.0, delta=1e-6, n_iter=3)\n"
        "print(r.provenance['executor'], 'distributed' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["in-process", "False"]


def test_executor_client_yields_an_in_process_client_for_that_choice() -> None:
    choice = choose_executor(None, "local", n_cols=3, n_partitions=1)
    with executor_client(choice) as tasks:
        assert isinstance(tasks, InProcessClient)
        assert tasks.submit(lambda a, b: a + b, 2, tasks.submit(lambda: 3)).result() == 5
        assert tasks.scheduler_info()["workers"]["in-process"]["nthreads"] == tasks.n_threads
    assert tasks._pool is None


# ------------------------------------------------------------------- lowrank, window and topics choose alike
@pytest.fixture
def stamped(tmp_path: Path) -> str:
    """Word counts in three stamped partitions (days 1-3), declared width: every entry can release from it."""
    from dppca_dask.ingest import ingest
    from dppca_dask.storage import append_partition

    rng = np.random.default_rng(5)
    blocks = [sp.csr_array(rng.poisson(0.5, size=(60, 12)).astype(float)) for _ in range(3)]
    store = ingest(blocks[0], tmp_path / "days.zarr", n_features=12, timestamp="2026-11-01")
    from dppca_dask.methods.window.selection import parse_timestamp

    for day, block in zip(("2026-11-02", "2026-11-03"), blocks[1:]):
        store = append_partition(store.path, block, timestamp=parse_timestamp(day))
    return str(store.path)


def _entry(entry: str, path: str, **kwargs: object) -> object:
    budget = {"epsilon": 1.0, "delta": 1e-6, "seed": 3, **kwargs}
    if entry == "lowrank":
        return dppca_dask.lowrank(path, rank=2, **budget)
    if entry == "window":
        return dppca_dask.window(path, last="3D", **budget)
    return dppca_dask.topics(path, n_topics=2, n_restarts=1, n_iter=1, pca_iter=1, **budget)


@pytest.mark.parametrize("entry", ["lowrank", "window", "topics"])
def test_every_entry_runs_in_process_by_its_public_shape_and_says_so(entry: str, stamped: str,
                                                                     no_active_client: object) -> None:
    with pytest.warns(dppca_dask.errors.NotPrivateWarning):
        auto = _entry(entry, stamped)
        local = _entry(entry, stamped, executor="local")
    assert auto.provenance["executor"] == local.provenance["executor"] == "in-process"
    with dask.config.set({"dppca_dask.executor.in-process-max-partitions": 2}):  # the choice, not a cluster run
        from dppca_dask._execution import executor_choice as _executor_choice

        assert _executor_choice(as_source(stamped), None, "auto").executor == "cluster"
    with pytest.raises(InvalidParameterError, match="executor must be one of auto, local, cluster; got 'threads'"):
        _entry(entry, stamped, executor="threads")


@pytest.mark.parametrize("entry", ["lowrank", "window", "topics"])
def test_every_entry_uses_the_client_given_or_active(entry: str, stamped: str, local_client: object) -> None:
    with pytest.warns(dppca_dask.errors.NotPrivateWarning):
        given = _entry(entry, stamped, client=local_client)
        active = _entry(entry, stamped)  # the session's client is the active one
        local = _entry(entry, stamped, executor="local")
    assert (given.provenance["executor"], active.provenance["executor"]) == ("cluster", "cluster")
    assert local.provenance["executor"] == "in-process"
    with pytest.raises(InvalidParameterError, match="executor='local' runs in this process, but a Dask client"):
        _entry(entry, stamped, client=local_client, executor="local")


@pytest.mark.parametrize(("command", "options"), [
    ("lowrank", ["--rank", "2", "--out", "{tmp}/lr"]),
    ("window", ["--last", "3D"]),
    ("topics", ["--n-topics", "2", "--n-restarts", "1", "--n-iter", "1", "--pca-iter", "1"]),
])
def test_the_commands_take_executor(command: str, options: list[str], stamped: str, tmp_path: Path,
                                    capsys: pytest.CaptureFixture[str], no_active_client: object) -> None:
    from dppca_dask.cli import main

    args = [command, stamped, "--epsilon", "1", "--delta", "1e-6", "--json", "--seed", "1",
            *(o.replace("{tmp}", str(tmp_path)) for o in options)]
    with pytest.warns(dppca_dask.errors.NotPrivateWarning):
        assert main([*args, "--executor", "local"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out.get("executor") or out["provenance"]["executor"]) == "in-process"
    with pytest.raises(SystemExit) as exited:  # argparse refuses it
        main([*args, "--executor", "threads"])
    assert exited.value.code == 2 and "invalid choice: 'threads'" in capsys.readouterr().err
