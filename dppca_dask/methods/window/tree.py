"""Continual release by the binary tree mechanism over partition Grams (experimental; seed 001 App. D).

Partitions ``0..H−1`` (``H = horizon``, public) are the leaves of a dyadic tree; node ``(ℓ, k)`` covers partitions
``k·2^ℓ .. (k+1)·2^ℓ − 1`` and exists when it lies inside the horizon (``(k+1)·2^ℓ ≤ H``), so its levels are
``0..⌊log₂H⌋``: ``L = H.bit_length()`` of them, and a partition sits in at most L nodes (partition 0 in exactly L;
H = 3: 2, H = 100: 7). A node's noisy Gram (exact Gram of its clipped rows
plus symmetric Gaussian noise) is drawn once, when a window first needs it, and kept beside the store: the state
holds only released (noisy) matrices. A window ``[s, T]`` is the sum of the ``O(log W)`` maximal dyadic nodes
inside it, so releasing every night costs nothing beyond the nodes: each row sits in at most L nodes, and all
the releases of the tree together are the composition of L Gaussian mechanisms of multiplier
``calibrate_gaussian(ε, δ, count=L)`` — (ε, δ)-DP for adding or removing one row, over the whole horizon.

The state records whether its nodes were drawn by a private source: a private release refuses a tree holding
nodes drawn with a seed (their noise is known to whoever knows the seed), and a seeded run refuses to add nodes to
a private tree. One release at a time: the tree is locked (a ``.lock`` file beside its directory) from reading its
state to writing it, so that no node is drawn twice. A budgeted release writes its new nodes pending before it is
charged, and publishes them after (:func:`tree_window`): a crash at any step is finished, or refused with the
budget spent, never drawn again.

Experimental: the spec calls App. D underspecified; this is the standard tree mechanism (Dwork et al. 2010), not
the paper's. Event-level: a person with rows in many partitions is covered only by group privacy.
"""

from __future__ import annotations

import json
import math
import os
from typing import Any, cast

import numpy as np

from dppca_dask.accounting import ADD_REMOVE_ROW, build_report, calibrate_gaussian
from dppca_dask.errors import InvalidParameterError, StoreCorruptError
from dppca_dask.mechanisms import NoiseSource
from dppca_dask.mechanisms.wishart import symmetric_gaussian_mechanism

__all__ = ["TREE_CAVEAT", "dyadic_cover", "ledger_mechanism", "node_charges", "tree_levels", "tree_window"]

TREE_CAVEAT = ("experimental binary-tree continual release: the guarantee covers every release from this tree over "
               "its horizon together (each row is in at most L noisy nodes)")


def tree_levels(horizon: int) -> int:
    """The most nodes of a tree over ``horizon`` partitions that hold one partition: ``horizon.bit_length()``
    (levels 0..⌊log₂H⌋; a node of a higher level would reach past the horizon)."""
    return int(horizon).bit_length()


def _legacy_levels(horizon: int) -> int:
    """The level count trees calibrated to before they counted nodes (``⌈log₂H⌉ + 1``, more than needed when H is
    not a power of two): a saved tree drawn with it goes on with its own multiplier."""
    return math.ceil(math.log2(horizon)) + 1


def _saved_levels(directory: str, horizon: int, options: Any = None) -> int:
    """The level count of the tree saved in ``directory`` (legacy or current), or the current one."""
    from dppca_dask.methods.window.gram import join_state, read_state

    try:
        saved = json.loads(read_state(join_state(directory, "nodes.json"), options)).get("levels")
    except (OSError, ValueError, AttributeError):
        saved = None
    return _legacy_levels(horizon) if saved == _legacy_levels(horizon) else tree_levels(horizon)


def dyadic_cover(start: int, stop: int) -> list[tuple[int, int]]:
    """The maximal dyadic nodes ``(level, index)`` whose union is partitions ``start..stop`` (inclusive)."""
    out, pos = [], start
    while pos <= stop:
        level = 0
        while pos % (2 ** (level + 1)) == 0 and pos + 2 ** (level + 1) - 1 <= stop:
            level += 1
        out.append((level, pos >> level))
        pos += 2**level
    return out


