"""Neighbouring datasets for the sliding-window releases (Gaussian, Wishart, JL), in-process and on a LocalCluster.

Crafted neighbours of a stamped store:
- a row at the clip bound (norm c on one coordinate) added to a partition inside the window: the exact Gram moves
  by ``aaᵀ`` (upper triangle L2 norm c², Frobenius c²), the sensitivity each mechanism is given;
- a row of large norm added to a partition just outside the window (stamped one second before the window's start):
  the exact Gram does not move at all;
- a row window: one added row pushes the oldest out, ``aaᵀ − bbᵀ``, within the row-window sensitivity √2·c².
Both neighbours make the same releases, task names and log lines, and the same result fields. Deterministic.
"""

from __future__ import annotations

import datetime as _dt
import logging
import math
import os

import numpy as np
import pytest
import scipy.sparse as sp

from dppca_dask import window
from dppca_dask.ingest import ingest
from dppca_dask.storage import append_partition
from privacy_harness import assert_within_sensitivity

D = 5
C = 0.7
pytestmark = pytest.mark.filterwarnings("ignore::dppca_dask.errors.NotPrivateWarning")


def _day(n: int, second: int = 0) -> float:
    return _dt.datetime(2026, 11, n, tzinfo=_dt.timezone.utc).timestamp() + second


def _rows(n: int) -> np.ndarray:
    rng = np.random.default_rng(n)
    return rng.standard_normal((25, D)) * rng.uniform(0.1, 2.0, (25, 1))


def _store(path, extra: dict[int, np.ndarray]):
    """Days 1..6 (day 3 also stamped just before the 3D window's start); ``extra`` adds a row to a day."""
    def block(n: int) -> sp.csr_array:
        rows = _rows(n)
        if n in extra:
            rows = np.vstack([rows[:10], extra[n][None, :], rows[10:]])
        return sp.csr_array(rows)

    store = ingest(block(1), path, n_features=D, timestamp="2026-11-01")
    for n in range(2, 7):
        store = append_partition(store.path, block(n), timestamp=_day(n))
    return store


def _release(store, noise, release, **kwargs):
    args = {"epsilon": 1.0, "delta": 1e-6, "row_norm_bound": C, "client": "local", **kwargs}
    if "last_rows" not in args:
        args["last"] = "3D"
    return window(store, release=release, noise=noise, **args)


def _frobenius_moves(records_a, records_b):
    return [float(np.linalg.norm(a.exact - b.exact)) for a, b in zip(records_a, records_b)]


@pytest.mark.parametrize("release", ["gaussian", "wishart", "jl"])
def test_row_at_the_clip_bound_inside_the_window(tmp_path, auditing_pair, release):
    edge = np.zeros(D)
    edge[2] = 5.0  # clipped to norm C on one coordinate: the worst case of the upper triangle
    a = _store(tmp_path / "a", {})
    b = _store(tmp_path / "b", {5: edge})
    na, nb = auditing_pair()
    ra = _release(a, na, release)
    rb = _release(b, nb, release)
    ratios = assert_within_sensitivity(na.records, nb.records)
    assert len(na.records) == 1 and na.records[0].sensitivity == pytest.approx(C * C)
    assert _frobenius_moves(na.records, nb.records)[0] <= C * C * (1 + 1e-9)
    if release == "gaussian":
        assert ratios[0] == pytest.approx(1.0, rel=1e-9)  # the bound is attained
    assert ra.to_dict().keys() == rb.to_dict().keys() and ra.window == rb.window
    assert ra.privacy.to_dict() == rb.privacy.to_dict() and ra.calibration == rb.calibration


@pytest.mark.parametrize("release", ["gaussian", "wishart"])
def test_row_just_outside_the_window_does_not_move_the_release(tmp_path, auditing_pair, release):
    big = np.full(D, 100.0)
    a = _store(tmp_path / "a", {})
    b = _store(tmp_path / "b", {3: big})  # day 3 is outside (Nov 3, Nov 6]
    na, nb = auditing_pair()
    ra = _release(a, na, release)
    rb = _release(b, nb, release)
    assert ra.window.partitions == (3, 4, 5)
    assert_within_sensitivity(na.records, nb.records)
    assert np.array_equal(na.records[0].exact, nb.records[0].exact)
    assert np.array_equal(ra.released, rb.released)


