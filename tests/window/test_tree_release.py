"""The experimental binary-tree continual release: dyadic covers, node counts, noise drawn once per node."""

from __future__ import annotations

import json
import math
import os

import numpy as np
import pytest

from dppca_dask.accounting import calibrate_gaussian
from dppca_dask.errors import InvalidParameterError
from dppca_dask.mechanisms.testing import AuditingNoiseSource, ZeroNoiseSource
from dppca_dask.methods.window.tree import TREE_CAVEAT, dyadic_cover, tree_window
from window_data import clipped, day_block

pytestmark = pytest.mark.filterwarnings("ignore::dppca_dask.errors.NotPrivateWarning")


def test_dyadic_cover_is_exact_and_logarithmic():
    for start in range(0, 40):
        for stop in range(start, 70):
            cover = dyadic_cover(start, stop)
            covered = [p for lv, k in cover for p in range(k << lv, (k + 1) << lv)]
            assert covered == list(range(start, stop + 1))
            assert len(cover) <= 2 * math.ceil(math.log2(stop - start + 2))


def test_tree_window_draws_each_node_once(ten_days):
    noise = AuditingNoiseSource(1)
    first = tree_window(ten_days, last="5D", epsilon=1, delta=1e-6, horizon=16, client="local", noise=noise)
    # window = partitions 5..9: nodes (0,5), (1,3) = 6..7, (1,4) = 8..9
    assert first.calibration["nodes"] == 3 and first.calibration["levels"] == 5
    assert sorted(r.release for r in noise.records) == ["tree/0/5", "tree/1/3", "tree/1/4"]
    assert first.calibration["noise_multiplier"] == calibrate_gaussian(epsilon=1, delta=1e-6, count=5)
    assert TREE_CAVEAT in first.privacy.caveats and first.privacy.epsilon == pytest.approx(1.0, rel=1e-3)
    again = AuditingNoiseSource(2)
    second = tree_window(ten_days, last="5D", epsilon=1, delta=1e-6, horizon=16, client="local", noise=again)
    assert again.records == [] and np.array_equal(first.released, second.released)  # kept, never redrawn


def test_tree_noise_off_and_refusals(daily_store):
    store = daily_store(4)
    result = tree_window(store, last="3D", epsilon=1, delta=1e-6, horizon=4, client="local",
                         noise=ZeroNoiseSource())
    rows = clipped(np.vstack([day_block(n).toarray() for n in (2, 3, 4)]))
    assert np.allclose(result.released, rows.T @ rows)
    with pytest.raises(InvalidParameterError, match="horizon must be a positive integer"):
        tree_window(store, last="3D", epsilon=1, delta=1e-6, horizon=0, client="local")
    with pytest.raises(InvalidParameterError, match="more partitions than the tree's horizon"):
        tree_window(store, last="3D", epsilon=1, delta=1e-6, horizon=2, client="local")
    with pytest.raises(InvalidParameterError, match=r"was built with epsilon=1\.0 .*passes epsilon=2: use its "
                                                    r"parameters \(epsilon=1\.0, --epsilon 1\.0\)"):
        tree_window(store, last="3D", epsilon=2, delta=1e-6, horizon=4, client="local")
    with pytest.raises(InvalidParameterError, match=r"was built with delta=1e-06 .*passes delta=1e-07"):
        tree_window(store, last="3D", epsilon=1, delta=1e-7, horizon=4, client="local")


# ------------------------------------------------------------------------------------ partition-scoped budget
def _ledger(tmp_path, total: float = 10.0):
    from dppca_dask.ledger import Ledger

    ledger = Ledger.create(tmp_path / "ledger.sqlite")
    ledger.init_dataset("nightly", total_epsilon=total, total_delta=1e-5)
    return ledger


def _charged(ledger, store, index: int) -> list:
    """Every event counted on partition ``index``'s key, over all jobs."""
    from dppca_dask.methods.window.budget import partition_key

    return ledger.counted_on("nightly", partition_key("nightly", store, index))


def _nodes_holding(records, index: int) -> int:
    """How many released nodes (``tree/<level>/<k>``) hold partition ``index``."""
    held = 0
    for r in records:
        level, k = (int(v) for v in r.release.split("/")[1:])
        held += (k << level) <= index < ((k + 1) << level)
    return held