def ledger_mechanism(horizon: int) -> str:
    """The mechanism name a tree's node charges carry in the ledger, ``sliding-window/binary-tree-<H>``: with the
    store id the entry records, it names the tree (its state directory beside the store)."""
    from dppca_dask.methods.window.budget import MECHANISM

    return f"{MECHANISM}/binary-tree-{int(horizon)}"


def node_charges(nodes: list[tuple[int, int]], multiplier: float,
                 delta: float) -> dict[int, tuple[float, float, tuple[Any, ...]]]:
    """What drawing ``nodes`` charges each partition they hold: one ``GaussianDpEvent(multiplier)`` per node,
    with the (ε, δ) those events give at ``delta`` (the partitions and node counts are public: the tree's shape)."""
    from dp_accounting import GaussianDpEvent

    from dppca_dask.ledger import compose_epsilon

    counts: dict[int, int] = {}
    for lv, k in nodes:
        for p in range(k << lv, (k + 1) << lv):
            counts[p] = counts.get(p, 0) + 1
    per_count = {n: (GaussianDpEvent(multiplier),) * n for n in set(counts.values())}
    epsilons = {n: compose_epsilon(list(events), delta) for n, events in per_count.items()}
    return {p: (epsilons[n], delta, per_count[n]) for p, n in sorted(counts.items())}


def _state_path(store_path: str, horizon: int, labels: bool) -> str:
    """The tree's state directory beside the store, named from the store's real path (links resolved): every path
    to one store (a link, ``..``) finds its one tree, whose nodes are drawn once; for a store in object storage,
    a prefix beside it in its bucket."""
    from dppca_dask.methods.window.gram import beside_store

    return beside_store(store_path, f"window-tree-{horizon}-{'labels' if labels else 'features'}")


def _older_state_path(store_path: str, horizon: int, labels: bool) -> str:
    """Where releases before trees were named from the real path kept a tree reached by ``store_path`` (the path
    as given, links not resolved); a store in object storage has no links: its one place."""
    from dppca_dask._urls import is_url

    if is_url(store_path):
        return _state_path(store_path, horizon, labels)
    parent, base = os.path.split(os.path.abspath(store_path))
    return os.path.join(parent, f".{base}.window-tree-{horizon}-{'labels' if labels else 'features'}")