@pytest.mark.parametrize("release", ["gaussian", "wishart", "jl"])
def test_row_window_shift(tmp_path, auditing_pair, release):
    edge = np.zeros(D)
    edge[0] = -3.0
    a = _store(tmp_path / "a", {})
    b = _store(tmp_path / "b", {6: edge})  # one more row in the last day: the window's oldest row leaves
    na, nb = auditing_pair()
    _release(a, na, release, last_rows=30)
    _release(b, nb, release, last_rows=30)
    if release == "gaussian":
        assert na.records[0].sensitivity == pytest.approx(np.sqrt(2) * C * C)
        assert_within_sensitivity(na.records, nb.records)
    else:  # the mechanism runs at (ε/2, δ/(1+e^{ε/2})) and is given c²: two fixed-position changes of c² each
        assert [r.release for r in na.records] == [r.release for r in nb.records]
        assert _frobenius_moves(na.records, nb.records)[0] <= 2 * C * C * (1 + 1e-9)


CLUSTER_RELEASES = {
    "gaussian": {"release": "gaussian"},
    "wishart": {"release": "wishart"},
    "jl": {"release": "jl"},
    "spectral-histogram": {"release": "gaussian", "structure": "spectral-histogram", "eta": 0.5},
    "gram-cache": {"release": "gaussian", "cache": True},
    "tree": {"tree": True},
}


@pytest.mark.parametrize("case", sorted(CLUSTER_RELEASES))
def test_neighbours_on_a_local_cluster_same_tasks_and_logs(tmp_path, local_client, caplog, seed, case):
    """Each window release (exact Gram with each mechanism, the spectral histogram, the Gram cache, the binary
    tree) on neighbours through the real LocalCluster, twice (the second night reads the histogram's, the cache's
    and the tree's kept state): the same task names with the same counts and the same log lines, each run's own
    (recorded per run, not accumulated over the cluster), and each release within its sensitivity, the noise drawn
    as recorded."""
    from dppca_dask.mechanisms.testing import AuditingNoiseSource
    from dppca_dask.methods.window import tree_window
    from privacy_harness import assert_same_execution, assert_sensitivity, traced_neighbour_runs

    edge = np.zeros(D)
    edge[1] = 5.0  # clipped to norm C
    a = _store(tmp_path / "a", {})
    b = _store(tmp_path / "b", {5: edge})
    kwargs = dict(CLUSTER_RELEASES[case])

    def run(store, noise):
        if kwargs.get("tree"):
            return tree_window(store, last=last, epsilon=1.0, delta=1e-6, horizon=8, row_norm_bound=C,
                               client=local_client, noise=noise)
        return window(store, last=last, epsilon=1.0, delta=1e-6, row_norm_bound=C, client=local_client,
                      noise=noise, **kwargs)

    for night, last in enumerate(("3D", "4D")):
        runs = traced_neighbour_runs(local_client, caplog, (a, b), run, lambda: AuditingNoiseSource(seed + night))
        assert_same_execution(runs)
        (ra, na, _, _), (rb, nb, _, _) = runs
        assert_within_sensitivity(na.records, nb.records)
        assert_sensitivity(na.records, C * C)
        assert ra.window == rb.window and ra.to_dict().keys() == rb.to_dict().keys()
        assert ra.privacy.to_dict() == rb.privacy.to_dict() and ra.calibration == rb.calibration
        if kwargs.get("release", "gaussian") == "gaussian" and night == 0:  # day 6 read: the bound is attained
            assert max(_frobenius_moves(na.records, nb.records)) == pytest.approx(C * C, rel=1e-9)


def test_tree_nodes_drawn_with_a_seed_are_not_reused_by_a_private_release(tmp_path):
    """The binary tree keeps its noisy nodes and releases them again: nodes drawn with a seed (noise known to whoever
    knows it) released under a private report would be the exact Gram plus known noise."""
    from dppca_dask.errors import InvalidParameterError
    from dppca_dask.mechanisms import NoiseSource
    from dppca_dask.methods.window import tree_window

    store = _store(tmp_path / "a", {})
    seeded = tree_window(store, last="3D", epsilon=1.0, delta=1e-6, horizon=8, row_norm_bound=C, client="local",
                         seed=3)
    assert not seeded.private
    with pytest.raises(InvalidParameterError, match="not private"):
        tree_window(store, last="3D", epsilon=1.0, delta=1e-6, horizon=8, row_norm_bound=C, client="local")
    other = _store(tmp_path / "b", {})
    private = tree_window(other, last="3D", epsilon=1.0, delta=1e-6, horizon=8, row_norm_bound=C, client="local")
    assert private.private
    again = tree_window(other, last="3D", epsilon=1.0, delta=1e-6, horizon=8, row_norm_bound=C, client="local",
                        noise=NoiseSource.from_seed(4))  # reads the kept nodes only: allowed, reported not private
    assert not again.private and np.array_equal(again.released, private.released)
    with pytest.raises(InvalidParameterError, match="drawn privately"):  # would add seeded nodes
        tree_window(other, last="5D", epsilon=1.0, delta=1e-6, horizon=8, row_norm_bound=C, client="local", seed=5)


