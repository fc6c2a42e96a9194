"""``dppca-dask ingest --timestamp``, ``dppca-dask append`` and ``dppca-dask window`` end to end on Parquet days."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dppca_dask.cli import main
from dppca_dask.storage import open_matrix
from window_data import day

N_COLS = 8


def _day_file(directory: Path, n: int) -> Path:
    """Day n's Parquet triplets: 30 users, 3 (feature, value) entries each; features 0..7 (declared universe)."""
    rng = np.random.default_rng(n)
    rows = np.repeat(np.arange(30) + 1000 * n, 3)
    cols = rng.integers(0, N_COLS, 90)
    cols[:30] = 2  # feature 2 dominates every day
    values = rng.random(90) + np.where(cols == 2, 1.5, 0.0)
    path = directory / f"day{n:02d}.parquet"
    pq.write_table(pa.table({"row_id": rows, "col_id": cols, "value": values}), path)
    return path


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def ten_day_store(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("cli-days")
    ids = directory / "cols.txt"
    ids.write_text("\n".join(str(i) for i in range(N_COLS)))
    store = directory / "store"
    assert main(["ingest", str(_day_file(directory, 1)), "--out", str(store), "--timestamp", "2026-11-01",
                 "--column-ids", str(ids)]) == 0
    for n in range(2, 11):
        assert main(["append", str(store), str(_day_file(directory, n)), "--timestamp", f"2026-11-{n:02d}"]) == 0
    return store


def test_ten_stamped_days(ten_day_store):
    store = open_matrix(ten_day_store)
    assert [p.timestamp for p in store.partitions] == [day(n) for n in range(1, 11)]
    assert store.n_cols == N_COLS and store.schema == "declared"


def test_appended_days_keep_their_row_ids(ten_day_store, tmp_path, capsys):
    """The store's row ids grow with each appended day (the AnnData view's obs_names: every day's, not the first
    day's and then row numbers), and an append whose rows have no ids is refused with the store unchanged."""
    anndata = pytest.importorskip("anndata")
    import warnings

    with warnings.catch_warnings():
        from anndata import ImplicitModificationWarning
        warnings.simplefilter("ignore", ImplicitModificationWarning)  # (anndata turns the integer ids into strings, and says so)
        warnings.filterwarnings("error", message=".*not recognized")  # nothing zarr does not know: no lock inside
        adata = anndata.read_zarr(ten_day_store)
    want = [str(1000 * n + i) for n in range(1, 11) for i in range(30)]
    assert list(adata.obs_names) == want
    before = open_matrix(ten_day_store)
    import scipy.sparse as sp

    sp.save_npz(tmp_path / "no-ids.npz", sp.csr_array(np.ones((2, N_COLS))))
    code, _, err = run(capsys, "append", str(ten_day_store), str(tmp_path / "no-ids.npz"), "--timestamp",
                       "2026-11-30")
    assert code == 2 and "maps its rows to ids" in err, err
    after = open_matrix(ten_day_store)
    assert (after.n_rows, after.n_partitions) == (before.n_rows, before.n_partitions)


def test_window_pca_json_returns_the_top_component(ten_day_store, capsys):
    code, out, err = run(capsys, "window", str(ten_day_store), "--last", "5D", "--task", "pca", "--epsilon", "1",
                         "--delta", "1e-6", "--json", "--scheduler", "local", "--seed", "7")
    assert code == 0, err
    obj = json.loads(out)
    assert obj["window"] == {"start": "2026-11-05T00:00:00+00:00", "end": "2026-11-10T00:00:00+00:00",
                             "n_partitions": 5, "kind": "time"}
    assert obj["privacy"]["epsilon"] == pytest.approx(1.0, rel=1e-6)
    assert obj["privacy"]["delta"] == 1e-6 and obj["privacy"]["neighbouring"] == "add/remove one row"
    component = np.asarray(obj["components"][0])
    # the exact top component of the window's clipped rows is dominated by feature 2 (150 rows of norm ≈ 1)
    assert component.shape == (N_COLS,) and int(np.argmax(np.abs(component))) == 2
    assert abs(component[2]) > 0.9


def test_window_covariance_rows_and_out(ten_day_store, tmp_path, capsys):
    code, out, err = run(capsys, "window", str(ten_day_store), "--last-rows", "45", "--release", "wishart",
                         "--epsilon", "1", "--delta", "1e-6", "--scheduler", "local", "--out", str(tmp_path / "o"))
    assert code == 0, err
    assert "last 45 rows" in out and "(1, 1e-06)-DP" in out and "covariance: 8x8" in out
    saved = json.loads((tmp_path / "o" / "release.json").read_text())
    assert saved["release"] == "wishart" and saved["window"]["last_rows"] == 45


def test_window_rows_within_a_horizon(ten_day_store, capsys):
    code, out, err = run(capsys, "window", str(ten_day_store), "--last-rows", "45", "--last", "3D", "--epsilon", "1",
                         "--delta", "1e-6", "--seed", "1", "--json")
    assert code == 0, err
    obj = json.loads(out)
    assert obj["window"]["kind"] == "rows" and obj["window"]["n_partitions"] == 3 and obj["window"]["last_rows"] == 45
    assert obj["window"]["start"] == "last 45 rows after 2026-11-07T00:00:00+00:00"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "or both (the last W rows within the time window)"),
        (["--last", "5D", "--end", "2026-10-01"], "before the first partition"),
        (["--last", "1H", "--end", "2026-11-03T12:00:00+00:00"], "holds no partition"),
        (["--last", "5D", "--task", "regression"], "no 'labels' array"),
        (["--last", "five"], "duration such as"),
        (["--tree", "--last", "2D"], "--tree needs --horizon H"),
        (["--tree", "--horizon", "16"], "--tree needs --last DURATION"),
        (["--horizon", "16", "--last", "2D"], "--horizon applies to --tree only"),
        (["--new-tree", "--last", "2D"], "--new-tree applies to --tree only"),
        (["--tree", "--horizon", "16", "--last-rows", "10", "--cache"], "--last-rows, --cache do not apply"),
        (["--tree", "--horizon", "16", "--last", "2D", "--release", "wishart", "--task", "regression"],
         "--release, --task regression do not apply"),
        (["--tree", "--horizon", "4", "--last", "2D"], "more partitions than the tree's horizon=4"),
        (["--last", "2D", "--ledger", "ledger.sqlite"], "needs ledger, dataset and job_id together"),
    ],
)
def test_window_bad_input_exits_2(ten_day_store, capsys, argv, message):
    code, out, err = run(capsys, "window", str(ten_day_store), *argv, "--epsilon", "1", "--delta", "1e-6",
                         "--scheduler", "local")
    assert code == 2 and out == "" and message in err