def tree_window(
    store: Any,
    *,
    last: Any,
    epsilon: float,
    delta: float,
    horizon: int,
    row_norm_bound: float = 1.0,
    client: Any = None,
    executor: str = "auto",
    noise: NoiseSource | None = None,
    seed: int | None = None,
    ledger: Any = None,
    dataset: str | None = None,
    job_id: str | None = None,
    new_tree: bool = False,
    storage_options: Any = None,
) -> Any:
    """Release the current time window (``last``, ending at the newest partition) from the binary tree.

    Returns a :class:`~dppca_dask.methods.window.WindowRelease` whose privacy report covers all releases of the
    tree up to ``horizon`` partitions (see the module docstring). ``client`` and ``executor`` choose where it
    runs, as for :func:`~dppca_dask.window`. ``seed`` or ``noise`` (not both) make it not private.
    ``ledger``, ``dataset`` and ``job_id`` (together) charge each node drawn to the partitions it holds, under the
    dataset key's total (module docstring); a release whose nodes would take a partition over it is refused before
    any value is read into a node. A tree stays charged to its first node's key in that node's ledger (the state
    records the key and the ledger's id); a job id already charged on a partition is refused. A tree keeps the
    ``row_norm_bound`` its nodes clip rows to (a window sums nodes of several releases): a release with another is
    refused (a state written before trees recorded it takes the next release's).

    The tree's state is kept beside the store's real path (links resolved). When no state is found but this store's
    tree was released before — a state directory written under the name of the path the store was reached by (the
    name earlier versions gave it), or, with a budget, node charges of this tree in the ledger recorded as written
    to its state — the release is refused before any node is drawn: drawing the nodes again would release the same
    rows beyond the tree's report. Restore the state, or pass ``new_tree=True`` to start a new tree deliberately
    (the rows' privacy is then the composition of both trees' reports; with a budget, the new nodes are charged).
    ``new_tree=True`` is refused when the tree's state is found.

    A budgeted release is atomic: the missing nodes' charges are reserved, the nodes drawn and the draw recorded in
    the ledger at once (never returned from then on), the state with them written pending (:data:`PENDING_FILE`),
    the reservation charged, then the state published. A release that stopped after writing its pending state is
    finished by the next release from the tree (charged if it was not, published; nothing drawn again); a job id
    that drew nodes and wrote none of them is refused (:class:`~dppca_dask.errors.BudgetExceededError`, its budget
    spent): running it again would draw its release a second time.

    A store in object storage (its URL, with ``storage_options`` as for :func:`~dppca_dask.window`)
    keeps its tree beside it in its bucket (``s3://bucket/.x.zarr.window-tree-…/nodes.json``, each state object
    written whole by one PUT), locked by an object created with a conditional PUT (``….lock``).
    """
    from dppca_dask.methods.window.release import _choose, check_seed, partition_budget, plan_window

    if isinstance(horizon, bool) or not isinstance(horizon, (int, np.integer)) or horizon < 1:
        raise InvalidParameterError(f"horizon must be a positive integer (partitions); got {horizon!r}")
    if storage_options is not None and not hasattr(store, "storage_options"):
        from dppca_dask.storage import open_matrix

        store = open_matrix(store, storage_options=storage_options)
    plan = plan_window(store, last=last, epsilon=epsilon, delta=delta, row_norm_bound=row_norm_bound)
    store = plan.store
    from dppca_dask.methods.window.selection import require_time_order

    require_time_order(store, "the binary tree")
    choice = _choose(plan, client, executor)
    check_seed(seed, noise)
    if not isinstance(new_tree, (bool, np.bool_)):
        raise InvalidParameterError(f"new_tree must be True or False; got {new_tree!r}")
    if ledger is not None and dataset is not None and job_id is not None:  # before the state is read
        if not isinstance(job_id, str) or not job_id:
            raise InvalidParameterError(f"job_id must be a non-empty string; got {job_id!r}")
        if store.store_id is None:
            raise InvalidParameterError(f"'{store.path}' has no store id (an AnnData store opened directly); "
                                        "partition-scoped budgets need a dppca_dask store: `dppca-dask ingest`")
    budget = partition_budget(ledger, dataset, job_id)
    if store.n_partitions > horizon:
        raise InvalidParameterError(f"the store has more partitions than the tree's horizon={horizon}; the tree "
                                    "is spent: start a new one with a larger horizon (and a new budget)")
    directory = _state_path(store.path, int(horizon), False)
    # a tree saved with the earlier count keeps its calibration
    levels = _saved_levels(directory, int(horizon), store.storage_options)
    multiplier = calibrate_gaussian(epsilon=epsilon, delta=delta, count=levels)
    older = _older_state_path(store.path, int(horizon), False)
    lock = _lock(directory, store.storage_options)
    try:
        return _tree_release(plan, choice, client, directory, epsilon, delta, int(horizon), levels, multiplier,
                             noise, seed, budget, older=older, new_tree=bool(new_tree))
    finally:
        lock.release()


class _ObjectLock:
    """The tree's lock in object storage: an object beside its state, created by a conditional PUT."""

    def __init__(self, url: str, options: Any) -> None:
        self.url, self.options = url, options

    def release(self) -> None:
        from dppca_dask.storage._remote import remove_object

        remove_object(self.url, self.options)


def _lock(directory: str, options: Any = None) -> Any:
    """The tree's exclusive lock (a file beside its directory; in object storage, an object created by a
    conditional PUT) from reading its state to writing it: two releases at once would each draw a missing node and
    release it with its own noise (one node, two releases)."""
    from filelock import FileLock, Timeout

    from dppca_dask._urls import is_url

    if is_url(directory):
        from dppca_dask.storage._remote import try_lock_object

        if not try_lock_object(directory + ".lock", options):
            raise InvalidParameterError(f"another release from the tree in '{directory}' is running (its lock "
                                        f"object '{directory}.lock' exists); wait for it to end, or, if none "
                                        "runs (one was killed on another machine), delete that object")
        return _ObjectLock(directory + ".lock", options)

    lock = FileLock(directory + ".lock", timeout=0, mode=0o600)
    try:
        lock.acquire()
    except Timeout:
        raise InvalidParameterError(f"another release from the tree in '{directory}' is running; wait for it to "
                                    "end") from None
    return lock