def test_a_budgeted_tree_charges_each_node_drawn_to_the_partitions_it_holds(daily_store, tmp_path):
    from dp_accounting import GaussianDpEvent

    from dppca_dask.accounting import event_to_json

    store = daily_store(6)
    ledger = _ledger(tmp_path)
    noise = AuditingNoiseSource(3)
    args = {"epsilon": 1, "delta": 1e-6, "horizon": 8, "client": "local", "noise": noise, "ledger": ledger,
            "dataset": "nightly"}
    first = tree_window(store, last="3D", job_id="night-1", **args)  # partitions 3..5: nodes (0,3), (1,2)
    assert sorted(r.release for r in noise.records) == ["tree/0/3", "tree/1/2"]
    tree_window(store, last="6D", job_id="night-2", **args)  # 0..5: (2,0) is new, (1,2) is kept
    assert sorted(r.release for r in noise.records) == ["tree/0/3", "tree/1/2", "tree/2/0"]
    tree_window(store, last="2D", job_id="night-3", **args)  # 4..5: (1,2), kept: nothing drawn, nothing charged
    assert len(noise.records) == 3
    multiplier = first.calibration["noise_multiplier"]
    one = event_to_json(GaussianDpEvent(multiplier))
    for index in range(6):  # the ledger holds exactly the nodes emitted that hold each partition
        counted = _charged(ledger, store, index)
        assert [event_to_json(e) for e in counted] == [one] * _nodes_holding(noise.records, index)
    from dppca_dask.methods.window.budget import partition_key

    assert ledger.entry("nightly", "night-3") is None  # nothing drawn, nothing reserved
    assert ledger.entry("nightly", "night-2").status == "charged"


def test_a_partition_in_every_level_spends_the_trees_budget_and_no_more(daily_store, tmp_path):
    from dppca_dask.ledger import compose_epsilon
    from dppca_dask.methods.window.budget import partition_key

    store = daily_store(4)
    ledger = _ledger(tmp_path)
    for n, last in enumerate(("1D", "2D", "4D")):  # partition 3 in (0,3), (1,1), (2,0): all L = 3 levels
        tree_window(store, last=last, epsilon=1, delta=1e-6, horizon=4, client="local", noise=ZeroNoiseSource(),
                    ledger=ledger, dataset="nightly", job_id=f"night-{n}")
    events = _charged(ledger, store, 3)
    assert len(events) == 3
    spent = next(p.spent_epsilon for p in ledger.budget("nightly").partitions
                 if p.partition == partition_key("nightly", store, 3))
    # the three nodes are the tree's whole (1, 1e-6): at the key's larger delta they count for less. The 0.1% above 1
    # allows for the ledger's PLD grid, coarser than the calibration's, which can only round ε up (pessimistic
    # discretisation; it gives 1 - 1e-9 here)
    assert spent == pytest.approx(compose_epsilon(events, 1e-5))
    assert 0.5 < spent <= compose_epsilon(events, 1e-6) <= 1.001


def test_a_tree_release_over_any_partitions_budget_is_refused_before_any_node(daily_store, tmp_path):
    from dppca_dask.errors import BudgetExceededError
    from dppca_dask.methods.window.budget import partition_key
    from dppca_dask.methods.window.tree import _state_path

    store = daily_store(4)
    ledger = _ledger(tmp_path, total=1.8)  # one node of a (3, 1e-6) tree of 3 levels fits (1.44), two do not
    args = {"epsilon": 3, "delta": 1e-6, "horizon": 4, "client": "local", "ledger": ledger, "dataset": "nightly"}
    tree_window(store, last="1D", job_id="night-1", noise=ZeroNoiseSource(), **args)  # node (0,3) on partition 3
    state = os.path.join(_state_path(store.path, 4, False), "nodes.json")
    with open(state) as fh:
        before = fh.read()
    noise = ZeroNoiseSource()
    with pytest.raises(BudgetExceededError, match=f"on partition '{partition_key('nightly', store, 3)}'"):
        tree_window(store, last="2D", job_id="night-2", noise=noise, **args)  # (1,1) on 2 and 3: 3 is spent
    assert noise.released_keys == frozenset()
    assert ledger.entry("nightly", "night-2").status == "refused"  # recorded, counted nowhere
    assert len(_charged(ledger, store, 2)) == 0
    with open(state) as fh:
        assert fh.read() == before  # no node kept