def test_append_bad_input_exits_2(ten_day_store, tmp_path, capsys):
    extra = _day_file(tmp_path, 11)
    code, _, err = run(capsys, "append", str(ten_day_store), str(extra), "--timestamp", "9999-12-31")
    assert code == 2 and "is in the future" in err
    code, _, err = run(capsys, "append", str(ten_day_store), str(extra), "--timestamp", "11/12/2026")
    assert code == 2 and "must be a date" in err
    pq.write_table(pa.table({"row_id": [1], "col_id": [99], "value": [1.0]}), tmp_path / "bad.parquet")
    code, _, err = run(capsys, "append", str(ten_day_store), str(tmp_path / "bad.parquet"), "--timestamp",
                       "2026-11-12")
    assert code == 2 and "not" in err and "99" in err
    assert open_matrix(ten_day_store).n_partitions == 10  # nothing appended
    assert not [p for p in ten_day_store.parent.iterdir() if ".append-" in p.name]  # temporaries removed


def test_append_svmlight_with_labels(tmp_path, capsys):
    first = tmp_path / "d1.svm"
    first.write_text("1 1:0.5 3:0.2\n-1 2:0.3\n")
    store = tmp_path / "s"
    assert main(["ingest", str(first), "--out", str(store), "--store-labels", "--n-features", "3",
                 "--timestamp", "2026-11-01"]) == 0
    capsys.readouterr()
    second = tmp_path / "d2.svm"
    second.write_text("0.5 1:0.1\n2 3:0.4\n-2 2:0.2\n")
    code, out, err = run(capsys, "append", str(store), str(second), "--timestamp", "2026-11-02", "--json")
    assert code == 0, err
    assert json.loads(out)["n_partitions"] >= 2
    import zarr

    assert np.array_equal(zarr.open_group(str(store), mode="r")["labels"][:], [1, -1, 0.5, 2, -2])
    code, out, err = run(capsys, "window", str(store), "--last", "2D", "--task", "regression", "--epsilon", "1",
                         "--delta", "1e-6", "--scheduler", "local", "--json", "--seed", "1")
    assert code == 0, err
    assert len(json.loads(out)["coefficients"]) == 3
    wide = tmp_path / "d3.svm"
    wide.write_text("1 5:0.1\n")
    code, _, err = run(capsys, "append", str(store), str(wide), "--timestamp", "2026-11-03")
    assert code == 2
    nolabels = tmp_path / "d4.npy"
    np.save(nolabels, np.ones((2, 3)) * 0.1)
    code, _, err = run(capsys, "append", str(store), str(nolabels), "--timestamp", "2026-11-03")
    assert code == 2 and "appended file has none" in err