def _refuse_a_lost_tree(store: Any, directory: str, older: str | None) -> None:
    """Refuse to start a tree in ``directory`` (no state found there) when this store's tree was released before:
    its nodes would be drawn again (see :func:`tree_window`)."""
    older_file = None if older is None else os.path.join(older, "nodes.json")
    if older_file is not None and older != directory and os.path.lexists(older_file):
        try:
            with open(older_file) as fh:
                theirs = json.load(fh).get("store_id")
        except (OSError, ValueError, AttributeError):
            theirs = store.store_id  # unreadable: it may be this store's
        if theirs == store.store_id:
            raise InvalidParameterError(
                f"no tree state in '{directory}' (named from the store's real path), but '{older}' holds this "
                "store's tree, named from the path the store was reached by (as earlier versions named it): move "
                f"that directory to '{directory}' to go on with it (a new tree would draw its nodes again, beyond "
                "its report), or pass new_tree=True (--new-tree) to start a new tree deliberately (the rows' "
                "privacy is then the composition of both trees' reports)"
            )


def _refuse_lost_nodes(budget: dict[str, Any], store: Any, directory: str, horizon: int, multiplier: float) -> None:
    """Refuse to start a tree in ``directory`` (no state found there) when the ledger records nodes of this tree
    written to its state on the release's dataset key: the state was moved away (or left behind by a store moved
    or copied), and drawing its nodes again would release the same rows beyond the tree's report.

    A node charge names the tree by its dataset key, the store id it records and its mechanism
    (:func:`ledger_mechanism`), records its first release as soon as its nodes are drawn, and is charged as
    succeeded only once they are written (pending) to the state; nodes drawn by a release that failed or was killed
    before writing them were never kept nor released (drawing them again, under another job id, is what the ledger
    already counts). Charges
    recorded before trees named themselves are recognised by their events (this tree's Gaussian multiplier, one
    per node) on a charge of a release that succeeded. The decision reads the ledger only (public)."""
    from dp_accounting import GaussianDpEvent

    from dppca_dask.ledger import CHARGED, RESERVED
    from dppca_dask.methods.window.budget import MECHANISM

    ledger, dataset = budget["ledger"], budget["dataset"]
    name = ledger_mechanism(horizon)
    jobs: list[str] = []
    for entry in ledger.entries([dataset]):
        if entry.status not in (RESERVED, CHARGED) or entry.store_id != store.store_id:
            continue
        if entry.mechanism == name:  # written to a (pending) state before it was charged as succeeded
            kept = entry.first_release is not None and entry.status == CHARGED and entry.outcome == "succeeded"
        else:
            kept = (entry.mechanism == MECHANISM and entry.status == CHARGED and entry.outcome == "succeeded"
                    and bool(entry.events) and all(isinstance(e, GaussianDpEvent) and e.noise_multiplier == multiplier
                                                   for e in entry.events))
        if kept and entry.job_id not in jobs:
            jobs.append(entry.job_id)
    if jobs:
        named = ", ".join(f"'{j}'" for j in jobs[:5]) + (f" and {len(jobs) - 5} more" if len(jobs) > 5 else "")
        raise InvalidParameterError(
            f"no tree state in '{directory}', but ledger '{ledger.path}' records nodes of this store's tree (horizon "
            f"{horizon}) on dataset '{dataset}' kept in its state (jobs {named}): drawing them again would release "
            "the same rows beyond the tree's report. Restore the state directory (moved away, or left behind when "
            "the store was moved or copied); if it was never written (that release failed writing it), or to start "
            "over, pass new_tree=True (--new-tree) to start a new tree deliberately (its nodes are charged "
            "again)"
        )


#: The tree's pending state, beside its ``nodes.json``: the state with the nodes a release drew and (``release``) the
#: job they are charged to, written at once (a temporary moved into place) before the charge, and moved over
#: ``nodes.json`` after it.
PENDING_FILE = "pending.json"


def _kill_point(name: str) -> None:
    """A named step of a tree release where a crash leaves a distinct state: ``before-reservation``, ``reserved``,
    ``released`` (nodes drawn and recorded in the ledger), ``pending-complete``, ``charged``, ``published``
    (fault-injection tests replace this function, as they replace the job runner's, to kill the process there)."""


