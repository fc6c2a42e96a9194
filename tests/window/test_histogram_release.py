"""``window(..., structure="spectral-histogram")``: incremental, reads only new partitions, covers the window."""

from __future__ import annotations

import math
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
    assert first.privacy.caveats == () and first.guarantee == "unconditional"  # the default pruning is public
    assert first.provenance["structure"] == "spectral-histogram" and first.provenance["pruning"] == "partitions"
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


def _block(n: int, neighbour: bool):
    """Day n's rows; the neighbour holds one more row (e₀, norm 1) on day 10."""
    import scipy.sparse as sp

    from window_data import D

    if neighbour and n == 10:
        extra = np.zeros((1, D))
        extra[0, 0] = 1.0
        return sp.csr_array(np.vstack([day_block(n).toarray(), extra]))
    return day_block(n)


def _nightly_coverage(tmp_path, neighbour: bool, **kwargs) -> list[tuple[int, ...]]:
    """The partitions each nightly release covers (a 4-day window, η = 0.5, λ = 5), day 4 to day 14."""
    import shutil

    from dppca_dask.ingest import ingest
    from window_data import D

    path = tmp_path / f"{neighbour}-{sorted(kwargs.items())}".replace("'", "") / "store"
    store = ingest(_block(1, neighbour), path, n_features=D, timestamp="2026-11-01")
    args = {"last": "4D", "epsilon": 1, "delta": 1e-6, "structure": "spectral-histogram", "eta": 0.5,
            "regularizer": 5.0, "client": "local", **kwargs}
    out = []
    for n in range(2, 15):
        store = append_partition(store.path, _block(n, neighbour), timestamp=day(n))
        if n >= 4:
            out.append(window(store, noise=ZeroNoiseSource(), **args).window.partitions)
    shutil.rmtree(path.parent)
    return out


def test_the_covered_partitions_do_not_depend_on_the_data(tmp_path):
    """One row of norm 1 added to day 10: the paper's spectral pruning covers other partitions from then on (its
    release is conditional on them); the default pruning covers the same ones, and the ones its plan said."""
    spectral = [_nightly_coverage(tmp_path, flag, pruning="spectral") for flag in (False, True)]
    assert spectral[0] != spectral[1]  # the leak of erratum E8, which the default rule removes
    default = [_nightly_coverage(tmp_path, flag) for flag in (False, True)]
    assert default[0] == default[1]
    from dppca_dask.methods.window.histogram import partition_checkpoints

    starts = partition_checkpoints([], [(i, 0) for i in range(3)], 0.5)  # the first night's window, 0..3
    for night, covered in zip(range(3, 14), default[0]):
        starts = partition_checkpoints(starts, [(night, night - 3)], 0.5)
        assert covered == tuple(range(starts[0], night + 1))
    assert any(c[0] < n - 3 for n, c in zip(range(3, 14), default[0]))  # it does cover days before the window


@pytest.mark.parametrize(("w", "eta"), [(3, 0.5), (5, 0.5), (30, 0.2), (42, 0.2), (100, 0.1), (365, 0.5)])
def test_the_partition_rule_keeps_few_checkpoints_and_covers_at_most_w_over_one_minus_eta(w, eta):
    """Closed forms of the count rule: t₁ ≤ s < t₂, consecutive checkpoints close or adjacent, at most
    ``2·ln W/(−ln(1−η)) + 4`` checkpoints and at most ``W/(1−η)`` partitions covered (W partitions a window)."""
    from dppca_dask.methods.window.histogram import partition_checkpoints

    starts: list[int] = []
    most = 0
    for t in range(3 * w + 7):
        s = max(0, t - w + 1)
        starts = partition_checkpoints(starts, [(t, s)], eta)
        most = max(most, len(starts))
        assert starts == sorted(set(starts)) and starts[-1] == t and starts[0] <= s
        assert len(starts) < 2 or s < starts[1]
        n = [t - x + 1 for x in starts]
        for i in range(len(starts) - 1):
            assert starts[i + 1] == starts[i] + 1 or (1 - eta) * n[i] <= n[i + 1]
        assert n[0] == t - s + 1 or n[0] < (t - s + 1) / (1 - eta)
    assert most <= 2 * math.log(w) / -math.log(1 - eta) + 4


