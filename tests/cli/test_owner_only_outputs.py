"""What the package writes for results (a scree plot included), what an append writes into a store, and a new
ledger are owner-only whatever the umask: every directory it creates 0700, every file 0600 (docs/guide/files.md,
"Files, modes and ports"). Each writer runs for real on small generated data under umask 022, which would otherwise
give 0755 and 0644. Directories that existed before keep their mode: they are the user's."""

from __future__ import annotations

import importlib.util
import os
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from dppca_dask.cli import main
from dppca_dask.storage import write_matrix
from dppca_dask.storage._files import FILE_MODE_ENV

REPO = Path(__file__).resolve().parents[2]
pytestmark = [
    pytest.mark.skipif(os.name != "posix", reason="file modes are POSIX"),
    pytest.mark.filterwarnings("ignore::dppca_dask.errors.InferredSchemaWarning"),
    # Seeded noise (no unseeded randomness in tests): the files written are what is checked, not their values
    pytest.mark.filterwarnings("ignore::dppca_dask.errors.NotPrivateWarning"),
]


def mode(path: str | Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def not_owner_only(root: str | Path) -> dict[str, str]:
    """Paths under ``root`` (``root`` included) that are not 0700 (directories) or 0600 (files), with their mode."""
    found = {}
    for base, _dirs, files in os.walk(root):
        for path in [base, *(os.path.join(base, name) for name in files)]:
            want = 0o700 if os.path.isdir(path) else 0o600
            if mode(path) != want:
                found[os.path.relpath(path, root)] = oct(mode(path))
    return found


@pytest.fixture(autouse=True)
def open_umask(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv(FILE_MODE_ENV, raising=False)
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


@pytest.fixture
def store(tmp_path: Path) -> str:
    matrix = sp.random(400, 12, density=0.3, format="csr", random_state=np.random.default_rng(3))
    return write_matrix(tmp_path / "s.zarr", matrix, rows_per_partition=200, schema="declared").path


def test_pca_out_creates_owner_only_directories_and_files(store: str, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "new" / "result"  # a missing parent too
    assert main(["pca", store, "--epsilon", "1", "--delta", "1e-6", "--executor", "local", "--seed", "5", "--out", str(out)]) == 0
    capsys.readouterr()
    assert sorted(os.listdir(out)) == ["components.zarr", "result.json"]
    assert not_owner_only(tmp_path / "new") == {}


def test_pca_out_into_an_existing_directory_keeps_its_mode(store: str, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "mine"
    out.mkdir(mode=0o755)
    assert main(["pca", store, "--epsilon", "1", "--delta", "1e-6", "--executor", "local", "--seed", "5", "--out", str(out)]) == 0
    capsys.readouterr()
    assert mode(out) == 0o755  # the user's directory
    assert sorted(os.listdir(out)) == ["components.zarr", "result.json"]  # no temporaries left
    assert not_owner_only(out / "components.zarr") == {} and mode(out / "result.json") == 0o600


def test_pca_result_save_replaces_an_earlier_result_owner_only(store: str, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    from dppca_dask import pca
    from dppca_dask.results import load_result

    result = pca(store, epsilon=1.0, delta=1e-6, executor="local", seed=5)
    monkeypatch.setenv(FILE_MODE_ENV, "umask")  # the setting follows the umask for results too
    result.save(tmp_path / "r")
    assert mode(tmp_path / "r" / "components.zarr") == 0o755 and mode(tmp_path / "r" / "result.json") == 0o644
    monkeypatch.delenv(FILE_MODE_ENV)
    target = tmp_path / "a" / "b" / "r"
    assert result.save(target) == str(target)
    assert not_owner_only(tmp_path / "a") == {}
    result.save(tmp_path / "r")  # over the earlier, umask-following result: its files are replaced
    assert mode(tmp_path / "r") == 0o755  # an existing directory keeps its mode
    assert not_owner_only(tmp_path / "r" / "components.zarr") == {} and mode(tmp_path / "r" / "result.json") == 0o600
    np.testing.assert_array_equal(load_result(tmp_path / "r").components, result.components)


def test_pca_plot_is_owner_only_and_replaces_an_earlier_one(store: str, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """``pca --plot FILE.png`` follows ``DPPCA_DASK_FILE_MODE`` as ``--out`` does: 0600 by default (replacing a
    file of that name, with no temporary left beside it), the umask's 0644 under ``umask``; its directory keeps
    its mode."""
    pytest.importorskip("matplotlib")
    plots = tmp_path / "plots"
    plots.mkdir(mode=0o755)
    plot = plots / "scree.png"
    run = ["pca", store, "--epsilon", "1", "--delta", "1e-6", "--n-components", "2", "--executor", "local",
           "--seed", "5", "--plot", str(plot)]
    monkeypatch.setenv(FILE_MODE_ENV, "umask")
    assert main(run) == 0
    assert mode(plot) == 0o644
    monkeypatch.delenv(FILE_MODE_ENV)
    assert main(run) == 0  # over the earlier, umask-following picture
    capsys.readouterr()
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert mode(plot) == 0o600 and mode(plots) == 0o755
    assert os.listdir(plots) == ["scree.png"]  # no temporaries left


def test_budget_init_makes_every_directory_it_creates_owner_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """``budget init`` creates the ledger's directory and its missing parents 0700, whatever the umask and
    ``DPPCA_DASK_FILE_MODE`` (ledgers stay owner-only); a directory that existed keeps its mode."""
    existing = tmp_path / "mine"
    existing.mkdir(mode=0o755)
    for setting, name in ((None, "a"), ("umask", "c")):
        if setting is not None:
            monkeypatch.setenv(FILE_MODE_ENV, setting)
        ledger = existing / name / "b" / "ledger.sqlite"
        assert main(["budget", "init", "--ledger", str(ledger), "--dataset", "ds", "--total-epsilon", "1",
                     "--total-delta", "1e-6"]) == 0
        assert "created" in capsys.readouterr().out
        assert not_owner_only(existing / name) == {}  # both directories 0700, the ledger 0600
    assert mode(existing) == 0o755
    assert sorted(os.listdir(existing / "a" / "b")) == ["ledger.sqlite"]


def test_lowrank_out_is_owner_only_left_factor_included(store: str, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "new" / "factors"
    assert main(["lowrank", store, "--rank", "2", "--epsilon", "1", "--delta", "1e-6", "--executor", "local",
                 "--seed", "5", "--out", str(out)]) == 0
    capsys.readouterr()
    assert os.path.isdir(out / "factors.zarr" / "left") and sorted(os.listdir(out)) == ["factors.zarr", "result.json"]
    assert not_owner_only(tmp_path / "new") == {}


def test_topics_out_is_owner_only(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    counts = np.random.default_rng(4).poisson(1.0, size=(300, 10)).astype(np.float64)
    corpus = write_matrix(tmp_path / "corpus.zarr", counts, rows_per_partition=150, schema="declared").path
    out = tmp_path / "new" / "topics"
    assert main(["topics", corpus, "--n-topics", "2", "--epsilon", "1000", "--delta", "1e-6", "--n-restarts", "1",
                 "--n-iter", "2", "--pca-iter", "2", "--executor", "local", "--seed", "5", "--out", str(out)]) == 0
    capsys.readouterr()
    assert sorted(os.listdir(out)) == ["result.json", "topics.npy"]
    assert not_owner_only(tmp_path / "new") == {}


def _sample_days():
    spec = importlib.util.spec_from_file_location("sample_days", REPO / "jobs" / "sample_days.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_window_job_output_and_its_parent_are_owner_only(tmp_path: Path) -> None:
    """The example nightly window job: its output ``build/window-out/<date>`` and the parent ``window-out`` that the
    job creates are 0700, ``release.json`` 0600; the store after the day's append is owner-only throughout."""
    from dppca_dask.jobs import load_job, run_job

    (tmp_path / "jobs").mkdir()
    shutil.copy(REPO / "jobs" / "window-nightly.toml", tmp_path / "jobs")
    build = tmp_path / "build"
    matrix = sp.random(60, 300, density=0.03, random_state=np.random.default_rng(5), format="csr")
    _sample_days().write_days(str(build / "days"), matrix, days=2, rows_per_day=30)
    assert main(["ingest", str(build / "days" / "2026-11-01.parquet"), "--out", str(build / "days.zarr"),
                 "--timestamp", "2026-11-01", "--column-ids", str(build / "days" / "columns.txt"),
                 "--row-column", "user_id", "--col-column", "feature_id"]) == 0
    assert main(["budget", "init", "--ledger", str(build / "days-ledger.sqlite"), "--dataset", "web-days",
                 "--total-epsilon", "3", "--total-delta", "1e-5"]) == 0
    outcome = run_job(load_job(tmp_path / "jobs" / "window-nightly.toml"), date="2026-11-02", client="local")
    assert outcome.status == "completed"
    # the dated output, the table of releases (and its lock) and the pointer to the latest release
    assert sorted(os.listdir(build / "window-out")) == [".releases.parquet.lock", "2026-11-02", "latest",
                                                        "releases.parquet"]
    assert not_owner_only(build / "window-out") == {}
    assert not_owner_only(build / "days.zarr") == {}  # ingest, then the job's append


def _svmlight_days(tmp_path: Path) -> None:
    from sklearn.datasets import dump_svmlight_file

    rng = np.random.default_rng(6)
    for name, rows in (("day1.svm", 40), ("day2.svm", 300)):
        matrix = sp.random(rows, 12, density=0.3, format="csr", random_state=rng)
        dump_svmlight_file(matrix, rng.integers(0, 2, size=rows), str(tmp_path / name), zero_based=True)


def test_append_writes_owner_only_paths_into_a_store(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``append`` (labels too) writes into a committed store: the lock file, new chunks and directories, and the
    metadata and chunks it rewrites get the modes ingest gives the rest of the store."""
    _svmlight_days(tmp_path)
    out = tmp_path / "s.zarr"
    assert main(["ingest", str(tmp_path / "day1.svm"), "--out", str(out), "--n-features", "12", "--zero-based",
                 "--store-labels"]) == 0
    assert not_owner_only(out) == {}
    before = {os.path.relpath(os.path.join(b, n), out) for b, d, f in os.walk(out) for n in d + f}
    assert main(["append", str(out), str(tmp_path / "day2.svm"), "--zero-based", "--timestamp", "2026-11-02"]) == 0
    capsys.readouterr()
    after = {os.path.relpath(os.path.join(b, n), out) for b, d, f in os.walk(out) for n in d + f}
    assert "labels/c/1" in after - before  # new chunks, the labels' among them
    assert not_owner_only(out) == {}
    lock = tmp_path / ".s.zarr.append.lock"  # the lock file, beside the store
    assert stat.S_IMODE(os.stat(lock).st_mode) == 0o600
    assert sorted(os.listdir(tmp_path)) == [".s.zarr.append.lock", "day1.svm", "day2.svm", "s.zarr"]  # no temporaries


def test_ingest_with_a_timestamp_keeps_the_store_owner_only(tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    """``ingest --timestamp`` stamps the committed store under the append lock: its lock file and rewritten
    metadata are owner-only too."""
    _svmlight_days(tmp_path)
    out = tmp_path / "s.zarr"
    assert main(["ingest", str(tmp_path / "day1.svm"), "--out", str(out), "--n-features", "12", "--zero-based",
                 "--timestamp", "2026-11-01"]) == 0
    capsys.readouterr()
    assert stat.S_IMODE(os.stat(tmp_path / ".s.zarr.append.lock").st_mode) == 0o600
    assert not_owner_only(out) == {}


def test_stores_missing_parents_are_owner_only(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The missing parents of a new store are created 0700 like the store (``ingest`` streaming svmlight, ``ingest``
    of a whole file, and ``write_matrix``), and follow the umask under ``DPPCA_DASK_FILE_MODE=umask``; a directory
    that existed keeps its mode."""
    _svmlight_days(tmp_path)
    (tmp_path / "mine").mkdir(mode=0o755)
    assert main(["ingest", str(tmp_path / "day1.svm"), "--out", str(tmp_path / "mine" / "a" / "b" / "s.zarr"),
                 "--n-features", "12", "--zero-based"]) == 0  # read as it streams (declared width): the disk check
    # looks at the file system of the nearest existing parent (it failed on the missing one)
    assert main(["ingest", str(tmp_path / "day1.svm"), "--out", str(tmp_path / "mine" / "c" / "s.zarr"),
                 "--zero-based"]) == 0  # read whole (inferred width)
    capsys.readouterr()
    matrix = sp.random(40, 6, density=0.3, format="csr", random_state=np.random.default_rng(4))
    write_matrix(tmp_path / "mine" / "d" / "e" / "s.zarr", matrix, rows_per_partition=20, schema="declared")
    assert mode(tmp_path / "mine") == 0o755
    for name in ("a", "c", "d"):
        assert not_owner_only(tmp_path / "mine" / name) == {}, name
    monkeypatch.setenv(FILE_MODE_ENV, "umask")
    write_matrix(tmp_path / "mine" / "f" / "g" / "s.zarr", matrix, rows_per_partition=20, schema="declared")
    assert mode(tmp_path / "mine" / "f") == mode(tmp_path / "mine" / "f" / "g") == 0o755