def _read_state_file(path: str, directory: str, options: Any = None) -> dict[str, Any]:
    """A tree state file (``nodes.json`` or :data:`PENDING_FILE`), which holds released values: unreadable, it is
    refused (a new tree would spend a new budget)."""
    from dppca_dask.methods.window.gram import read_state

    try:
        data = json.loads(read_state(path, options))
    except (OSError, ValueError):
        data = None
    if not isinstance(data, dict) or not isinstance(data.get("nodes", {}), dict):
        raise StoreCorruptError(f"the tree state in '{directory}' ({os.path.basename(path)}) cannot be read; it holds "
                                "released values: restore it (a new tree would spend a new budget)", source=directory)
    return data


def _check_saved(saved: dict[str, Any], directory: str, store: Any, epsilon: float, delta: float, levels: int,
                 multiplier: float, c: float) -> None:
    """Refuse a saved tree built for another store or budget, naming the parameter and the value it was built with
    (nodes drawn with another noise scale, or of another store's rows, cannot be summed into this release)."""
    if saved.get("store_id") != store.store_id:
        raise InvalidParameterError(
            f"the tree in '{directory}' was built for store id {saved.get('store_id')!r}, and '{store.path}' has "
            f"store id {store.store_id!r} (ingested again or replaced): its nodes hold another store's rows; run on "
            "that store, or move the directory away to start a tree for this one"
        )
    for name, given in (("epsilon", epsilon), ("delta", delta)):
        kept = saved.get(name)  # states written before trees recorded them say only their multiplier
        if kept is not None and float(kept) != float(given):
            raise InvalidParameterError(
                f"the tree in '{directory}' was built with {name}={kept!r} (its nodes' noise is calibrated to it "
                f"over the horizon), and this release passes {name}={given!r}: use its parameters ({name}={kept!r}, "
                f"--{name} {kept!r})"
            )
    if saved.get("multiplier") != multiplier:
        raise InvalidParameterError(
            f"the tree in '{directory}' was built with noise_multiplier={saved.get('multiplier')!r} (calibrated from "
            f"its epsilon and delta over {levels} levels; its state, written before trees recorded them, names "
            f"neither), and this release's epsilon={epsilon!r}, delta={delta!r} give noise_multiplier={multiplier!r}: "
            "use the epsilon and delta the tree was built with"
        )
    kept_bound = saved.get("row_norm_bound")  # states written before trees recorded it do not say
    if saved.get("nodes") and kept_bound is not None and kept_bound != c:
        raise InvalidParameterError(
            f"the tree in '{directory}' clips rows to row_norm_bound={kept_bound!r} and a window sums its "
            f"nodes; this release passes row_norm_bound={c!r}: use the tree's bound"
        )


def _load_tree(directory: str, store: Any, *, epsilon: float, delta: float, levels: int, multiplier: float,
               c: float, horizon: int, budget: dict[str, Any] | None, older: str | None,
               new_tree: bool) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """The tree's state checked against this release — its pending state when a release stopped before publishing
    it — and that pending record; ``(None, None)`` when there is no tree yet (after refusing to start one over a
    lost tree, see :func:`tree_window`)."""
    from dppca_dask.methods.window.gram import join_state, state_exists

    options = store.storage_options
    pending_file, state_file = join_state(directory, PENDING_FILE), join_state(directory, "nodes.json")
    pending = _read_state_file(pending_file, directory, options) if state_exists(pending_file, options) else None
    if pending is not None:
        saved: dict[str, Any] | None = pending
    else:
        saved = _read_state_file(state_file, directory, options) if state_exists(state_file, options) else None
    if saved is None:
        if not new_tree:
            _refuse_a_lost_tree(store, directory, older)
            if budget is not None:
                _refuse_lost_nodes(budget, store, directory, horizon, multiplier)
        return None, None
    if new_tree:
        raise InvalidParameterError(f"new_tree=True (--new-tree) starts a tree where none is found, and "
                                    f"'{directory}' holds this store's tree: drop new_tree to go on with it")
    _check_saved(saved, directory, store, epsilon, delta, levels, multiplier, c)
    return saved, pending