@pytest.mark.parametrize("flags", [["--structure", "spectral-histogram"], ["--cache"]])
def test_window_structure_and_cache_flags(ten_day_store, capsys, flags):
    code, out, err = run(capsys, "window", str(ten_day_store), "--last", "3D", "--epsilon", "1", "--delta", "1e-6",
                         "--scheduler", "local", "--json", *flags)
    assert code == 0, err
    obj = json.loads(out)
    assert obj["window"]["end"] == "2026-11-10T00:00:00+00:00"
    caveats = obj["privacy"]["report"]["caveats"]
    assert caveats == []  # the histogram's default pruning reads the partition table only: unconditional
    assert obj["guarantee"] == "unconditional"


def _ledger_keys(ledger_path, store, job_id):
    """``{index: entry}`` of the store's partitions the job id's entry (of any dataset key) is charged to."""
    from dppca_dask.ledger import Ledger, partition_identities

    names = partition_identities(store)
    return {str(i): e for e in Ledger(ledger_path).find(job_id) for i, name in enumerate(names)
            if name in e.partitions}


def test_window_tree_charges_its_nodes_and_refuses_a_lost_state(daily_store, tmp_path, capsys):
    """``window --tree --horizon H`` on a real store and ledger: the first release draws and charges its nodes, the
    same window again reuses them (the same covariance, nothing charged); its state moved away, a release is refused
    (exit 2) before anything is charged, and ``--new-tree`` starts over and is charged."""
    from dppca_dask.methods.window.tree import TREE_CAVEAT, _state_path

    store = daily_store(4)
    ledger = str(tmp_path / "ledger.sqlite")
    assert main(["budget", "init", "--ledger", ledger, "--dataset", "nightly", "--total-epsilon", "10",
                 "--total-delta", "1e-5"]) == 0
    capsys.readouterr()
    tree = ["window", store.path, "--tree", "--horizon", "4", "--last", "2D", "--epsilon", "1", "--delta", "1e-6",
            "--scheduler", "local", "--ledger", ledger, "--dataset", "nightly"]
    code, out, err = run(capsys, *tree, "--job-id", "night-1", "--json")
    assert code == 0, err
    first = json.loads(out)
    assert first["window"]["n_partitions"] == 2 and first["private"] is True
    assert first["calibration"]["structure"] == "binary-tree" and first["calibration"]["horizon"] == 4
    assert first["calibration"]["nodes"] == 1  # partitions 2..3: node (1,1)
    assert first["privacy"]["epsilon"] == pytest.approx(1.0, rel=1e-3)
    assert TREE_CAVEAT in first["privacy"]["report"]["caveats"]
    charged = _ledger_keys(ledger, store, "night-1")
    assert sorted(charged) == ["2", "3"]
    assert all(e.status == "charged" and e.mechanism == "sliding-window/binary-tree-4" for e in charged.values())
    code, out, err = run(capsys, *tree, "--job-id", "night-2")  # the kept node: nothing drawn, nothing charged
    assert code == 0, err
    assert "binary tree: horizon 4 partitions, 3 levels; 1 nodes summed" in out and "covariance: " in out
    assert _ledger_keys(ledger, store, "night-2") == {}
    directory = _state_path(store.path, 4, False)
    os.rename(directory, directory + ".moved")
    code, out, err = run(capsys, *tree, "--job-id", "night-3")
    assert code == 2 and out == "" and "records nodes of this store's tree" in err and "--new-tree" in err
    assert _ledger_keys(ledger, store, "night-3") == {}
    code, out, err = run(capsys, *tree, "--job-id", "night-3", "--new-tree", "--json")
    assert code == 0, err
    assert json.loads(out)["covariance"] != first["covariance"]  # drawn again, with fresh noise
    assert sorted(_ledger_keys(ledger, store, "night-3")) == ["2", "3"]