@pytest.mark.parametrize("release", ["gaussian", "wishart", "jl"])
def test_a_bound_whose_square_overflows_with_the_row_count_is_refused_on_both_neighbours(tmp_path, release):
    """Each row adds up to c² to the Gram: at c = 1e153 the sum of 90 rows at the bound overflows float64 and 89 do
    not, so a release (or its refusal) would tell the two neighbours apart. The bound is refused before any read,
    as ``pca`` refuses it."""
    from dppca_dask.errors import InvalidParameterError
    from dppca_dask.ingest import ingest
    from dppca_dask.mechanisms.testing import AuditingNoiseSource

    outcomes = []
    for n in (89, 90):
        rows = np.zeros((n, 3))
        rows[:, 0] = 1e160
        store = ingest(rows, tmp_path / f"s{n}", n_features=3, timestamp="2026-11-01")
        try:
            window(store, last="1D", epsilon=1.0, delta=1e-6, row_norm_bound=1e153, release=release,
                   client="local", noise=AuditingNoiseSource(1))
            outcomes.append("released")
        except Exception as exc:  # noqa: BLE001 - the kind of failure is the observable
            outcomes.append(type(exc).__name__)
    assert outcomes == ["InvalidParameterError", "InvalidParameterError"]
    with pytest.raises(InvalidParameterError, match="row_norm_bound must be in"):
        window(store, last="1D", epsilon=1.0, delta=1e-6, row_norm_bound=1e-160, client="local", seed=1)


def test_row_window_partitions_do_not_depend_on_row_counts(tmp_path, auditing_pair):
    """``last_rows=W`` with W rows in the newest partition, and its neighbour with one of them removed, whose last W
    rows reach into the partition before. Both read every partition up to the end: the same reported partitions,
    so the same executor choice (from their number), Gram tasks and ledger keys charged; the rows kept inside move
    by the row window's sensitivity (one row in, one out). It used to read only the partitions holding the last W
    rows, which told the two apart."""
    from dppca_dask.ingest import ingest

    def store(path, newest: int):
        rng = np.random.default_rng(0)
        s = ingest(sp.csr_array(rng.standard_normal((25, D))), path, n_features=D, timestamp="2026-11-01")
        return append_partition(s.path, sp.csr_array(rng.standard_normal((newest, D))), timestamp=_day(2))

    na, nb = auditing_pair()
    ra = _release(store(tmp_path / "a", 25), na, "gaussian", last_rows=25)
    rb = _release(store(tmp_path / "b", 24), nb, "gaussian", last_rows=25)
    assert ra.window.to_dict() == rb.window.to_dict() and ra.window.partitions == (0, 1)
    assert ra.window == rb.window  # the result carries no row ranges (they follow the row counts)
    assert ra.provenance["executor"] == rb.provenance["executor"]
    assert len(na.records) == len(nb.records) == 1
    assert_within_sensitivity(na.records, nb.records)


@pytest.mark.parametrize("where", ["newest", "inside", "before"])
def test_row_window_with_a_horizon(tmp_path, auditing_pair, where):
    """``last_rows=W`` within ``last="3D"`` (days 4..6): a row at the clip bound added to the newest day pushes the
    window's oldest row out (within the row-window sensitivity); added to a day of the horizon before the window's
    rows it moves nothing; added to a day before the horizon (day 2) it moves nothing either, and that day is not
    read. Both neighbours read, report and are charged to the horizon's partitions only."""
    edge = np.zeros(D)
    edge[0] = 3.0
    day = {"newest": 6, "inside": 4, "before": 2}[where]
    a = _store(tmp_path / "a", {})
    b = _store(tmp_path / "b", {day: edge})
    na, nb = auditing_pair()
    ra = _release(a, na, "gaussian", last_rows=30, last="3D")
    rb = _release(b, nb, "gaussian", last_rows=30, last="3D")
    assert ra.window == rb.window and ra.window.partitions == (3, 4, 5) and ra.window.last_rows == 30
    assert ra.provenance["executor"] == rb.provenance["executor"]
    assert na.records[0].sensitivity == pytest.approx(np.sqrt(2) * C * C)
    assert_within_sensitivity(na.records, nb.records)
    if where != "newest":  # the window's 30 rows: the newest day's 25 and the last 5 of day 5
        assert np.array_equal(na.records[0].exact, nb.records[0].exact)