def _check_charged_key(directory: str, charged_to: Any, charged_in: Any, budget: dict[str, Any] | None) -> None:
    """Refuse a release whose budget is not the one the tree's nodes are charged to (its dataset key, its ledger)."""
    dataset = None if budget is None else budget["dataset"]
    if charged_to != dataset:
        if charged_to is None:
            raise InvalidParameterError(f"the tree in '{directory}' was drawn without a partition-scoped budget: its "
                                        "nodes were never charged, so a budgeted release cannot account for them; "
                                        "start a new tree (another horizon or store) to charge it")
        raise InvalidParameterError(f"the tree in '{directory}' is charged to dataset '{charged_to}': pass that "
                                    "ledger with dataset and job_id")
    if budget is not None and charged_in != budget["ledger"].id:
        # A key of the same name in another ledger holds none of the tree's earlier nodes: no ledger would compose
        # every node drawn that holds a partition.
        raise InvalidParameterError(
            f"the tree in '{directory}' is charged to dataset '{dataset}' in ledger '{charged_in}' (its id); this "
            f"release passes ledger '{budget['ledger'].id}' ({budget['ledger'].path}): pass the tree's ledger"
            if charged_in else
            f"the tree in '{directory}' is charged to dataset '{dataset}', but its state does not name the ledger "
            "(written before trees recorded it), so this ledger may not hold its earlier nodes: start a new tree "
            "(another horizon or store)"
        )


def _publish_pending(directory: str, options: Any = None) -> None:
    """Make the pending state the tree's state: a rename of the file beside a local store; in object storage (no
    rename), ``nodes.json`` written whole by one PUT from the pending object's bytes, then the pending object
    removed (a crash in between leaves both, equal: the next release finishes the pending one again)."""
    from dppca_dask._urls import is_url
    from dppca_dask.methods.window.gram import join_state, read_state, write_private_file

    pending, state = join_state(directory, PENDING_FILE), join_state(directory, "nodes.json")
    if not is_url(directory):
        os.replace(pending, state)
        return
    from dppca_dask.storage._remote import remove_object

    data = read_state(pending, options)
    write_private_file(state, lambda fh: fh.write(data), options)
    remove_object(pending, options)


def _finish_pending(directory: str, pending: dict[str, Any], budget: dict[str, Any] | None,
                    options: Any = None) -> None:
    """Finish the release a crash left pending: its nodes were drawn and written, so it is charged (when its charge
    is not recorded yet) and its state published; nothing is drawn again. The checks before (the pending state's
    dataset key and ledger are this release's) make ``budget`` the one it is charged to."""
    from dppca_dask.errors import LedgerError
    from dppca_dask.ledger import CHARGED, RESERVED

    last: dict[str, Any] = pending["release"] if isinstance(pending.get("release"), dict) else {}
    job_id, dataset = last.get("job_id"), last.get("dataset")
    if job_id is not None and budget is not None:
        ledger = budget["ledger"]
        entry = ledger.entry(dataset, job_id)
        if entry is None or entry.status not in (RESERVED, CHARGED) or entry.first_release is None:
            raise LedgerError(
                f"the tree in '{directory}' holds a pending release of job '{job_id}' (its nodes drawn and written), "
                f"but ledger '{ledger.path}' records no drawn reservation of it on dataset '{dataset}': restore the "
                f"ledger the tree is charged to, or move '{os.path.join(directory, PENDING_FILE)}' away"
            )
        if entry.status == RESERVED:
            ledger.charge(dataset, job_id, outcome="succeeded")
            _kill_point("charged")
    _publish_pending(directory, options)
    _kill_point("published")


def _refuse_an_unfinished_job(budget: dict[str, Any], directory: str) -> None:
    """Refuse (exit 3) a release under a job id that drew nodes and wrote none of them (killed or failed between
    the draw and its pending state): its budget stays spent (a reservation still open is charged as failed), and
    running it again would draw the same release's nodes a second time."""
    from dppca_dask.errors import BudgetExceededError
    from dppca_dask.ledger import CHARGED, RESERVED

    ledger, dataset, job_id = budget["ledger"], budget["dataset"], budget["job_id"]
    entry = ledger.entry(dataset, job_id)
    if entry is None or entry.first_release is None or not (
            entry.status == RESERVED or (entry.status == CHARGED and entry.outcome == "failed")):
        return
    if entry.status == RESERVED:
        ledger.charge(dataset, job_id, outcome="failed")
    raise BudgetExceededError(
        f"job '{job_id}' drew nodes of the tree in '{directory}' and its budget stays spent (ledger '{ledger.path}', "
        f"dataset '{dataset}'), but it stopped before writing them: running it again would be a second release; "
        "give the release a new job id to spend new budget"
    )


