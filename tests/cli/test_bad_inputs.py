"""The corpus of malformed inputs (``bad_inputs_corpus``) through the command line.

For every case: exit code 2, one error line naming the file and the record (line, partition, row), no traceback,
nothing left beside the output, and, where a ledger is involved, no reservation. Damaged stores go through
``dppca-dask pca`` on a real LocalCluster (the preflight refuses them before any noise is drawn) and through
``dppca-dask info --check``.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
import zarr
from bad_inputs_corpus import APPEND_CASES, CHECK_ONLY_CASES, INGEST_CASES, STORE_CASES, Case, native_store

from dppca_dask.cli import main


def listing(directory: Path) -> dict[str, float]:
    """Every path under ``directory`` with its modification time (what a failed command must leave unchanged)."""
    out = {}
    for root, dirs, files in os.walk(directory):
        for name in dirs + files:
            path = os.path.join(root, name)
            out[os.path.relpath(path, directory)] = os.lstat(path).st_mtime_ns
    return out


def run_cli(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def assert_clean_error(code: int, out: str, err: str, pattern: str) -> None:
    assert code == 2, (code, out, err)
    assert "Traceback" not in err and "Traceback" not in out
    assert len(err.strip().splitlines()) == 1, err
    assert re.search(pattern, err), f"{pattern!r} not in {err!r}"


@pytest.mark.parametrize("case", INGEST_CASES, ids=lambda c: c.name)
def test_ingest_refuses(case: Case, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "out").mkdir(exist_ok=True)
    argv, pattern = case.make(tmp_path)
    before = listing(tmp_path / "out")
    code, out, err = run_cli(capsys, argv)
    assert_clean_error(code, out, err, pattern)
    assert listing(tmp_path / "out") == before  # no store, no .partial-*/.spill-*, nothing replaced


@pytest.mark.parametrize("case", STORE_CASES, ids=lambda c: c.name)
def test_pca_and_info_check_refuse_a_damaged_store(case: Case, tmp_path: Path, local_client,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    argv, pattern = case.make(tmp_path)
    store = argv[0]
    before = listing(tmp_path)
    code, out, err = run_cli(capsys, ["pca", store, "--epsilon", "1", "--delta", "1e-6", "--n-iter", "2",
                                      "--scheduler", local_client.scheduler.address, "--out",
                                      str(tmp_path / "result")])
    assert_clean_error(code, out, err, pattern)
    assert listing(tmp_path) == before  # no result directory
    code, out, err = run_cli(capsys, ["info", "--check", store])
    assert_clean_error(code, out, err, pattern)


@pytest.mark.parametrize("case", CHECK_ONLY_CASES, ids=lambda c: c.name)
def test_info_check_reports_damage_that_a_run_tolerates(case: Case, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    argv, pattern = case.make(tmp_path)
    assert run_cli(capsys, ["info", argv[0]])[0] == 0  # metadata alone cannot see it
    code, out, err = run_cli(capsys, ["info", "--check", argv[0]])
    assert_clean_error(code, out, err, pattern)


def test_info_check_passes_an_intact_store(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, ["info", "--check", native_store(tmp_path)])
    assert code == 0 and err == ""
    assert "check:          ok: 4 partitions verified" in out


def _job_spec(tmp_path: Path, store: str, ingest_source: str | None = None) -> Path:
    """A job on ``store`` with its ledger created (a run never creates one) and the store's width declared (a
    dppca_dask store's metadata says so; an ingest is given ``n_features``)."""
    import zarr

    from dppca_dask.ledger import Ledger
    from dppca_dask.storage import _format, open_matrix
    from dppca_dask.storage._files import is_store

    Ledger.create(tmp_path / "ledger.sqlite").init_dataset("ds", total_epsilon=1.0, total_delta=1e-6)
    lines = [
        '[job]', 'name = "bad"',
        '[data]', f'store = "{store}"',
    ]
    if ingest_source is None:  # damage is in the chunks: the metadata still opens
        lines.append(f"n_features = {open_matrix(store).n_cols}")
        if is_store(store):  # as if ingested with --n-features (an AnnData store opened directly cannot be)
            group = zarr.open_group(store, mode="r+")
            group.attrs[_format.ATTR_KEY] = {**dict(group.attrs[_format.ATTR_KEY]), "schema": "declared"}
    if ingest_source is not None:
        lines += ['[data.ingest]', f'source = "{ingest_source}"', 'n_features = 1']
    lines += [
        '[mechanism]', 'name = "adaptive-power"', 'n_iter = 2',
        '[privacy]', 'epsilon = 0.5', 'delta = 1e-7',
        '[budget]', f'ledger = "{tmp_path / "ledger.sqlite"}"', 'dataset = "ds"', 'total_epsilon = 1.0',
        'total_delta = 1e-6',
        '[output]', f'path = "{tmp_path / "out" / "{date}"}"',
    ]
    path = tmp_path / "job.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def _reserved(tmp_path: Path) -> list[object]:
    from dppca_dask.ledger import Ledger

    ledger_path = tmp_path / "ledger.sqlite"
    if not ledger_path.exists():
        return []
    ledger = Ledger(str(ledger_path))
    return [e for e in [ledger.entry("ds", "bad@2026-01-01")] if e is not None]