def _labelled(store, extra_day: int | None):
    """Labels for every row of a :func:`_store` store (the extra row, at position 10 of ``extra_day``, labelled 4.0:
    clipped with its row)."""
    import zarr

    labels = []
    for n in range(1, 7):
        day = list(np.random.default_rng(100 + n).uniform(-2.0, 2.0, 25))
        if n == extra_day:
            day.insert(10, 4.0)
        labels.extend(day)
    assert len(labels) == store.n_rows
    zarr.open_group(store.path, mode="r+").create_array("labels", data=np.asarray(labels), chunks=(64,))
    zarr.consolidate_metadata(store.path)  # a node added with zarr: consolidated again
    return store


# (rows W, last, end, day of the added row, whether the window's exact Gram may move):
# the horizon ``last="3D"`` is days 4..6 (partitions 3..5, 75 rows without the added one).
HORIZON_CASES = {
    "newest": (30, "3D", None, 6, True),  # the window's oldest row leaves: aaᵀ − bbᵀ
    "inside-before-the-rows": (30, "3D", None, 4, False),  # in the horizon, before the window's 30 rows
    "exactly-W-first-day": (75, "3D", None, 4, True),  # 75 rows = W: the added row pushes day 4's first row out
    "fewer-than-W": (100, "3D", None, 5, True),  # the horizon holds fewer than W: all its rows, and the added one
    "fewer-than-W-before-the-horizon": (100, "3D", None, 3, False),  # day 3 is outside, though W > 75
    "end-given-inside": (30, "2D", "2026-11-05", 5, True),  # days 4..5: the newest day of the window
    "end-given-after-the-end": (30, "2D", "2026-11-05", 6, False),  # day 6 is after the window's end
}


@pytest.mark.parametrize("case", sorted(HORIZON_CASES))
def test_row_window_with_a_horizon_every_placement(tmp_path, auditing_pair, case):
    """A row at the clip bound added anywhere around a row window with a horizon (``last_rows`` with ``last``, with
    and without ``end``), for each release (and the Gaussian with labels): the neighbours read, report and charge
    the same partitions (the time window's), make the same releases with the same calibration and result fields,
    and the exact Gram moves by at most the row-window sensitivity (Gaussian: √2·c² in the L2 norm its noise is
    given; Wishart and JL: the two fixed-position changes of c² each their (ε/2, δ/(1+e^{ε/2})) calibration
    covers), and not at all where the row is outside the window's rows. Deterministic."""
    w, last, end, day, moves = HORIZON_CASES[case]
    edge = np.zeros(D)
    edge[0] = 3.0  # clipped to norm C (with its label, to norm C together)
    a = _labelled(_store(tmp_path / "a", {}), None)
    b = _labelled(_store(tmp_path / "b", {day: edge}), day)
    for release, labels in (("gaussian", False), ("gaussian", True), ("wishart", False), ("jl", False)):
        na, nb = auditing_pair()
        kwargs = {"last_rows": w, "last": last, "labels": labels, **({"end": end} if end else {})}
        ra = _release(a, na, release, **kwargs)
        rb = _release(b, nb, release, **kwargs)
        horizon = (3, 4) if end else (3, 4, 5)
        assert ra.window == rb.window and ra.window.partitions == horizon and ra.window.last_rows == w
        assert ra.window.start == f"last {w} rows after 2026-11-03T00:00:00+00:00"  # both horizons start after Nov 3
        assert ra.to_dict().keys() == rb.to_dict().keys() and ra.calibration == rb.calibration
        assert ra.privacy.to_dict() == rb.privacy.to_dict() and ra.provenance["executor"] == rb.provenance["executor"]
        assert [r.release for r in na.records] == [r.release for r in nb.records]
        assert ra.released.shape == ((D + 1, D + 1) if labels else (D, D))
        if release == "gaussian":
            assert na.records[0].sensitivity == pytest.approx(np.sqrt(2) * C * C)
            assert_within_sensitivity(na.records, nb.records)
        else:
            assert ra.calibration["mechanism_epsilon"] == pytest.approx(0.5)  # ε/2
            assert ra.calibration["mechanism_delta"] == pytest.approx(1e-6 / (1 + math.exp(0.5)))
            assert _frobenius_moves(na.records, nb.records)[0] <= 2 * C * C * (1 + 1e-9)
        assert np.array_equal(na.records[0].exact, nb.records[0].exact) != moves, (release, labels)