def test_the_release_reports_the_partitions_it_covers_and_the_start_it_asked(tmp_path):
    """A checkpoint before the window: the release's start is the time its first partition follows, its
    partitions all it covers, the asked start kept apart; the CLI line and the saved release say the same."""
    from dppca_dask.ingest import ingest
    from dppca_dask.methods.window.release import load_release
    from window_data import D

    store = ingest(day_block(1), tmp_path / "store", n_features=D, timestamp="2026-11-01")
    args = {"last": "4D", "epsilon": 1, "delta": 1e-6, "structure": "spectral-histogram", "eta": 0.5,
            "client": "local"}
    for n in range(2, 8):
        store = append_partition(store.path, day_block(n), timestamp=day(n))
        if n >= 4:
            result = window(store, noise=ZeroNoiseSource(), **args)
    # nights 4..7 cover 0..3, 0..4, 2..5, 2..6 (partition_checkpoints): day 7's window is 3..6
    assert result.window.partitions == (2, 3, 4, 5, 6)
    assert result.window.start == "2026-11-02T00:00:00+00:00"  # after day 2: day 3 (partition 2) onwards
    assert result.window.requested_start == "2026-11-03T00:00:00+00:00"
    assert np.allclose(result.released, _gram(result.window.partitions))
    back = load_release(result.save(str(tmp_path / "out")).rsplit("/", 1)[0])
    assert back.window == result.window and back.to_dict()["window"]["requested_start"] == result.window.requested_start


def test_the_papers_pruning_is_labelled_conditional_and_never_charged(daily_store, tmp_path):
    from dppca_dask.ledger import Ledger

    store = daily_store(6)
    args = {"last": "3D", "epsilon": 1, "delta": 1e-6, "structure": "spectral-histogram", "client": "local"}
    result = window(store, noise=ZeroNoiseSource(), pruning="spectral", **args)
    assert result.guarantee == "conditional" and result.to_dict()["guarantee"] == "conditional"
    assert HISTOGRAM_CAVEAT in result.privacy.caveats and "CONDITIONAL GUARANTEE" in result.privacy.summary()
    assert result.provenance["pruning"] == "spectral"
    ledger = Ledger.create(tmp_path / "ledger.db")
    ledger.init_dataset("ds", total_epsilon=10.0, total_delta=1e-3)
    with pytest.raises(InvalidParameterError, match="cannot be charged to a budget"):
        window(store, noise=ZeroNoiseSource(), pruning="spectral", ledger=ledger, dataset="ds", job_id="j", **args)
    assert ledger.find("j") == []
    with pytest.raises(InvalidParameterError, match="pruning must be one of"):
        window(store, noise=ZeroNoiseSource(), pruning="loewner", **args)


def test_a_structure_kept_by_the_papers_rule_is_not_continued_by_the_default_one(daily_store):
    """A structure saved before the rule was recorded (the paper's pruning) chose its checkpoints from the data:
    the default rule does not go on from them (its coverage would follow them), it asks for a new structure."""
    import json

    store = daily_store(6)
    args = {"last": "3D", "epsilon": 1, "delta": 1e-6, "structure": "spectral-histogram", "client": "local"}
    window(store, noise=ZeroNoiseSource(), **args)
    directory = os.path.join(os.path.dirname(store.path), ".store.window-259200s-features")
    state = os.path.join(directory, "state.json")
    with open(state) as fh:
        info = json.load(fh)
    del info["pruning"]  # as written before the rule was recorded
    with open(state, "w") as fh:
        json.dump(info, fh)
    with pytest.raises(InvalidParameterError, match="built with pruning='spectral'.*from the data.*delete"):
        window(store, noise=ZeroNoiseSource(), **args)