def test_a_node_drawn_before_a_failure_stays_charged(daily_store, tmp_path):
    from dppca_dask.errors import ReleaseError
    from dppca_dask.mechanisms.testing import ScriptedNoiseSource
    from dppca_dask.methods.window.budget import partition_key

    store = daily_store(4)
    ledger = _ledger(tmp_path)
    with pytest.raises(ReleaseError, match="no values left"):  # the first node's draw begins, then fails
        tree_window(store, last="1D", epsilon=1, delta=1e-6, horizon=4, client="local",
                    noise=ScriptedNoiseSource([]), ledger=ledger, dataset="nightly", job_id="night-1")
    entry = ledger.entry("nightly", "night-1")
    assert entry.partitions == (partition_key("nightly", store, 3),)
    assert entry.status == "charged" and entry.outcome == "failed" and entry.first_release is None
    noise = AuditingNoiseSource(1)  # that node was never kept: the next release draws it, unrefused
    tree_window(store, last="1D", epsilon=1, delta=1e-6, horizon=4, client="local", noise=noise, ledger=ledger,
                dataset="nightly", job_id="night-2")
    assert [r.release for r in noise.records] == ["tree/0/3"] and len(_charged(ledger, store, 3)) == 2


def test_a_tree_is_charged_to_one_dataset_key_from_its_first_node(daily_store, tmp_path):
    store = daily_store(4)
    ledger = _ledger(tmp_path)
    ledger.init_dataset("other", total_epsilon=10, total_delta=1e-5)
    args = {"epsilon": 1, "delta": 1e-6, "horizon": 4, "client": "local"}
    tree_window(store, last="1D", ledger=ledger, dataset="nightly", job_id="night-1", noise=ZeroNoiseSource(), **args)
    with pytest.raises(InvalidParameterError, match="charged to dataset 'nightly'"):
        tree_window(store, last="2D", noise=ZeroNoiseSource(), **args)
    with pytest.raises(InvalidParameterError, match="charged to dataset 'nightly'"):
        tree_window(store, last="2D", ledger=ledger, dataset="other", job_id="night-2", noise=ZeroNoiseSource(), **args)
    plain_store = _four_days(tmp_path / "plain")
    tree_window(plain_store, last="1D", noise=ZeroNoiseSource(), **args)
    with pytest.raises(InvalidParameterError, match="drawn without a partition-scoped budget"):
        tree_window(plain_store, last="2D", ledger=ledger, dataset="nightly", job_id="night-3", noise=ZeroNoiseSource(), **args)
    with pytest.raises(InvalidParameterError, match="ledger, dataset and job_id together"):
        tree_window(store, last="2D", ledger=ledger, dataset="nightly", noise=ZeroNoiseSource(), **args)
    with pytest.raises(InvalidParameterError, match="either seed or noise"):
        tree_window(store, last="2D", epsilon=1, delta=1e-6, horizon=4, client="local", seed=1,
                    noise=ZeroNoiseSource())


def _four_days(path):
    from dppca_dask.ingest import ingest
    from dppca_dask.storage import append_partition
    from window_data import D, day

    store = ingest(day_block(1), path, n_features=D, timestamp="2026-11-01")
    for n in range(2, 5):
        store = append_partition(store.path, day_block(n), timestamp=day(n))
    return store


def test_a_job_id_reused_by_a_later_tree_release_is_refused_before_its_nodes(daily_store, tmp_path):
    """A job id already charged on a partition stands for the nodes it drew there: a later release under the same id
    whose new node holds that partition charges it the same single event, and the ledger returned the old charge
    unchanged (a re-run), so the partition held two nodes drawn and counted one. Refused before any node is drawn
    and before anything is reserved: the other partition gets no entry, and the charged one no second attempt."""
    from dppca_dask.errors import LedgerError
    from dppca_dask.methods.window.budget import partition_key

    store = daily_store(4)
    ledger = _ledger(tmp_path)
    args = {"epsilon": 1, "delta": 1e-6, "horizon": 4, "client": "local", "ledger": ledger, "dataset": "nightly",
            "job_id": "nightly"}
    tree_window(store, last="1D", noise=ZeroNoiseSource(), **args)  # node (0,3): one event on partition 3
    noise = AuditingNoiseSource(1)
    with pytest.raises(LedgerError, match="job id 'nightly' is already charged"):
        tree_window(store, last="2D", noise=noise, **args)  # node (1,1) holds 2 and 3: one event on each
    assert noise.released_keys == frozenset() and noise.records == []
    assert ledger.entry("nightly", "nightly").partitions == (partition_key("nightly", store, 3),)
    assert ledger.entry("nightly", "nightly").attempts == 1
    assert len(_charged(ledger, store, 3)) == 1  # the one node drawn on partition 3
    result = tree_window(store, last="2D", noise=noise, **{**args, "job_id": "nightly-2"})  # a new id: charged
    assert [r.release for r in noise.records] == ["tree/1/1"] and result.calibration["nodes"] == 1
    assert len(_charged(ledger, store, 3)) == 2 == _nodes_holding(noise.records, 3) + 1
    assert len(_charged(ledger, store, 2)) == 1


