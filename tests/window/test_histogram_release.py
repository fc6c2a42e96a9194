"""``window(..., structure="spectral-histogram")``: incremental, reads only new partitions, covers the window."""

from __future__ import annotations

import os

import numpy as np
import pytest

from dppca_dask import window
from dppca_dask.errors import InvalidParameterError
from dppca_dask.mechanisms.testing import ZeroNoiseSource
from dppca_dask.methods.window.release import HISTOGRAM_CAVEAT
from dppca_dask.storage import append_partition
from window_data import clipped, count_reads, day, day_block

pytestmark = pytest.mark.filterwarnings("ignore::dppca_dask.errors.NotPrivateWarning")


def _gram(parts) -> np.ndarray:
    rows = clipped(np.vstack([day_block(i + 1).toarray() for i in parts]))
    return rows.T @ rows


def test_nightly_histogram_reads_only_new_partitions(daily_store, monkeypatch):
    store = daily_store(6)
    reads = count_reads(monkeypatch)
    args = {"last": "3D", "epsilon": 1, "delta": 1e-6, "structure": "spectral-histogram", "client": "local"}
    first = window(store, noise=ZeroNoiseSource(), **args)
    assert first.window.partitions == (3, 4, 5) and set(reads) == {3, 4, 5}  # a new structure starts at the window
    assert np.allclose(first.released, _gram(first.window.partitions))
    assert HISTOGRAM_CAVEAT in first.privacy.caveats and first.provenance["structure"] == "spectral-histogram"
    directory = os.path.join(os.path.dirname(store.path), ".store.window-259200s-features")
    assert oct(os.stat(directory).st_mode & 0o777) == "0o700"
    reads.clear()
    store = append_partition(store.path, day_block(7), timestamp=day(7))
    second = window(store, noise=ZeroNoiseSource(), **args)
    assert set(reads) == {6}  # the nightly release read only the new day
    covered = second.window.partitions
    assert covered[0] <= 4 and covered[-1] == 6  # t₁ ≤ the window's first partition
    assert np.allclose(second.released, _gram(covered))


def test_histogram_refusals(ten_days):
    args = {"epsilon": 1, "delta": 1e-6, "structure": "spectral-histogram", "client": "local"}
    with pytest.raises(InvalidParameterError, match="serves time windows"):
        window(ten_days, last_rows=10, **args)
    with pytest.raises(InvalidParameterError, match="current window only"):
        window(ten_days, last="2D", end="2026-11-05", **args)
    with pytest.raises(InvalidParameterError, match="eta must be in"):
        window(ten_days, last="2D", eta=1.5, **args)
    with pytest.raises(InvalidParameterError, match="structure must be one of"):
        window(ten_days, last="2D", epsilon=1, delta=1e-6, structure="tree", client="local")


def _state(store) -> dict[str, bytes]:
    directory = os.path.join(os.path.dirname(store.path), ".store.window-259200s-features")
    if not os.path.isdir(directory):
        return {}
    return {name: open(os.path.join(directory, name), "rb").read() for name in sorted(os.listdir(directory))}


def test_a_release_that_fails_before_its_noise_leaves_the_structure_as_it_was(daily_store, tmp_path, monkeypatch):
    """The next release is charged from the saved structure's first checkpoint, which must have been released
    (erratum E8): a release that fails before its noise saves nothing, gives its reservation back, and the next
    one reads the new partitions again."""
    from dppca_dask.ledger import Ledger
    from dppca_dask.methods.window import release as release_module

    store = daily_store(6)
    ledger = Ledger.create(tmp_path / "ledger.db")
    ledger.init_dataset("ds", total_epsilon=10.0, total_delta=1e-3)
    args = {"last": "3D", "epsilon": 1, "delta": 1e-6, "structure": "spectral-histogram", "client": "local",
            "ledger": ledger, "dataset": "ds"}
    window(store, noise=ZeroNoiseSource(), job_id="night-1", **args)
    saved = _state(store)
    assert saved
    store = append_partition(store.path, day_block(7), timestamp=day(7))

    def failing(*_args, **_kwargs):
        raise RuntimeError("the mechanism failed before its noise")

    with monkeypatch.context() as patch:
        patch.setattr(release_module, "_mechanism", failing)
        with pytest.raises(RuntimeError, match="before its noise"):
            window(store, noise=ZeroNoiseSource(), job_id="night-2", **args)
    assert _state(store) == saved  # the structure as the released night left it
    assert all(e.status != "charged" for e in ledger.find("night-2"))
    reads = count_reads(monkeypatch)
    again = window(store, noise=ZeroNoiseSource(), job_id="night-2b", **args)
    assert set(reads) == {6} and again.window.partitions[-1] == 6
    assert np.allclose(again.released, _gram(again.window.partitions))
    assert _state(store) != saved


def test_a_structure_that_cannot_be_saved_leaves_the_release_standing(daily_store, monkeypatch):
    from dppca_dask.methods.window.histogram import SpectralHistogram

    store = daily_store(6)

    def full_disk(*_args, **_kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(SpectralHistogram, "save", full_disk)
    args = {"last": "3D", "epsilon": 1, "delta": 1e-6, "structure": "spectral-histogram", "client": "local"}
    with pytest.warns(RuntimeWarning, match="could not be saved .*No space left on device.*the release stands"):
        result = window(store, noise=ZeroNoiseSource(), **args)
    assert np.allclose(result.released, _gram(result.window.partitions))
    assert _state(store) == {}