def _draw_nodes(plan: Any, missing: list[tuple[int, int]], needed: tuple[int, ...], multiplier: float,
                noise: NoiseSource, budget: dict[str, Any] | None, charges: dict[int, Any], horizon: int,
                nodes: dict[str, Any], reservations: list[Any]) -> Any:
    """The release's run (a generator for the executor): reserve the nodes' charges, read the partitions they hold,
    draw each missing node once and record the draw in the ledger at once (never returned from then on)."""
    from dppca_dask.methods.window.gram import PartitionGrams

    reservation = None
    if budget is not None and charges:
        from dppca_dask.methods.window.budget import reserve_each

        _kill_point("before-reservation")
        reservation = reserve_each(budget["ledger"], budget["dataset"], budget["job_id"], store=plan.store,
                                   charges=charges, mechanism=ledger_mechanism(horizon))
        reservations.append(reservation)
        _kill_point("reserved")
    keys = [f"tree/{lv}/{k}" for lv, k in missing]
    c = plan.row_norm_bound
    try:
        grams = (yield PartitionGrams(row_norm_bound=c, partitions=needed)) if needed else {}
        for (lv, k), key in zip(missing, keys):
            exact = sum(grams[p] for p in range(k << lv, (k + 1) << lv))
            noisy, _ = symmetric_gaussian_mechanism(exact, row_norm_bound=c, noise_multiplier=multiplier,
                                                    noise=noise, release=key)
            nodes[f"{lv}/{k}"] = noisy.tolist()
        if reservation is not None and keys:
            reservation.note_release()  # drawn: recorded at once, the reservation is never returned (invariant 6)
    except BaseException:
        if reservation is not None:
            reservation.close_failed(drawn=bool(noise.released_keys & set(keys)))
        raise
    return None


def _keep_nodes(directory: str, state: dict[str, Any], budget: dict[str, Any] | None,
                reservation: Any, options: Any = None) -> None:
    """Write the state with the new nodes pending (at once), charge the release, then publish the state. A failure
    before the pending state is complete charges the drawn nodes as failed (the budget stays spent); one after
    leaves the pending state, which the next release from the tree finishes (:func:`_finish_pending`)."""
    from dppca_dask.methods.window.gram import check_private_directory, join_state, write_private_file

    release = {"job_id": None, "dataset": None}
    if reservation is not None and budget is not None:
        release = {"job_id": budget["job_id"], "dataset": budget["dataset"]}
    pending = {**state, "release": release}  # the release that drew the newest nodes, charged for them
    try:
        check_private_directory(directory, create=True)
        write_private_file(join_state(directory, PENDING_FILE), lambda fh: fh.write(json.dumps(pending).encode()),
                           options)
    except BaseException:
        if reservation is not None:
            reservation.charge(outcome="failed")
        raise
    _kill_point("pending-complete")
    if reservation is not None:
        reservation.charge()
        _kill_point("charged")
    _publish_pending(directory, options)
    _kill_point("published")