def test_a_job_id_reused_by_a_window_release_is_refused_before_its_noise(daily_store, tmp_path):
    """The same for a window release: the same window again under a job id already charged would draw fresh noise
    that the ledger, returning the old charge unchanged, never counts."""
    from dppca_dask import window
    from dppca_dask.errors import LedgerError

    store = daily_store(4)
    ledger = _ledger(tmp_path)
    args = {"last": "2D", "epsilon": 1, "delta": 1e-6, "client": "local", "ledger": ledger, "dataset": "nightly",
            "job_id": "nightly"}
    window(store, noise=ZeroNoiseSource(), **args)
    noise = AuditingNoiseSource(1)
    with pytest.raises(LedgerError, match="job id 'nightly' is already charged"):
        window(store, noise=noise, **args)
    assert noise.released_keys == frozenset()
    assert all(len(_charged(ledger, store, i)) == 1 for i in (2, 3))


def test_nodes_drawn_before_the_state_write_fails_stay_charged_and_a_rerun_charges_its_own(daily_store, tmp_path,
                                                                                          monkeypatch):
    """The pending state's write failing after the nodes were drawn: nothing is released and the nodes stay charged
    (their draw was recorded at once, the charge's outcome is ``failed``). The same job id is refused (exit 3: a
    second draw of its release); another job id draws them again, unrefused (no state ever held them: the ledger
    tells a failed write, charged as failed, from a state moved away, charged as succeeded) and is charged again:
    on every partition the ledger counts every node drawn that holds it, kept or not."""
    from dppca_dask.errors import BudgetExceededError
    from dppca_dask.methods.window import gram

    store = daily_store(4)
    ledger = _ledger(tmp_path)
    noise = AuditingNoiseSource(1)
    args = {"epsilon": 1, "delta": 1e-6, "horizon": 4, "client": "local", "ledger": ledger, "dataset": "nightly"}

    def full_disk(path, write, *options):
        raise OSError(28, "No space left on device", path)

    with monkeypatch.context() as patched:
        patched.setattr(gram, "write_private_file", full_disk)
        with pytest.raises(OSError, match="No space left"):
            tree_window(store, last="2D", job_id="night-1", noise=noise, **args)  # node (1,1): partitions 2 and 3
    assert [r.release for r in noise.records] == ["tree/1/1"]
    entry = ledger.entry("nightly", "night-1")
    assert entry.status == "charged" and entry.outcome == "failed" and entry.first_release is not None
    assert all(len(_charged(ledger, store, i)) == 1 for i in (2, 3))
    again = AuditingNoiseSource(2)
    with pytest.raises(BudgetExceededError, match="job 'night-1' drew nodes .* second release"):
        tree_window(store, last="2D", job_id="night-1", noise=again, **args)
    assert again.records == []
    tree_window(store, last="2D", job_id="night-2", noise=again, **args)  # drawn again, charged again
    drawn = noise.records + again.records
    assert [r.release for r in drawn] == ["tree/1/1", "tree/1/1"]
    for index in (2, 3):  # partitions 0 and 1 were never charged (their keys do not exist)
        assert len(_charged(ledger, store, index)) == _nodes_holding(drawn, index) == 2


def test_a_tree_state_without_a_budget_field_is_an_uncharged_tree(daily_store, tmp_path):
    """A state written before trees were charged (no ``budget`` field) holds nodes no ledger counted: a budgeted
    release refuses it before drawing; a release without a budget goes on using it."""
    import json

    from dppca_dask.methods.window.tree import _state_path

    store = daily_store(4)
    args = {"epsilon": 1, "delta": 1e-6, "horizon": 4, "client": "local"}
    tree_window(store, last="1D", noise=ZeroNoiseSource(), **args)
    state = os.path.join(_state_path(store.path, 4, False), "nodes.json")
    with open(state) as fh:
        saved = json.load(fh)
    del saved["budget"]
    with open(state, "w") as fh:
        json.dump(saved, fh)
    ledger = _ledger(tmp_path)
    noise = AuditingNoiseSource(1)
    with pytest.raises(InvalidParameterError, match="drawn without a partition-scoped budget"):
        tree_window(store, last="2D", ledger=ledger, dataset="nightly", job_id="night-1", noise=noise, **args)
    assert noise.released_keys == frozenset() and ledger.find("night-1") == []
    assert tree_window(store, last="1D", noise=ZeroNoiseSource(), **args).calibration["nodes"] == 1