def test_exact_grams_are_never_written_into_a_directory_others_can_write(tmp_path):
    """The Gram cache and the spectral histogram keep exact (pre-noise) Grams beside the store. A directory of that
    name that already exists and others can write to (a shared parent) let them plant a link at the temporary's
    name: the exact Gram was written through it into a file they can read. Such a directory is refused before
    anything is read; the temporary is created fresh, never through a link; a damaged cached Gram is refused."""
    import os

    from dppca_dask.errors import InvalidParameterError, StoreCorruptError
    from dppca_dask.methods.window.gram import cache_directory, cache_file

    store = _store(tmp_path / "a", {})
    directory = cache_directory(store)
    os.mkdir(directory)
    os.chmod(directory, 0o777)
    outside = tmp_path / "readable-by-others"
    outside.write_bytes(b"")
    target = cache_file(store, 5, C, False)
    os.symlink(outside, target + ".partial")
    with pytest.raises(InvalidParameterError, match="not owner-only"):
        _release(store, None, "gaussian", seed=1, cache=True)
    assert outside.read_bytes() == b""
    os.chmod(directory, 0o700)  # owner-only now; the planted link is not followed
    _release(store, None, "gaussian", seed=1, cache=True)
    assert outside.read_bytes() == b"" and not os.path.islink(target) and os.path.isfile(target)
    with open(target, "wb") as fh:
        fh.write(b"\x93NUMPY damaged")
    with pytest.raises(StoreCorruptError, match="cannot be read"):
        _release(store, None, "gaussian", seed=1, cache=True)
    np.save(target, np.ones(D))  # the wrong shape broadcast into the sum
    with pytest.raises(StoreCorruptError, match="not a finite"):
        _release(store, None, "gaussian", seed=1, cache=True)
    histogram = os.path.join(os.path.dirname(store.path), ".a.window-259200s-features")
    os.mkdir(histogram, 0o755)
    os.chmod(histogram, 0o755)
    with pytest.raises(InvalidParameterError, match="not owner-only"):
        _release(store, None, "gaussian", seed=1, structure="spectral-histogram")


def test_one_release_at_a_time_from_a_tree(tmp_path):
    """Two releases from one tree at once would each draw a missing node and release it with its own noise: one
    node released twice, beyond the L levels the report composes. The tree is locked from reading its state to
    writing it; a second release meanwhile is refused."""
    from filelock import FileLock

    from dppca_dask.errors import InvalidParameterError
    from dppca_dask.methods.window import tree_window

    store = _store(tmp_path / "a", {})
    directory = os.path.join(os.path.dirname(store.path), ".a.window-tree-8-features")
    with FileLock(directory + ".lock"):  # a release in progress in another process
        with pytest.raises(InvalidParameterError, match="another release from the tree"):
            tree_window(store, last="3D", epsilon=1.0, delta=1e-6, horizon=8, row_norm_bound=C, client="local")
    assert tree_window(store, last="3D", epsilon=1.0, delta=1e-6, horizon=8, row_norm_bound=C, client="local").private


