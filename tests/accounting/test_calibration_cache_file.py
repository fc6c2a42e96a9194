"""The calibration cache file: an owner-only directory whatever the umask, a bounded size (the oldest entries
evicted), read-modify-write under a lock across processes, re-read only when it changed."""

from __future__ import annotations

import json
import multiprocessing
import os
import stat
from pathlib import Path

import pytest

from dppca_dask.accounting import calibration
from dppca_dask.accounting.calibration import _read_cache, _write_cache


def test_the_directory_is_owner_only_under_umask_000(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "calibration.json"
    old = os.umask(0)
    try:
        _write_cache(path, "k", {"epsilon": 1.0})
    finally:
        os.umask(old)
    for directory in (tmp_path / "a", tmp_path / "a" / "b"):
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert _read_cache(path)["k"]["epsilon"] == 1.0


def test_the_file_stays_within_its_bound_evicting_the_oldest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(calibration, "MAX_CACHE_BYTES", 4096)
    path = tmp_path / "calibration.json"
    clock = iter(range(1000))
    monkeypatch.setattr(calibration.time, "time", lambda: float(next(clock)))
    for i in range(100):
        _write_cache(path, f"key-{i:03d}-" + "x" * 40, {"epsilon": float(i)})
        assert path.stat().st_size <= 4096
    kept = sorted(_read_cache(path))
    assert kept[-1].startswith("key-099") and len(kept) < 100
    assert kept == [f"key-{i:03d}-" + "x" * 40 for i in range(100 - len(kept), 100)]  # the newest, in a run
    _write_cache(path, "huge", {"epsilon": 1.0, "events": "y" * 4096})  # alone beyond half the bound: not kept
    assert "huge" not in _read_cache(path)


def _writer(path: str, start: int) -> None:
    for i in range(start, start + 25):
        _write_cache(Path(path), f"p{i}", {"epsilon": float(i)})


def test_concurrent_writers_lose_no_entry(tmp_path: Path) -> None:
    """Four processes writing 25 entries each at once: without the lock, a read-modify-write lost the entries
    another process wrote in between."""
    path = tmp_path / "calibration.json"
    context = multiprocessing.get_context("spawn")
    procs = [context.Process(target=_writer, args=(str(path), 25 * n)) for n in range(4)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(120)
        assert proc.exitcode == 0
    assert sorted(_read_cache(path)) == sorted(f"p{i}" for i in range(100))


def test_a_changed_file_is_read_again_and_an_unchanged_one_is_not(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "calibration.json"
    _write_cache(path, "a", {"epsilon": 1.0})
    assert set(_read_cache(path)) == {"a"}
    loads = []
    original = json.load
    monkeypatch.setattr(calibration.json, "load", lambda fh: loads.append(1) or original(fh))
    assert set(_read_cache(path)) == {"a"} and loads == []  # unchanged: not parsed again
    path.write_text(json.dumps({"entries": {"b": {"epsilon": 2.0}}}))
    assert set(_read_cache(path)) == {"b"} and loads == [1]


def test_the_session_has_its_own_cache() -> None:
    assert calibration.cache_path() is not None
    assert not str(calibration.cache_path()).startswith(str(Path.home() / ".cache"))