def test_a_tree_stays_charged_to_its_ledger(daily_store, tmp_path):
    """The key a tree is charged to lives in one ledger: a release passing another ledger with a key of the same name
    would charge its new nodes there, and no ledger would hold a partition's composition of every node drawn that
    holds it. Refused before any node is drawn."""
    from dppca_dask.ledger import Ledger

    store = daily_store(4)
    ledger = _ledger(tmp_path)
    other = Ledger.create(tmp_path / "other.sqlite")
    other.init_dataset("nightly", total_epsilon=10.0, total_delta=1e-5)
    args = {"epsilon": 1, "delta": 1e-6, "horizon": 4, "client": "local", "dataset": "nightly"}
    tree_window(store, last="1D", ledger=ledger, job_id="night-1", noise=ZeroNoiseSource(), **args)  # (0,3)
    noise = AuditingNoiseSource(1)
    with pytest.raises(InvalidParameterError, match=f"ledger '{ledger.id}'"):
        tree_window(store, last="2D", ledger=other, job_id="night-2", noise=noise, **args)  # (1,1) holds 3 too
    assert noise.released_keys == frozenset() and other.find("night-2") == []
    tree_window(store, last="2D", ledger=str(ledger.path), job_id="night-2", noise=noise, **args)  # its own: by path
    assert len(_charged(ledger, store, 3)) == 2
    import json

    from dppca_dask.methods.window.tree import _state_path

    state = os.path.join(_state_path(store.path, 4, False), "nodes.json")
    with open(state) as fh:
        saved = json.load(fh)
    assert saved["budget"] == "nightly" and saved["ledger"] == ledger.id
    del saved["ledger"]  # a budgeted state that does not name its ledger
    with open(state, "w") as fh:
        json.dump(saved, fh)
    with pytest.raises(InvalidParameterError, match="does not name the ledger"):
        tree_window(store, last="4D", ledger=ledger, job_id="night-3", noise=noise, **args)
    assert ledger.find("night-3") == []


# ------------------------------------------------------------------------------------ one tree per store, any path
def test_every_path_to_a_store_finds_its_one_tree(daily_store, tmp_path):
    """A store reached through a symbolic link, or through ``..`` past a link (where the lexical path names another
    directory), finds the tree its real path found: the second release reuses the first's nodes, draws nothing and
    charges nothing, and no second state directory appears beside the link."""
    from dppca_dask.storage import open_matrix

    store = daily_store(4)
    (tmp_path / "elsewhere").mkdir()
    link = tmp_path / "elsewhere" / "nightly"
    link.symlink_to(store.path, target_is_directory=True)
    (tmp_path / "deep" / "a").mkdir(parents=True)
    (tmp_path / "hop").symlink_to(tmp_path / "deep" / "a", target_is_directory=True)
    dotted = os.path.join(str(tmp_path / "hop"), "..", "..", os.path.basename(store.path))  # really tmp_path/store
    assert os.path.abspath(dotted) != os.path.realpath(dotted) == os.path.realpath(store.path)
    ledger = _ledger(tmp_path)
    args = {"epsilon": 1, "delta": 1e-6, "horizon": 4, "client": "local", "ledger": ledger, "dataset": "nightly"}
    noise = AuditingNoiseSource(1)
    first = tree_window(store, last="2D", job_id="night-1", noise=noise, **args)  # node (1,1)
    assert [r.release for r in noise.records] == ["tree/1/1"]
    for n, path in enumerate((str(link), dotted), start=2):
        again = AuditingNoiseSource(n)
        second = tree_window(open_matrix(path), last="2D", job_id=f"night-{n}", noise=again, **args)
        assert again.records == [] and np.array_equal(first.released, second.released)
        assert ledger.find(f"night-{n}") == []  # nothing drawn, nothing charged
    assert not os.path.exists(tmp_path / "elsewhere" / ".nightly.window-tree-4-features")
    assert len(_charged(ledger, store, 2)) == len(_charged(ledger, store, 3)) == 1


def test_the_gram_cache_and_histogram_are_named_from_the_real_path(daily_store, tmp_path):
    from dppca_dask.methods.window.gram import cache_directory
    from dppca_dask.methods.window.histogram import histogram_path
    from dppca_dask.storage import open_matrix

    store = daily_store(2)
    link = tmp_path / "nightly"
    link.symlink_to(store.path, target_is_directory=True)
    linked = open_matrix(str(link))
    assert cache_directory(linked) == cache_directory(store) == os.path.join(str(tmp_path), ".store.window-grams")
    assert histogram_path(str(link), "86400s-features") == histogram_path(store.path, "86400s-features")


