"""Files of stores (issue 9, items 2 and 11): owner-only permissions, and overwrite that replaces only stores."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from dppca_dask.errors import InvalidParameterError
from dppca_dask.ingest import ingest
from dppca_dask.ingest._common import spill_directory
from dppca_dask.storage import StoreWriter, write_matrix
from dppca_dask.storage._files import FILE_MODE_ENV, OWNER_FILE, is_store


def mode(path: str | Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def modes(root: str) -> tuple[set[int], set[int]]:
    dirs, files = {mode(root)}, set()
    for base, names, leaves in os.walk(root):
        dirs |= {mode(os.path.join(base, n)) for n in names}
        files |= {mode(os.path.join(base, n)) for n in leaves}
    return dirs, files


@pytest.fixture
def open_umask():
    old = os.umask(0o022)
    yield
    os.umask(old)


def test_stores_and_temporaries_are_owner_only(tmp_path: Path, open_umask: None,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(FILE_MODE_ENV, raising=False)
    store = write_matrix(tmp_path / "s.zarr", sp.random(20, 5, density=0.5, format="csr", random_state=0),
                         rows_per_partition=5)
    dirs, files = modes(store.path)
    assert dirs == {0o700} and files == {0o600}
    assert not os.path.exists(os.path.join(store.path, OWNER_FILE))
    writer = StoreWriter(tmp_path / "t.zarr", n_cols=3)
    assert mode(writer._tmp) == 0o700  # the temporary store, while it is written
    writer.abort()
    with spill_directory(str(tmp_path / "u.zarr")) as spill:
        assert mode(spill) == 0o700
        assert os.path.isfile(os.path.join(spill, OWNER_FILE))
    assert not os.path.exists(spill)


def test_the_umask_setting(tmp_path: Path, open_umask: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(FILE_MODE_ENV, "umask")
    store = write_matrix(tmp_path / "s.zarr", np.ones((4, 2)))
    dirs, files = modes(store.path)
    assert dirs == {0o755} and files == {0o644}
    with spill_directory(str(tmp_path / "u.zarr")) as spill:
        assert mode(spill) == 0o755
    monkeypatch.setenv(FILE_MODE_ENV, "public")
    with pytest.raises(InvalidParameterError, match=r"DPPCA_DASK_FILE_MODE must be 'private' .* got 'public'"):
        write_matrix(tmp_path / "t.zarr", np.ones((4, 2)))
    (tmp_path / "a.svm").write_text("1 1:1\n")
    with pytest.raises(InvalidParameterError, match=r"DPPCA_DASK_FILE_MODE"):
        ingest(tmp_path / "a.svm", tmp_path / "t.zarr")
    assert sorted(os.listdir(tmp_path)) == ["a.svm", "s.zarr"]


def test_overwrite_replaces_a_store_or_an_empty_directory_only(tmp_path: Path) -> None:
    (tmp_path / "a.svm").write_text("1 1:1\n")
    first = ingest(tmp_path / "a.svm", tmp_path / "s.zarr")
    assert is_store(first.path)
    second = ingest(tmp_path / "a.svm", tmp_path / "s.zarr", overwrite=True)
    assert second.store_id != first.store_id
    (tmp_path / "empty").mkdir()
    assert ingest(tmp_path / "a.svm", tmp_path / "empty", overwrite=True).n_rows == 1
    (tmp_path / "dir").mkdir()
    (tmp_path / "dir" / "x.txt").write_text("keep")
    (tmp_path / "file.txt").write_text("keep")
    os.symlink(tmp_path / "s.zarr", tmp_path / "link")
    for target, what in (("dir", "a directory that is not a dppca_dask store"), ("file.txt", "a file"),
                         ("link", "a symbolic link")):
        with pytest.raises(InvalidParameterError, match=rf"{target}' is {what}; overwrite \(--overwrite\)"):
            ingest(tmp_path / "a.svm", tmp_path / target, overwrite=True)
        with pytest.raises(InvalidParameterError, match=rf"{target}' is {what}"):
            write_matrix(tmp_path / target, np.ones((2, 2)), overwrite=True)
    assert (tmp_path / "dir" / "x.txt").read_text() == "keep" and (tmp_path / "file.txt").read_text() == "keep"
    assert not is_store(str(tmp_path / "dir")) and not is_store(str(tmp_path / "link"))
    (tmp_path / "fake").mkdir()
    (tmp_path / "fake" / "zarr.json").write_text("not json")
    assert not is_store(str(tmp_path / "fake"))


def test_a_path_that_appears_while_writing_must_be_a_store(tmp_path: Path) -> None:
    with StoreWriter(tmp_path / "s.zarr", n_cols=2, overwrite=True) as writer:
        writer.append(np.ones((2, 2)))
        (tmp_path / "s.zarr").write_text("someone else's file")
        with pytest.raises(InvalidParameterError, match=r"s\.zarr' is a file"):
            writer.commit()
    assert (tmp_path / "s.zarr").read_text() == "someone else's file"
    assert sorted(os.listdir(tmp_path)) == ["s.zarr"]