def test_tree_neighbours_release_the_same_nodes_and_charge_the_same_events(tmp_path, auditing_pair):
    """The binary tree on neighbours (a row at the clip bound on one coordinate, in a partition every release reads):
    the same nodes drawn by both (the tree's shape is public), each node's exact Gram moving by at most the c² its
    noise is given, the same result fields, and the same ledger: on each partition, exactly the events of the nodes
    drawn that hold it, and nothing for a release that draws no node; and, the state moved away, the same refusal."""
    from dp_accounting import GaussianDpEvent

    from dppca_dask.accounting import event_to_json
    from dppca_dask.errors import InvalidParameterError
    from dppca_dask.ledger import Ledger
    from dppca_dask.methods.window import tree_window
    from dppca_dask.methods.window.budget import partition_key

    edge = np.zeros(D)
    edge[3] = 5.0
    a = _store(tmp_path / "a", {})
    b = _store(tmp_path / "b", {5: edge})
    na, nb = auditing_pair()
    results, ledgers = [], []
    for store, noise, name in ((a, na, "a"), (b, nb, "b")):
        ledger = Ledger.create(tmp_path / f"{name}.sqlite")
        ledger.init_dataset("nightly", total_epsilon=10.0, total_delta=1e-5)
        args = {"epsilon": 1.0, "delta": 1e-6, "horizon": 8, "row_norm_bound": C, "client": "local", "noise": noise,
                "ledger": ledger, "dataset": "nightly"}
        results.append([tree_window(store, last=last, job_id=f"night-{n}", **args)
                        for n, last in enumerate(("3D", "5D", "2D"))])
        ledgers.append((ledger, store))
    assert [r.release for r in na.records] == [r.release for r in nb.records]
    assert all(r.sensitivity == pytest.approx(C * C) for r in na.records)
    assert_within_sensitivity(na.records, nb.records)
    for ra, rb in zip(*results):
        assert ra.to_dict().keys() == rb.to_dict().keys() and ra.window == rb.window
        assert ra.privacy.to_dict() == rb.privacy.to_dict() and ra.calibration == rb.calibration
    one = event_to_json(GaussianDpEvent(results[0][0].calibration["noise_multiplier"]))
    charged = []
    for ledger, store in ledgers:
        per_partition = {}
        for index in range(6):
            held = sum((k << lv) <= index < ((k + 1) << lv)
                       for lv, k in (tuple(int(v) for v in r.release.split("/")[1:]) for r in na.records))
            name = partition_key("nightly", store, index)
            entries = [e for e in ledger.entries(["nightly"]) if name in e.partitions]
            events = [event_to_json(e) for e in ledger.counted_on("nightly", name)]
            assert events == [one] * held  # reservations equal the events emitted on the partition
            per_partition[index] = [(e.job_id, e.status, e.outcome, e.mechanism, e.epsilon, e.delta,
                                     e.first_release is not None) for e in entries]
        charged.append(per_partition)
    assert charged[0] == charged[1]
    # A lost state is refused on both alike, before any node: the decision reads only the ledger and the file system.
    from dppca_dask.methods.window.tree import _state_path

    refusals = []
    for (ledger, store), noise in zip(ledgers, (na, nb)):
        directory = _state_path(store.path, 8, False)
        os.rename(directory, directory + ".moved")
        drawn = len(noise.records)
        with pytest.raises(InvalidParameterError) as refused:
            tree_window(store, last="3D", job_id="night-9", epsilon=1.0, delta=1e-6, horizon=8, row_norm_bound=C,
                        client="local", noise=noise, ledger=ledger, dataset="nightly")
        assert len(noise.records) == drawn and ledger.find("night-9") == []
        refusals.append(str(refused.value).replace(directory, "STATE").replace(str(ledger.path), "LEDGER"))
    assert refusals[0] == refusals[1] and "records nodes of this store's tree" in refusals[0]


@pytest.mark.parametrize("epsilon", [5.0, 10.0, 50.0, 100.0])
@pytest.mark.parametrize("dim", [1, 5, 40])
def test_wishart_release_without_the_row_stays_where_the_one_with_it_can_be(epsilon, dim):
    """``K + W`` (row removed) against ``K + uuᵀ + W``: the second always has ``X − K − uuᵀ = W`` PSD; the first
    has ``X − K − uuᵀ = W − uuᵀ`` not PSD, an outcome the neighbour cannot produce, with probability
    ``Pr[uᵀW⁻¹u ≥ 1] = Pr[χ²_{τ−d+1} < 1]``. The printed ``τ = d + 28·ln(4/δ)/ε²`` nears d for large ε (ε = 10,
    δ = 1e-6: τ = d + 5, probability 1.4e-2; ε ≥ 50: τ = d + 1, 0.39); the default τ keeps it at most δ (so far
    below the δ of the release at ε ≤ 3, where the printed τ is kept)."""
    from scipy.stats import chi2

    from dppca_dask.mechanisms.wishart import wishart_tau

    delta = 1e-6
    tau = math.ceil(wishart_tau(dim, epsilon=epsilon, delta=delta))
    assert chi2.cdf(1.0, tau - dim + 1) <= delta
    for small in (0.5, 1.0, 3.0):  # the printed rule is kept where it suffices (the spec's golden values)
        printed = dim + 28.0 * math.log(4.0 / delta) / small**2
        assert wishart_tau(dim, epsilon=small, delta=delta) == printed