def test_a_tree_kept_under_the_name_of_a_link_is_refused_not_redrawn(daily_store, tmp_path):
    """Earlier versions named a tree's directory from the path as given: a store reached through a link kept its
    tree beside the link. After the upgrade that path must not start a fresh tree (a second draw of the same nodes,
    beyond the old tree's report): refused before any node, naming both directories; ``new_tree=True`` starts a new
    tree deliberately, and is refused once a tree is found."""
    import json
    import shutil

    from dppca_dask.methods.window.tree import _older_state_path, _state_path
    from dppca_dask.storage import open_matrix

    store = daily_store(4)
    link = tmp_path / "nightly"
    link.symlink_to(store.path, target_is_directory=True)
    linked = open_matrix(str(link))
    args = {"epsilon": 1, "delta": 1e-6, "horizon": 4, "client": "local"}
    tree_window(linked, last="2D", noise=ZeroNoiseSource(), **args)
    real, older = _state_path(str(link), 4, False), _older_state_path(str(link), 4, False)
    assert real != older and not os.path.exists(older)
    shutil.move(real, older)  # where an earlier version kept it
    noise = AuditingNoiseSource(1)
    with pytest.raises(InvalidParameterError, match="new_tree=True") as refused:
        tree_window(linked, last="2D", noise=noise, **args)
    assert f"'{real}'" in str(refused.value) and f"'{older}'" in str(refused.value)
    assert noise.records == [] and not os.path.exists(real)
    with pytest.raises(InvalidParameterError, match="new_tree must be True or False"):
        tree_window(linked, last="2D", noise=noise, new_tree="yes", **args)
    tree_window(linked, last="2D", noise=noise, new_tree=True, **args)  # deliberately: drawn again
    assert [r.release for r in noise.records] == ["tree/1/1"]
    with pytest.raises(InvalidParameterError, match="holds this store's tree: drop new_tree"):
        tree_window(linked, last="2D", noise=noise, new_tree=True, **args)
    assert len(noise.records) == 1
    shutil.rmtree(real)  # the older directory back in place, holding another store's tree: not this store's
    with open(os.path.join(older, "nodes.json")) as fh:
        saved = json.load(fh)
    saved["store_id"] = "another-store"
    with open(os.path.join(older, "nodes.json"), "w") as fh:
        json.dump(saved, fh)
    assert tree_window(linked, last="2D", noise=ZeroNoiseSource(), **args).calibration["nodes"] == 1


# ------------------------------------------------------------------------------------ a budgeted tree's lost state
def test_a_budgeted_trees_state_moved_away_is_refused_not_redrawn(daily_store, tmp_path):
    """Whoever can write the store's parent directory can move a tree's state away; the ledger records the tree's
    nodes (mechanism ``sliding-window/binary-tree-<H>``, first release noted before the state is written), so the
    next release is refused before any node is drawn or reserved; restored, the tree goes on; ``new_tree=True``
    starts over deliberately and is charged."""
    from dppca_dask.methods.window.budget import partition_key
    from dppca_dask.methods.window.tree import _state_path, ledger_mechanism

    store = daily_store(4)
    ledger = _ledger(tmp_path)
    args = {"epsilon": 1, "delta": 1e-6, "horizon": 4, "client": "local", "ledger": ledger, "dataset": "nightly"}
    noise = AuditingNoiseSource(1)
    first = tree_window(store, last="2D", job_id="night-1", noise=noise, **args)  # node (1,1)
    entry = ledger.entry("nightly", "night-1")
    assert partition_key("nightly", store, 2) in entry.partitions
    assert entry.mechanism == ledger_mechanism(4) == "sliding-window/binary-tree-4"
    assert entry.status == "charged" and entry.first_release is not None
    directory = _state_path(store.path, 4, False)
    os.rename(directory, directory + ".moved")
    for last in ("2D", "1D"):  # the kept node again, or a new one: the tree is lost either way
        again = AuditingNoiseSource(2)
        with pytest.raises(InvalidParameterError, match="records nodes of this store's tree") as refused:
            tree_window(store, last=last, job_id="night-2", noise=again, **args)
        assert again.records == [] and again.released_keys == frozenset() and ledger.find("night-2") == []
    message = str(refused.value)
    assert f"'{directory}'" in message and "jobs 'night-1'" in message and "Restore the state directory" in message
    os.rename(directory + ".moved", directory)  # restored: its nodes are reused
    kept = AuditingNoiseSource(3)
    assert np.array_equal(tree_window(store, last="2D", job_id="night-2", noise=kept, **args).released, first.released)
    assert kept.records == [] and ledger.find("night-2") == []
    os.rename(directory, directory + ".moved")
    fresh = AuditingNoiseSource(4)
    tree_window(store, last="2D", job_id="night-3", noise=fresh, new_tree=True, **args)  # deliberately: charged
    assert [r.release for r in fresh.records] == ["tree/1/1"]
    assert all(len(_charged(ledger, store, i)) == 2 for i in (2, 3))