@pytest.mark.parametrize("case", [c for c in STORE_CASES if c.name in ("nan-in-data-chunk", "decreasing-indptr",
                                                                       "anndata-nan")], ids=lambda c: c.name)
def test_a_job_on_a_damaged_store_reserves_nothing(case: Case, tmp_path: Path, local_client,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    from dppca_dask.storage._files import is_store

    argv, pattern = case.make(tmp_path)
    spec = _job_spec(tmp_path, argv[0])
    if not is_store(argv[0]):  # an AnnData store has the width of its data: refused before it is read
        pattern = "has a width inferred from the data"
    code, out, err = run_cli(capsys, ["run", str(spec), "--date", "2026-01-01", "--scheduler",
                                      local_client.scheduler.address])
    assert_clean_error(code, out, err, pattern)
    assert _reserved(tmp_path) == []
    assert not (tmp_path / "out").exists()


def test_a_job_whose_ingest_target_is_not_a_store_deletes_nothing(tmp_path: Path, local_client,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "src"
    source.mkdir()
    (source / "a.svm").write_text("1 1:0.5\n")
    (source / "keep.txt").write_text("raw data")
    # A one-character slip: the store path names the source's own directory.
    spec = _job_spec(tmp_path, str(source), ingest_source=str(source / "a.svm"))
    before = listing(source)
    code, out, err = run_cli(capsys, ["run", str(spec), "--date", "2026-01-01", "--scheduler",
                                      local_client.scheduler.address])
    assert_clean_error(code, out, err, r"src' is a directory that is not a dppca_dask store")
    assert listing(source) == before
    assert _reserved(tmp_path) == []


def test_the_corpus_covers_every_input_class() -> None:
    issues = {c.issue for c in INGEST_CASES + STORE_CASES + CHECK_ONLY_CASES + APPEND_CASES}
    assert issues == {"8.1", "8.4", "9.1", "9.2", "9.4", "9.9", "36.4"}
    names = [c.name for c in INGEST_CASES + STORE_CASES + CHECK_ONLY_CASES + APPEND_CASES]
    assert len(names) == len(set(names))


PRIVACY = ["--epsilon", "1", "--delta", "1e-6"]
#: Where a command's results cannot go (issue 36 item 4): each is refused before any data is read.
OUT_CASES = [
    ("pca-out-is-the-store", ["pca", "{store}", *PRIVACY, "--out", "{store}"], r"is inside the input store"),
    ("pca-out-inside-the-store", ["pca", "{store}", *PRIVACY, "--out", "{store}/X"], r"is inside the input store"),
    ("window-out-inside-the-store", ["window", "{store}", "--last", "7D", *PRIVACY, "--out", "{store}/X"],
     r"is inside the input store"),
    ("topics-out-inside-the-store", ["topics", "{store}", "--n-topics", "2", *PRIVACY, "--out", "{store}/obs"],
     r"is inside the input store"),
    ("lowrank-out-is-the-store", ["lowrank", "{store}", "--rank", "1", *PRIVACY, "--out", "{store}"],
     r"is inside the input store"),
    ("pca-out-is-a-file", ["pca", "{store}", *PRIVACY, "--out", "{dir}/notes.txt"], r"notes\.txt' is an existing file"),
    ("lowrank-out-is-a-file", ["lowrank", "{store}", "--rank", "1", *PRIVACY, "--out", "{dir}/notes.txt"],
     r"notes\.txt' is an existing file"),
    ("pca-out-is-another-store", ["pca", "{store}", *PRIVACY, "--out", "{dir}/other.zarr"], r"is a zarr store"),
]


@pytest.mark.parametrize("name,argv,pattern", OUT_CASES, ids=[c[0] for c in OUT_CASES])
def test_out_is_checked_before_any_data_is_read(name: str, argv: list[str], pattern: str, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str], monkeypatch) -> None:
    import anndata

    from dppca_dask.storage import MatrixStore, open_matrix

    store = native_store(tmp_path)
    os.makedirs(tmp_path / "o")
    other = native_store(tmp_path / "o")
    os.rename(other, tmp_path / "other.zarr")
    (tmp_path / "notes.txt").write_text("keep me")
    before = listing(tmp_path)

    def no_reads(*args: object, **kwargs: object) -> None:
        raise AssertionError("a partition was read before --out was checked")

    monkeypatch.setattr(MatrixStore, "read_partition", no_reads)
    monkeypatch.setattr(MatrixStore, "read_partition_with_norms", no_reads)
    code, out, err = run_cli(capsys, [a.format(store=store, dir=tmp_path) for a in argv])
    assert_clean_error(code, out, err, pattern)
    assert listing(tmp_path) == before
    assert anndata.read_zarr(store).shape == open_matrix(store).shape  # the store still opens as AnnData
    assert (tmp_path / "notes.txt").read_text() == "keep me"


@pytest.mark.parametrize("case", APPEND_CASES, ids=lambda c: c.name)
def test_append_refuses_a_damaged_store_before_writing(case: Case, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    argv, pattern = case.make(tmp_path)
    day = tmp_path / "day.svm"
    day.write_text("1 1:0.5 3:1\n")
    before = listing(tmp_path)
    code, out, err = run_cli(capsys, ["append", argv[0], str(day), "--timestamp", "2026-01-02"])
    assert_clean_error(code, out, err, pattern)
    assert listing(tmp_path) == before  # nothing written: no rows, no temporaries, no lock file


def _stamped(d: Path) -> str:
    from dppca_dask.storage.writer import stamp_partitions

    return stamp_partitions(native_store(d), 1_767_225_600.0).path  # 2026-01-01


def _wide(d: Path) -> str:
    from dppca_dask.storage import _format

    path = native_store(d)
    group = zarr.open_group(path, mode="r+")
    group.attrs[_format.ATTR_KEY] = {**dict(group.attrs[_format.ATTR_KEY]), "n_cols": 10**12}
    return path


#: Commands that failed with exit 1 ("unexpected"), hung or ran out of memory in the hostile-input run (issue 36,
#: item 4): each is refused with exit 2, one line naming the fix, before anything is read or written.
COMMAND_CASES = [
    ("window-wishart-tiny-epsilon", _stamped, ["window", "{store}", "--last", "7D", "--release", "wishart",
                                               "--epsilon", "1e-9", "--delta", "1e-6", "--scheduler", "local"],
     r"epsilon=1e-09 is too small for a Wishart release.*--release gaussian"),
    ("pca-width-edited-to-1e12", _wide, ["pca", "{store}", "--epsilon", "1", "--delta", "1e-6", "--executor", "local"],
     r"has 1000000000000 columns: an analysis needs about .* GiB of working memory"),
    ("pca-missing-memory-url", None, ["pca", "memory://nothing", "--epsilon", "1", "--delta", "1e-6"],
     r"a memory:// store lives only in the Python process that wrote it .* `dppca-dask ingest SRC --out STORE`"),
    ("pca-the-old-maximum-of-iterations", native_store, ["pca", "{store}", "--epsilon", "1", "--delta", "1e-6",
                                                         "--n-iter", "10000", "--executor", "local"],
     r"n_iter must be an integer in \[1, 1000\]; got 10000; each iteration is a pass over the data"),
    ("topics-a-billion-restarts", native_store, ["topics", "{store}", "--n-topics", "2", "--epsilon", "1", "--delta",
                                                 "1e-6", "--n-restarts", "1000000000", "--executor", "local"],
     r"n_restarts must be <= 1000; got 1000000000"),
    ("topics-a-billion-iterations", native_store, ["topics", "{store}", "--n-topics", "2", "--epsilon", "1",
                                                   "--delta", "1e-6", "--n-iter", "1000000000", "--executor",
                                                   "local"], r"n_iter must be <= 1000"),
    ("topics-a-billion-pca-iterations", native_store, ["topics", "{store}", "--n-topics", "2", "--epsilon", "1",
                                                       "--delta", "1e-6", "--pca-iter", "1000000000", "--executor",
                                                       "local"], r"pca_iter must be <= 1000"),
]


@pytest.mark.parametrize("name,make,argv,pattern", COMMAND_CASES, ids=[c[0] for c in COMMAND_CASES])
def test_hostile_commands_exit_2_naming_the_fix(name: str, make, argv: list[str], pattern: str, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    store = make(tmp_path) if make is not None else ""
    before = listing(tmp_path)
    code, out, err = run_cli(capsys, [a.format(store=store) for a in argv])
    assert_clean_error(code, out, err, pattern)
    assert listing(tmp_path) == before


def test_python_entry_points_refuse_what_they_cannot_read(tmp_path: Path) -> None:
    import numpy as np

    from dppca_dask import pp
    from dppca_dask.errors import InvalidInputError, InvalidParameterError
    from dppca_dask.api import window

    with pytest.raises(InvalidParameterError, match="store must be the path of a dppca_dask store.*got a ndarray"):
        window(np.ones((3, 3)), last="7D", epsilon=1.0, delta=1e-6)
    import anndata

    anndata.AnnData(np.ones((4, 3), dtype=np.float32)).write_h5ad(tmp_path / "a.h5ad")
    data = (tmp_path / "a.h5ad").read_bytes()
    (tmp_path / "a.h5ad").write_bytes(data[: len(data) // 2])  # truncated
    with pytest.raises(InvalidInputError, match=r"a\.h5ad"):
        pp.pca(str(tmp_path / "a.h5ad"), epsilon=1.0, delta=1e-6)


def test_python_entry_points_refuse_more_iterations_than_the_limit(tmp_path: Path) -> None:
    """``pca``, ``DPPCA`` and ``pp.pca`` refuse ``n_iter=10000`` (the maximum documented before, which ran past
    120 s) as the command line does, before anything is read or spent."""
    import numpy as np

    import dppca_dask
    from dppca_dask import pp
    from dppca_dask.errors import InvalidParameterError
    from dppca_dask.estimator import DPPCA

    store = native_store(tmp_path)
    before = listing(tmp_path)
    message = r"n_iter must be an integer in \[1, 1000\]; got 10000"
    with pytest.raises(InvalidParameterError, match=message):
        dppca_dask.pca(store, epsilon=1.0, delta=1e-6, n_iter=10_000, client="local")
    with pytest.raises(InvalidParameterError, match=message):
        DPPCA(1, epsilon=1.0, delta=1e-6, n_iter=10_000, executor="local").fit(np.ones((6, 3)))
    anndata = pytest.importorskip("anndata")
    with pytest.raises(InvalidParameterError, match=message):
        pp.pca(anndata.AnnData(np.ones((6, 3))), epsilon=1.0, delta=1e-6, n_iter=10_000, client="local")
    assert listing(tmp_path) == before