def _tree_release(plan: Any, choice: Any, client: Any, directory: str, epsilon: float, delta: float, horizon: int,
                  levels: int, multiplier: float, noise: NoiseSource | None, seed: int | None,
                  budget: dict[str, Any] | None = None, *, older: str | None = None,
                  new_tree: bool = False) -> Any:
    """Release the window from the tree in ``directory`` (locked by the caller): finish a release left pending,
    draw the window's missing nodes (reserved before, recorded in the ledger when drawn), write them pending,
    charge, publish the state, and sum the window's nodes."""
    from dppca_dask.methods.window.gram import check_private_directory, partitions_source
    from dppca_dask.methods.window.release import _execute

    store = plan.store
    c = plan.row_norm_bound
    dataset = None if budget is None else budget["dataset"]
    ledger_id = None if budget is None else budget["ledger"].id
    # Its nodes are released values, but a directory others can write would let them swap the nodes every later
    # release sums: refused (a link, another user's, not owner-only) before anything is read.
    check_private_directory(directory)
    saved, pending = _load_tree(directory, store, epsilon=epsilon, delta=delta, levels=levels,
                                multiplier=multiplier, c=c, horizon=horizon, budget=budget, older=older,
                                new_tree=new_tree)
    saved = saved or {}
    nodes: dict[str, list[list[float]]] = dict(saved.get("nodes") or {})
    drawn_privately = saved.get("private") is True if saved else True  # a state that does not say is not private
    charged_to = saved.get("budget") if nodes else dataset  # a state that does not say so had no budget
    charged_in = saved.get("ledger") if nodes else ledger_id  # a budgeted state that does not say: unknown
    _check_charged_key(directory, charged_to, charged_in, budget)
    if pending is not None:
        _finish_pending(directory, pending, budget, store.storage_options)
    if budget is not None:
        _refuse_an_unfinished_job(budget, directory)
    start, stop = plan.selection.partitions[0], plan.selection.partitions[-1]
    cover = dyadic_cover(start, stop)
    missing = [node for node in cover if f"{node[0]}/{node[1]}" not in nodes]
    needed = tuple(sorted({p for lv, k in missing for p in range(k << lv, (k + 1) << lv)}))
    if noise is None:
        noise = NoiseSource.from_entropy() if seed is None else NoiseSource.from_seed(int(seed))
    # Kept nodes are released again by every later release: a seed's (or a test source's) nodes are known to
    # whoever knows the seed, so a private release cannot reuse them, nor may a seeded run add nodes to a
    # private tree (the state says which kind of source drew its nodes).
    if noise.private and not drawn_privately:
        raise InvalidParameterError(f"the tree in '{directory}' holds nodes drawn with a seed or a test noise "
                                    "source (not private), or its state does not say how they were drawn; a "
                                    "private release cannot reuse them: delete that directory to start a new tree")
    if not noise.private and drawn_privately and nodes and missing:
        raise InvalidParameterError(f"the tree in '{directory}' was drawn privately; a seeded run would add nodes "
                                    "with known noise to it: run without a seed, or on another store")
    reservations: list[Any] = []
    algorithm = _draw_nodes(plan, missing, needed, multiplier, noise, budget, node_charges(missing, multiplier, delta),
                            horizon, nodes, reservations)
    source = partitions_source(store, needed, {"kind": "store", "fingerprint": store.fingerprint})
    try:
        _execute(source, client, None, algorithm, choice)
    except BaseException:
        algorithm.close()  # a failure before the noise (a lost cluster, a bad chunk) returns the reservation
        raise
    if missing:
        _kill_point("released")
        state = {"store_id": store.store_id, "epsilon": float(epsilon), "delta": float(delta),
                 "multiplier": multiplier, "levels": levels, "row_norm_bound": c,
                 "private": bool(drawn_privately and noise.private), "budget": charged_to, "ledger": charged_in,
                 "nodes": nodes}
        _keep_nodes(directory, state, budget, reservations[0] if reservations else None, store.storage_options)
    return _tree_result(plan, source, choice, nodes, cover, epsilon, delta, horizon, levels, multiplier, noise)


def _tree_result(plan: Any, source: Any, choice: Any, nodes: dict[str, Any], cover: list[tuple[int, int]],
                 epsilon: float, delta: float, horizon: int, levels: int, multiplier: float,
                 noise: NoiseSource) -> Any:
    """The window's release: the sum of its cover's nodes (released values), with the tree's privacy report."""
    import dataclasses

    from dp_accounting import GaussianDpEvent

    from dppca_dask.coordinator.sources import schema_caveats
    from dppca_dask.methods.window.release import WindowRelease

    store = plan.store
    released = cast(np.ndarray, sum(np.asarray(nodes[f"{lv}/{k}"]) for lv, k in cover))  # cover is never empty
    report = build_report([GaussianDpEvent(multiplier)] * levels, target_epsilon=epsilon, target_delta=delta,
                          neighbouring=ADD_REMOVE_ROW, private=bool(noise.private))
    report = dataclasses.replace(report, caveats=schema_caveats(source) + (TREE_CAVEAT,))
    calibration = {"release": "gaussian", "structure": "binary-tree", "noise_multiplier": multiplier,
                   "levels": levels, "horizon": int(horizon), "nodes": len(cover),
                   "row_norm_bound": plan.row_norm_bound}
    provenance = {"mechanism": "sliding-window", "structure": "binary-tree",
                  "input": {"fingerprint": store.fingerprint, "schema": store.schema}, "executor": choice.executor,
                  "seeded": not noise.private}
    return WindowRelease(released, 0.0, "gaussian", plan.selection.public(), report, False, calibration, provenance)