def test_tree_charges_recorded_before_trees_named_themselves_are_recognised(daily_store, tmp_path):
    """A ledger written before node charges named their tree holds them as ``sliding-window`` charges of the tree's
    Gaussian multiplier, one event per node, without a recorded first release: a lost state is refused on them too.
    A window release's charges on the same key (another multiplier) start no refusal."""
    import sqlite3

    from dppca_dask import window
    from dppca_dask.methods.window.tree import _state_path

    store = daily_store(4)
    ledger = _ledger(tmp_path)
    args = {"epsilon": 1, "delta": 1e-6, "horizon": 4, "client": "local", "ledger": ledger, "dataset": "nightly"}
    window(store, last="2D", epsilon=1, delta=1e-6, client="local", noise=ZeroNoiseSource(), ledger=ledger,
           dataset="nightly", job_id="window-1")
    tree_window(store, last="2D", job_id="night-1", noise=ZeroNoiseSource(), **args)  # a first tree: unrefused
    with sqlite3.connect(ledger.path) as db:  # as an earlier version recorded them
        db.execute("UPDATE entries SET mechanism = 'sliding-window', first_release = NULL WHERE job_id = 'night-1'")
    db.close()
    directory = _state_path(store.path, 4, False)
    os.rename(directory, directory + ".moved")
    noise = AuditingNoiseSource(1)
    with pytest.raises(InvalidParameterError, match="jobs 'night-1'"):
        tree_window(store, last="2D", job_id="night-2", noise=noise, **args)
    assert noise.records == [] and ledger.find("night-2") == []


def test_a_tree_keeps_its_clipping_bound(daily_store):
    """A window sums nodes drawn by several releases: all must clip rows to the same bound and be scaled to it. A
    release with another ``row_norm_bound`` would add nodes of another clipping (and report its bound for the sum),
    so it is refused before anything is drawn."""
    store = daily_store(6)
    noise = AuditingNoiseSource(1)
    tree_window(store, last="2D", epsilon=1, delta=1e-6, horizon=16, client="local", noise=noise)
    other = AuditingNoiseSource(2)
    with pytest.raises(InvalidParameterError, match="row_norm_bound=1.0"):
        tree_window(store, last="5D", epsilon=1, delta=1e-6, horizon=16, client="local", noise=other,
                    row_norm_bound=2.0)
    assert other.records == []
    again = tree_window(store, last="5D", epsilon=1, delta=1e-6, horizon=16, client="local", noise=other)
    assert again.calibration["row_norm_bound"] == 1.0 and other.records


def test_a_release_through_a_link_waits_for_one_through_the_real_path(daily_store, tmp_path):
    """The tree's lock is named from the store's real path: while a release through the real path holds it, a
    release through a link is refused before anything is drawn (two at once would each draw a missing node)."""
    from dppca_dask.methods.window.tree import _lock, _state_path
    from dppca_dask.storage import open_matrix

    store = daily_store(4)
    link = tmp_path / "nightly"
    link.symlink_to(store.path, target_is_directory=True)
    held = _lock(_state_path(store.path, 4, False))
    try:
        noise = AuditingNoiseSource(1)
        with pytest.raises(InvalidParameterError, match="another release from the tree .* is running"):
            tree_window(open_matrix(str(link)), last="2D", epsilon=1, delta=1e-6, horizon=4, client="local",
                        noise=noise)
        assert noise.records == []
    finally:
        held.release()
    tree_window(open_matrix(str(link)), last="2D", epsilon=1, delta=1e-6, horizon=4, client="local", noise=noise)
    assert [r.release for r in noise.records] == ["tree/1/1"]


@pytest.mark.parametrize("horizon", [1, 2, 3, 4, 5, 7, 8, 9, 31, 100, 129])
def test_the_tree_is_calibrated_to_the_nodes_a_partition_can_occupy(horizon):
    """Nodes (level, k) inside the horizon ((k+1)·2^level ≤ H): the most holding one partition is H.bit_length()
    (H = 3: 2 of the ⌈log₂H⌉+1 = 3 once counted; H = 100: 7 of 8), and the release is calibrated to it."""
    from dppca_dask.methods.window.tree import tree_levels

    nodes = [(lv, k) for lv in range(horizon.bit_length() + 2) for k in range(horizon) if (k + 1) << lv <= horizon]
    most = max(sum(1 for lv, k in nodes if k << lv <= p < (k + 1) << lv) for p in range(horizon))
    assert tree_levels(horizon) == most == math.floor(math.log2(horizon)) + 1
    assert {3: 2, 100: 7}.get(horizon, most) == most