def test_window_tree_built_with_other_parameters_names_them(daily_store, capsys):
    """A saved tree is refused (exit 2) for a release with another epsilon, delta or store, naming the parameter and
    the value it was built with (a state written before trees recorded epsilon and delta names its multiplier)."""
    from dppca_dask.methods.window.tree import _state_path

    store = daily_store(4)
    tree = ["window", store.path, "--tree", "--horizon", "4", "--last", "2D", "--scheduler", "local", "--seed", "1"]
    code, out, err = run(capsys, *tree, "--epsilon", "1", "--delta", "1e-6")
    assert code == 0, err
    state = os.path.join(_state_path(store.path, 4, False), "nodes.json")
    with open(state) as fh:
        before = fh.read()
    for change, named in ((("--epsilon", "2", "--delta", "1e-6"), "built with epsilon=1.0 "),
                          (("--epsilon", "1", "--delta", "1e-7"), "built with delta=1e-06 ")):
        code, out, err = run(capsys, *tree, *change)
        assert code == 2 and out == "" and named in err, err
        name, value = named.split()[-1].split("=")
        assert f"use its parameters ({name}={value}, --{name} {value})" in err
    with open(state) as fh:
        assert fh.read() == before  # nothing drawn, nothing kept
    saved = json.loads(before)
    multiplier = saved["multiplier"]
    for key in ("epsilon", "delta"):  # as trees saved their state before they recorded them
        del saved[key]
    with open(state, "w") as fh:
        json.dump(saved, fh)
    code, out, err = run(capsys, *tree, "--epsilon", "2", "--delta", "1e-6")
    assert code == 2 and f"was built with noise_multiplier={multiplier!r}" in err, err
    saved["store_id"] = "another-store"
    with open(state, "w") as fh:
        json.dump(saved, fh)
    code, out, err = run(capsys, *tree, "--epsilon", "1", "--delta", "1e-6")
    assert code == 2 and "was built for store id 'another-store'" in err and repr(store.store_id) in err, err


def test_window_charges_its_partitions_with_ledger_options(daily_store, tmp_path, capsys):
    store = daily_store(4)
    ledger = str(tmp_path / "ledger.sqlite")
    assert main(["budget", "init", "--ledger", ledger, "--dataset", "nightly", "--total-epsilon", "1",
                 "--total-delta", "1e-5"]) == 0
    capsys.readouterr()
    args = ["window", store.path, "--last", "3D", "--epsilon", "1", "--delta", "1e-6", "--scheduler", "local",
            "--ledger", ledger, "--dataset", "nightly"]
    code, out, err = run(capsys, *args, "--job-id", "w-1")
    assert code == 0, err
    assert sorted(_ledger_keys(ledger, store, "w-1")) == ["1", "2", "3"]
    code, out, err = run(capsys, *args, "--job-id", "w-2")  # the partitions' totals are spent
    assert code == 3 and "budget exceeded" in err and out == ""


@pytest.mark.parametrize(("task", "extra", "message", "tree"), [
    ("pca", ["--n-components", "0"], "n_components must be an integer in [1, 6]", False),
    ("pca", ["--n-components", "9"], "n_components must be an integer in [1, 6]", False),
    ("pca", ["--n-components", "0"], "n_components must be an integer in [1, 6]", True),
    ("pca", ["--n-components", "7"], "n_components must be an integer in [1, 6]", True),
    ("regression", ["--ridge", "-1"], "ridge must be finite and >= 0", False),
    ("regression", ["--ridge", "nan"], "ridge must be finite and >= 0", False),
    ("covariance", ["--out", "FILE"], "--out must be a directory", False),
    ("covariance", ["--out", "FILE"], "--out must be a directory", True),
])
def test_window_task_options_are_refused_before_anything_is_charged(daily_store, tmp_path, capsys, tree, task,
                                                                    extra, message):
    """What to print from the release is checked before the release: an error after the noise would spend the
    budget (and, for a window, lose the released matrix) for nothing."""
    store = daily_store(4, labels=task == "regression")
    (tmp_path / "out.json").write_text("{}")
    extra = [str(tmp_path / "out.json") if a == "FILE" else a for a in extra]
    ledger = str(tmp_path / "ledger.sqlite")
    assert main(["budget", "init", "--ledger", ledger, "--dataset", "nightly", "--total-epsilon", "10",
                 "--total-delta", "1e-5"]) == 0
    capsys.readouterr()
    argv = ["window", store.path, "--last", "2D", "--epsilon", "1", "--delta", "1e-6", "--scheduler", "local",
            "--ledger", ledger, "--dataset", "nightly", "--job-id", "j-1", "--task", task, *extra,
            *(["--tree", "--horizon", "4"] if tree else [])]
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == "" and message in err
    assert _ledger_keys(ledger, store, "j-1") == {}