def test_a_tree_over_three_partitions_spends_two_levels(daily_store, tmp_path):
    from dppca_dask.ledger import compose_epsilon
    from dppca_dask.methods.window.budget import partition_key

    store = daily_store(1)
    ledger = _ledger(tmp_path)
    result = tree_window(store, last="1D", epsilon=1, delta=1e-6, horizon=3, client="local",
                         noise=ZeroNoiseSource(), ledger=ledger, dataset="nightly", job_id="night-0")
    assert result.calibration["levels"] == 2
    assert result.calibration["noise_multiplier"] == calibrate_gaussian(epsilon=1, delta=1e-6, count=2)
    assert result.privacy.epsilon == pytest.approx(1.0, rel=1e-3)
    from dppca_dask.storage import append_partition
    from window_data import day

    store = append_partition(store.path, day_block(2), timestamp=day(2))
    tree_window(store, last="2D", epsilon=1, delta=1e-6, horizon=3, client="local", noise=ZeroNoiseSource(),
                ledger=ledger, dataset="nightly", job_id="night-1")
    events = _charged(ledger, store, 0)  # partition 0 in (0, 0) and (1, 0): every level it can occupy
    assert len(events) == 2 and compose_epsilon(events, 1e-6) <= 1.001


def test_a_tree_saved_with_the_earlier_level_count_keeps_its_calibration(daily_store, monkeypatch):
    from dppca_dask.methods.window import tree as tree_module

    store = daily_store(2)
    with monkeypatch.context() as patch:
        patch.setattr(tree_module, "tree_levels", tree_module._legacy_levels)
        old = tree_window(store, last="1D", epsilon=1, delta=1e-6, horizon=3, client="local", noise=ZeroNoiseSource())
    assert old.calibration["levels"] == 3
    again = tree_window(store, last="2D", epsilon=1, delta=1e-6, horizon=3, client="local", noise=ZeroNoiseSource())
    assert again.calibration["levels"] == 3  # its nodes' noise: the later ones drawn alike
    assert again.calibration["noise_multiplier"] == old.calibration["noise_multiplier"]


class _Killed(BaseException):
    """Stands for the process being killed at a kill point (raised past every ``except Exception``)."""


def test_a_release_left_pending_is_finished_by_the_next_release_of_the_tree(daily_store, tmp_path, monkeypatch):
    """A release stopped after writing its pending state (before its charge): the next release from the tree, under
    another job id, charges it (succeeded), publishes its nodes as written and goes on: the pending node is not
    drawn again and each node is charged once."""
    from dppca_dask.methods.window import tree as tree_module
    from dppca_dask.methods.window.tree import PENDING_FILE, _state_path

    store = daily_store(4)
    ledger = _ledger(tmp_path)
    args = {"epsilon": 1, "delta": 1e-6, "horizon": 4, "client": "local", "ledger": ledger, "dataset": "nightly"}

    def kill(name):
        if name == "pending-complete":
            raise _Killed(name)

    noise = AuditingNoiseSource(1)
    with monkeypatch.context() as patched:
        patched.setattr(tree_module, "_kill_point", kill)
        with pytest.raises(_Killed):
            tree_window(store, last="2D", job_id="night-1", noise=noise, **args)  # node (1,1)
    directory = _state_path(store.path, 4, False)
    with open(os.path.join(directory, PENDING_FILE)) as fh:
        pending = json.load(fh)
    assert pending["release"] == {"job_id": "night-1", "dataset": "nightly"}
    assert ledger.entry("nightly", "night-1").status == "reserved"
    assert not os.path.exists(os.path.join(directory, "nodes.json"))
    again = AuditingNoiseSource(2)
    tree_window(store, last="1D", job_id="night-2", noise=again, **args)  # node (0,3): new
    assert [r.release for r in again.records] == ["tree/0/3"]
    first = ledger.entry("nightly", "night-1")
    assert first.status == "charged" and first.outcome == "succeeded"
    with open(os.path.join(directory, "nodes.json")) as fh:
        kept = json.load(fh)["nodes"]
    assert kept["1/1"] == pending["nodes"]["1/1"] and set(kept) == {"1/1", "0/3"}
    assert not os.path.exists(os.path.join(directory, PENDING_FILE))
    assert len(_charged(ledger, store, 2)) == 1 and len(_charged(ledger, store, 3)) == 2
    result = tree_window(store, last="2D", job_id="night-1", noise=again, **args)  # its own re-run: nothing drawn
    assert len(again.records) == 1 and np.allclose(result.released, np.asarray(pending["nodes"]["1/1"]))
