"""One private release of a window's covariance (the steps of :func:`dppca_dask.window`), and its downstream tasks.

The default path (``structure="exact"``) computes the exact Gram of the window's clipped rows on Dask and releases
it once through one mechanism (Gaussian / Analyze Gauss, Wishart or JL); covariance, PCA, directional variance,
regression, sparse and non-negative PCA are post-processing of that one matrix. Its guarantee is unconditional:
(ε, δ)-DP for adding or removing one row (event-level: one row is one event; a person with rows in several
partitions is not covered beyond the rows' count by group privacy).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np

from dppca_dask.errors import InvalidParameterError
from dppca_dask.mechanisms import NoiseSource
from dppca_dask.mechanisms.wishart import (
    TAU_RULES,
    jl_gram_mechanism,
    symmetric_gaussian_mechanism,
    wishart_mechanism,
)
from dppca_dask.methods.window import tasks
from dppca_dask.methods.window.calibration import RELEASES, ROW_WINDOW_NEIGHBOURING
from dppca_dask.methods.window.gram import (
    WindowGram,
    check_labels,
    dense_dim_error,
)
from dppca_dask.methods.window.selection import WindowSelection, select_window
from dppca_dask.storage import MatrixStore, open_matrix

__all__ = ["RELEASES", "ROW_WINDOW_NEIGHBOURING", "HistogramSetup", "ReleaseCharges", "WindowRelease",
           "cached_release", "check_structure", "load_release", "plan_charges", "plan_histogram", "plan_window"]

#: How the window's matrix is formed before the release.
STRUCTURES: tuple[str, ...] = ("exact", "spectral-histogram")

#: The caveat of a release from the spectral histogram with the paper's pruning (erratum E8).
HISTOGRAM_CAVEAT = ("CONDITIONAL GUARANTEE: spectral histogram with the paper's spectral pruning: the release covers "
                    "the partitions from its first checkpoint, which the pruning chose from the data; the (epsilon, "
                    "delta) above holds only conditional on that checkpoint (the window's reported start), as the "
                    "paper proves (seed 001, erratum E8), not for the release as a whole; it is never charged to a "
                    "budget")

#: Largest dimension of the dense window Gram by default (as Analyze Gauss).
DEFAULT_MAX_DENSE_DIM = 4096


@dataclass(frozen=True)
class WindowPlan:
    """Everything public about a window release, fixed before any data is read."""

    store: MatrixStore
    selection: WindowSelection
    release: str
    dim: int
    labels: bool
    row_norm_bound: float
    epsilon: float
    delta: float
    neighbouring: str
    calibration: Mapping[str, Any]
    """Noise parameters: ``noise_multiplier`` (gaussian), ``tau`` (wishart), ``sigma`` and ``sketch_rows`` (jl),
    and the (ε, δ) the mechanism is run at."""
    planned_events: tuple[Any, ...]


def _positive(name: str, value: Any) -> float:
    try:
        out = float(value)
    except (TypeError, ValueError):
        raise InvalidParameterError(f"{name} must be a finite number > 0; got {value!r}") from None
    if not (math.isfinite(out) and out > 0):
        raise InvalidParameterError(f"{name} must be finite and > 0; got {value!r}")
    return out


def check_store_argument(store: Any) -> None:
    """Refuse, naming the fix, a ``store`` that is no store: a window is released from stamped partitions."""
    from zarr.storage import FsspecStore

    if not isinstance(store, (MatrixStore, str, os.PathLike, FsspecStore)):
        raise InvalidParameterError(
            f"store must be the path of a dppca_dask store with stamped partitions; got a {type(store).__name__}: "
            "ingest the rows first, e.g. dppca_dask.ingest(X, 'days.zarr', n_features=D, timestamp='2026-11-01'), "
            "and add days with dppca_dask.ingest.append.append_file"
        )


def plan_window(
    store: Any,
    *,
    last: Any = None,
    last_rows: Any = None,
    end: Any = None,
    epsilon: float,
    delta: float,
    release: str = "gaussian",
    labels: bool = False,
    row_norm_bound: float = 1.0,
    tau_rule: str = "thm11",
    sketch_rows: int | None = None,
    rank_bound: int = 1,
    max_dense_dim: int = DEFAULT_MAX_DENSE_DIM,
) -> WindowPlan:
    """Validate every parameter and choose the window (from the public partition table); reads no data.

    Rows of a row window (``last_rows``) sit at positions counted from the end, so a neighbour with one more row
    also moves the window's oldest row out: the Gram moves by ``aaᵀ − bbᵀ``. The Gaussian release is calibrated
    to that sensitivity (``√2·c²`` on the upper triangle); the Wishart and JL releases run at
    ``(ε/2, δ/(1 + e^{ε/2}))`` so that group privacy of two steps gives (ε, δ).
    """
    check_store_argument(store)
    if not isinstance(store, MatrixStore):
        store = open_matrix(store)
    from dppca_dask.methods._params import MAX_EPSILON, ROW_NORM_BOUND_RANGE

    epsilon = _positive("epsilon", epsilon)
    if epsilon > MAX_EPSILON:  # the report's accounting of a closed-form event overflows far above it
        raise InvalidParameterError(f"epsilon must be at most {MAX_EPSILON:g}; got {epsilon:g}")
    delta = _positive("delta", delta)
    if not delta < 1:
        raise InvalidParameterError(f"delta must be in (0, 1); got {delta}")
    c = _positive("row_norm_bound", row_norm_bound)
    low, high = ROW_NORM_BOUND_RANGE
    if not low <= c <= high:  # the Gram sums up to c² per row: far from it, a window's row count overflows it
        raise InvalidParameterError(f"row_norm_bound must be in [{low:g}, {high:g}]; got {c:g}; scale the data so "
                                    "that rows have norms of order 1")
    from dppca_dask.methods import mechanism_names

    if release not in mechanism_names("window"):
        raise InvalidParameterError(
            f"release must be one of {', '.join(mechanism_names('window'))}; got {release!r}"
        )
    if tau_rule not in TAU_RULES:
        raise InvalidParameterError(f"tau_rule must be one of {', '.join(TAU_RULES)}; got {tau_rule!r}")
    if not isinstance(labels, (bool, np.bool_)):
        raise InvalidParameterError(f"labels must be True or False; got {labels!r}")
    if isinstance(max_dense_dim, bool) or not isinstance(max_dense_dim, (int, np.integer)) or max_dense_dim < 1:
        raise InvalidParameterError(f"max_dense_dim must be a positive integer; got {max_dense_dim!r}")
    dim = store.n_cols + (1 if labels else 0)
    too_large = dense_dim_error(dim, int(max_dense_dim))
    if too_large is not None:
        raise too_large
    selection = select_window(store, last=last, last_rows=last_rows, end=end)
    if labels:
        check_labels(store, selection)
    from dppca_dask.methods import get_mechanism

    planned = get_mechanism(release, "window").plan(
        {"epsilon": epsilon, "delta": delta, "row_norm_bound": c, "rows_window": selection.kind == "rows",
         "tau_rule": tau_rule, "sketch_rows": sketch_rows, "rank_bound": rank_bound, "labels": bool(labels)},
        n_rows=None, n_cols=store.n_cols,
    )
    neighbouring, calibration, events = planned.neighbouring, dict(planned.calibration), planned.planned_events
    return WindowPlan(store, selection, release, dim, bool(labels), c, epsilon, delta, neighbouring,
                      calibration, events)


def _window_run(plan: WindowPlan, noise: NoiseSource, budget: Mapping[str, Any] | None = None,
                cached: Mapping[int, str] | None = None) -> Any:
    """The release as an algorithm generator: one :class:`WindowGram` request, then one mechanism call.

    The coordinator checks every partition of the window before the generator starts; the partition-scoped
    reservation (``budget``, on the partitions :func:`plan_charges` chose, ``budget["partitions"]``) is made here,
    before the first aggregate is read, returned if the release fails before its noise is drawn, and charged once
    it is drawn.
    """
    selection = plan.selection
    labels = check_labels(plan.store, selection) if plan.labels else None
    reservation = None
    if budget is not None:
        from dppca_dask.methods.window.budget import reserve_partitions

        reservation = reserve_partitions(budget["ledger"], budget["dataset"], budget["job_id"], store=plan.store,
                                         partitions=budget["partitions"], epsilon=plan.epsilon, delta=plan.delta,
                                         events=plan.planned_events)
    try:
        if cached is None:
            gram = yield WindowGram(row_norm_bound=plan.row_norm_bound,
                                    row_ranges=dict(zip(selection.partitions, selection.row_ranges)),
                                    labels=labels, dim=plan.dim)
        else:
            gram = yield from _cached_gram(plan, labels, cached)
    except BaseException:
        if reservation is not None:
            reservation.give_back()  # no noise drawn: nothing was released
        raise
    key = f"window/{plan.release}"
    try:
        noisy, shift, event = _mechanism(plan, gram, noise, key)
    except BaseException:
        if reservation is not None:
            reservation.close_failed(drawn=key in noise.released_keys)
        raise
    del gram
    if reservation is not None:
        reservation.charge()
    return noisy, shift, (event,)


def _cached_gram(plan: WindowPlan, labels: Any, cached: Mapping[int, str]) -> Any:
    """The window Gram from the cache: whole partitions already cached are loaded, the others read (and whole
    ones cached, owner-only). Time windows only (:func:`check_structure`)."""
    from dppca_dask.methods.window.gram import (
        PartitionGrams,
        cache_directory,
        cache_file,
        check_private_directory,
        load_cached_gram,
        write_private_file,
    )

    ranges = dict(zip(plan.selection.partitions, plan.selection.row_ranges))
    missing = tuple(i for i in plan.selection.partitions if i not in cached)
    grams = (yield PartitionGrams(row_norm_bound=plan.row_norm_bound, partitions=missing, labels=labels,
                                  row_ranges={i: ranges[i] for i in missing})) if missing else {}
    check_private_directory(cache_directory(plan.store), create=True)
    options = plan.store.storage_options
    total = np.zeros((plan.dim, plan.dim))
    for index in plan.selection.partitions:
        if index in cached:
            total += load_cached_gram(cached[index], plan.dim, options)
            continue
        total += grams[index]
        if ranges[index] is None:
            gram = grams[index]
            write_private_file(cache_file(plan.store, index, plan.row_norm_bound, plan.labels),
                               lambda fh, gram=gram: np.save(fh, gram), options)
    return total


@dataclass(frozen=True)
class HistogramSetup:
    """A spectral-histogram release's plan, fixed before any partition is read: the saved structure and what the
    release reads and charges."""

    directory: str
    """Where the structure is kept (beside the store, owner-only)."""
    expect: Mapping[str, Any]
    """The parameters the saved structure must have been built with."""
    histogram: Any
    """The saved :class:`~dppca_dask.methods.window.histogram.SpectralHistogram` (a new, empty one when none is)."""
    new: tuple[int, ...]
    """The partitions added since the structure was last saved (the release reads these only); a new structure
    starts at the window's first partition."""
    charged: tuple[int, ...]
    """The partitions the release covers (``pruning="partitions"``: known from the partition table before any
    read), or every one its released checkpoint may cover (``"spectral"``: from the saved structure's first
    checkpoint — a new structure's: the window's first partition; the window's first partition, when earlier — to
    the newest)."""
    conditional: bool = False
    """Whether the release's guarantee holds only conditional on its checkpoint (the paper's spectral pruning)."""


def _window_starts(store: MatrixStore, seconds: float) -> Any:
    """``start_of(i)``: the first partition of the window of length ``seconds`` ending at partition i (public:
    timestamps only)."""
    parts = store.partitions

    def start_of(index: int) -> int:
        ts = cast(float, parts[index].timestamp)
        return min(p.index for p in parts if ts - seconds < cast(float, p.timestamp) <= ts)

    return start_of


def plan_histogram(plan: WindowPlan, *, last: Any, end: Any, eta: float,
                   regularizer: float | None, pruning: str = "partitions") -> HistogramSetup:
    """Validate a spectral-histogram release's parameters and the saved structure, and decide the partitions it
    reads and charges (from the partition table and the structure's checkpoints); reads no partition."""
    from dppca_dask.methods.window.histogram import PRUNINGS, SpectralHistogram, histogram_path, partition_checkpoints
    from dppca_dask.methods.window.selection import parse_duration

    store, selection = plan.store, plan.selection
    if selection.kind != "time":
        raise InvalidParameterError("structure='spectral-histogram' serves time windows (last='30D'); "
                                    "use structure='exact' for a row window")
    from dppca_dask.methods.window.selection import require_time_order

    require_time_order(store, "the spectral histogram")
    if end is not None and selection.partitions[-1] != len(store.partitions) - 1:
        raise InvalidParameterError("structure='spectral-histogram' releases the current window only (ending at "
                                    "the newest partition); drop end, or use structure='exact'")
    if not (isinstance(eta, (int, float)) and 0 < eta < 1):
        raise InvalidParameterError(f"eta must be in (0, 1); got {eta!r}")
    if pruning not in PRUNINGS:
        raise InvalidParameterError(f"pruning must be one of {', '.join(PRUNINGS)}; got {pruning!r}")
    cal, c = plan.calibration, plan.row_norm_bound
    if regularizer is None:
        if plan.release == "wishart":
            regularizer = c * c * cal["tau"]
        elif plan.release == "jl":
            regularizer = c * c * cal["sigma"] ** 2
        else:
            regularizer = 2.0 * cal["noise_multiplier"] * cal["l2_sensitivity"] * math.sqrt(plan.dim)
    seconds = parse_duration(last)
    # the paper's pruning keeps its own structure: the two rules never share checkpoints
    name = f"{seconds:g}s-{'labels' if plan.labels else 'features'}" + ("-spectral" if pruning == "spectral" else "")
    directory = histogram_path(store.path, name)
    expect: dict[str, Any] = {"store_id": store.store_id, "eta": float(eta), "pruning": pruning,
                              "row_norm_bound": c, "dim": plan.dim, "window_seconds": seconds}
    if pruning == "spectral":  # λ shapes the paper's Loewner tests only
        expect["regularizer"] = float(regularizer)
    hist = SpectralHistogram.load(directory, expect=expect, options=store.storage_options)
    if hist is None:
        hist = SpectralHistogram(plan.dim, float(eta), float(regularizer), pruning=pruning)
    parts = store.partitions
    if hist.starts:
        new = tuple(p.index for p in parts if p.index > hist.last)
    else:  # a new structure starts at the window: no later window of this length reaches back before it
        new = tuple(p.index for p in parts if p.index >= selection.partitions[0])
    if pruning == "partitions":
        # the checkpoints follow the partition table only: the release's coverage is known now, and charged exactly
        start_of = _window_starts(store, seconds)
        kept = partition_checkpoints(hist.starts, [(i, start_of(i)) for i in new], float(eta))
        return HistogramSetup(directory, expect, hist, new, tuple(range(kept[0], len(parts))), False)
    # the released checkpoint t_1 is chosen by the pruning from the data: it is at or after the saved structure's
    # first checkpoint, or, for a new structure, at or after the first partition added now (the window's first)
    first_possible = min([selection.partitions[0]] + hist.starts[:1] + list(new[:1]))
    return HistogramSetup(directory, expect, hist, new, tuple(range(first_possible, len(parts))), True)


@dataclass(frozen=True)
class ReleaseCharges:
    """The partitions a window release is charged to (its events reserved on each one's ledger key)."""

    partitions: tuple[int, ...]
    histogram: HistogramSetup | None = None
    """A spectral-histogram release's plan (``None``: ``structure="exact"``, charged to the window's partitions)."""


def check_structure(structure: Any, *, row_window: bool, cache: Any = False) -> None:
    """The checks of ``structure`` and ``cache`` that need no plan (a job's dry run makes them when the window
    itself is left to the run)."""
    if structure not in STRUCTURES:
        raise InvalidParameterError(f"structure must be one of {', '.join(STRUCTURES)}; got {structure!r}")
    if not isinstance(cache, (bool, np.bool_)):
        raise InvalidParameterError(f"cache must be True or False; got {cache!r}")
    if structure == "spectral-histogram" and row_window:
        raise InvalidParameterError("structure='spectral-histogram' serves time windows (last='30D'); "
                                    "use structure='exact' for a row window")
    if structure == "spectral-histogram" and cache:
        raise InvalidParameterError("cache=True serves structure='exact' (each partition's Gram kept beside the "
                                    "store); the spectral histogram keeps its own structure: drop cache")
    if cache and row_window:
        # Only whole partitions are cached, and which partitions a row window holds whole (rather than cut or
        # before its first row) follows their private row counts: the partitions read would tell neighbours apart.
        raise InvalidParameterError("cache=True serves time windows (last='30D'): which partitions a row window "
                                    "holds whole follows their row counts, which are private; drop cache")


def plan_charges(plan: WindowPlan, *, structure: str = "exact", last: Any = None, end: Any = None,
                 eta: float = 0.2, regularizer: float | None = None, cache: Any = False,
                 pruning: str = "partitions") -> ReleaseCharges:
    """The partitions a release of ``plan`` with ``structure`` is charged to: the window's (``"exact"``), or the
    spectral histogram's (:func:`plan_histogram`); the one decision a release and a job's dry run both use (with
    :func:`check_structure`'s checks)."""
    check_structure(structure, row_window=plan.selection.kind != "time", cache=cache)
    if structure == "spectral-histogram":
        setup = plan_histogram(plan, last=last, end=end, eta=eta, regularizer=regularizer, pruning=pruning)
        return ReleaseCharges(setup.charged, setup)
    return ReleaseCharges(tuple(plan.selection.partitions))


def _histogram_release(plan: WindowPlan, setup: HistogramSetup, noise: NoiseSource,
                       budget: Mapping[str, Any] | None) -> tuple[Any, Any, Any, tuple[str, ...]]:
    """A release from the spectral histogram planned by :func:`plan_histogram`: the generator that reads the new
    partitions, updates the structure, releases its first checkpoint and then saves the structure (never one whose
    first checkpoint was not released: the next release is charged from it)."""
    from dppca_dask.methods.window.gram import PartitionGrams, partitions_source

    store, selection = plan.store, plan.selection
    hist, new, charged, directory, expect = setup.histogram, setup.new, setup.charged, setup.directory, setup.expect
    c = plan.row_norm_bound
    seconds = float(expect["window_seconds"])
    parts = store.partitions

    start_of = _window_starts(store, seconds)
    s = selection.partitions[0]
    first_possible = charged[0]
    labels = check_labels(store, selection) if plan.labels else None
    if labels is not None and first_possible < s:
        labels = (labels[0], {i: parts[i].row_start for i in range(first_possible, len(parts))})

    def run() -> Any:
        reservation = None
        if budget is not None:
            from dppca_dask.methods.window.budget import reserve_partitions

            reservation = reserve_partitions(budget["ledger"], budget["dataset"], budget["job_id"], store=store,
                                             partitions=charged, epsilon=plan.epsilon, delta=plan.delta,
                                             events=plan.planned_events)
        try:
            grams = (yield PartitionGrams(row_norm_bound=c, partitions=new, labels=labels)) if new else {}
            for index in new:
                hist.add(index, grams[index], window_start=start_of(index))
            t1, gram = hist.covering(s)
            if not setup.conditional and t1 != first_possible:  # the planned coverage is the public one
                raise InvalidParameterError(f"the spectral histogram in '{directory}' released from partition {t1}, "
                                            f"not the planned {first_possible}; delete the directory to rebuild it")
        except BaseException:
            if reservation is not None:
                reservation.give_back()
            raise
        key = f"window/{plan.release}"
        try:
            noisy, shift, event = _mechanism(plan, gram, noise, key)
        except BaseException:
            if reservation is not None:
                reservation.close_failed(drawn=key in noise.released_keys)
            raise
        if reservation is not None:
            reservation.charge()
        # Saved only once its first checkpoint is released: the next release starts from the saved checkpoints.
        # A release that fails before its noise leaves the structure as it was (the next one reads these
        # partitions again); a structure that cannot be saved after the release leaves the release standing.
        try:
            hist.save(directory, meta={k: v for k, v in expect.items() if k not in ("eta", "regularizer", "dim",
                                                                                     "pruning")},
                      options=store.storage_options)
        except (OSError, InvalidParameterError) as exc:  # a directory made unsafe since the plan checked it
            import warnings

            warnings.warn(f"the spectral histogram could not be saved in '{directory}' ({type(exc).__name__}: "
                          f"{getattr(exc, 'strerror', None) or exc}); the release stands, and the next one reads "
                          "again the partitions added since the last saved state", RuntimeWarning, stacklevel=2)
        covered[:] = [t1]
        return noisy, shift, (event,)

    covered: list[int] = []
    source = partitions_source(store, new, {"kind": "store", "fingerprint": store.fingerprint,
                                            "schema": store.schema})
    generator = run()
    # The reported window is the partitions the release covers: known from the plan (``pruning="partitions"``) or
    # once the paper's pruning has chosen it from the data (public once released; the guarantee is conditional on
    # it), so the plan is rebuilt by the caller from `covered`.
    plan_box = _HistogramPlan(plan, covered, hist)
    return plan_box, source, generator, ((HISTOGRAM_CAVEAT,) if setup.conditional else ())


def covered_selection(store: MatrixStore, selection: WindowSelection, first: int) -> WindowSelection:
    """The time window ``selection`` as a release that covers partitions ``first..`` its end reports it: its start
    the latest time that excludes the partitions before ``first`` and keeps ``first`` (the requested start when
    ``first`` is the window's first partition, the requested start kept in ``requested_start`` otherwise)."""
    if first == selection.partitions[0]:
        return selection.public()
    from dppca_dask.methods.window.selection import _iso

    parts = store.partitions
    stamp = cast(float, parts[first].timestamp)
    before = None if first == 0 else cast(float, parts[first - 1].timestamp)
    if before is not None and before < stamp:
        start = _iso(before)
    else:  # the first partition, or one sharing its stamp with the partition before: no time bound separates them
        start = f"partition {first} (stamped {_iso(stamp)}) onwards"
    covered = tuple(range(first, selection.partitions[-1] + 1))
    return WindowSelection(selection.kind, start, selection.end, covered, (None,) * len(covered), None,
                           requested_start=selection.start)


@dataclass
class _HistogramPlan:
    """A window plan whose selection becomes the released checkpoint's once the run has chosen it."""

    base: WindowPlan
    covered: list[int]
    histogram: Any

    def __getattr__(self, name: str) -> Any:
        if name == "selection" and self.covered:
            return covered_selection(self.base.store, self.base.selection, self.covered[0])
        return getattr(self.base, name)


def _mechanism(plan: WindowPlan, gram: np.ndarray, noise: NoiseSource, key: str) -> tuple[np.ndarray, float, Any]:
    cal = plan.calibration
    c = plan.row_norm_bound
    if plan.release == "gaussian":
        sensitivity = cal["l2_sensitivity"]
        noisy, event = symmetric_gaussian_mechanism(gram, row_norm_bound=math.sqrt(sensitivity),
                                                    noise_multiplier=cal["noise_multiplier"], noise=noise,
                                                    release=key)
        shift = 0.0
    elif plan.release == "wishart":
        noisy, tau, _ = wishart_mechanism(gram, row_norm_bound=c, epsilon=cal["mechanism_epsilon"],
                                          delta=cal["mechanism_delta"], noise=noise, release=key,
                                          tau_rule=cal["tau_rule"])
        shift = c * c * tau
        event = plan.planned_events[0]
    else:
        noisy, sigma, _ = jl_gram_mechanism(gram, row_norm_bound=c, epsilon=cal["mechanism_epsilon"],
                                            delta=cal["mechanism_delta"], sketch_rows=cal["sketch_rows"],
                                            rank_bound=cal["rank_bound"], noise=noise, release=key)
        shift = c * c * sigma * sigma
        event = plan.planned_events[0]
    return noisy, shift, event


def _paper_tau_caveats(plan: WindowPlan) -> tuple[str, ...]:
    """What a Wishart release with the paper's degrees of freedom (``tau_rule="thm14"`` or ``"alg7"``) provably
    does not give: at large ε their τ nears d, and the release without a row then falls, with a probability above
    the δ it is given, where the one with the row cannot (so δ is at least that; the default rule raises τ)."""
    cal = plan.calibration
    if plan.release != "wishart" or cal.get("tau_rule", "thm11") == "thm11":
        return ()
    from dppca_dask.mechanisms.wishart import support_delta

    floor = support_delta(plan.dim, float(cal["tau"]))
    if floor <= float(cal["mechanism_delta"]):
        return ()
    return (f"tau_rule={cal['tau_rule']!r} (the paper's degrees of freedom, tau={cal['tau']:.0f}) is not "
            f"(epsilon, delta)-DP as stated: its Wishart step's delta is at least {floor:.3g}, above the "
            f"{float(cal['mechanism_delta']):.3g} it is given; the default tau_rule='thm11' is",)


def check_seed(seed: Any, noise: NoiseSource | None) -> None:
    """A release's ``seed`` (an integer or ``None``), refused together with a ``noise`` source."""
    if noise is not None and seed is not None:
        raise InvalidParameterError("give either seed or noise, not both; a seeded NoiseSource is NoiseSource.from_seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer))):
        raise InvalidParameterError(f"seed must be an integer or None; got {seed!r}")


def partition_budget(ledger: Any, dataset: str | None, job_id: str | None) -> dict[str, Any] | None:
    """The partition-scoped budget of a release (``None`` without one): ``ledger`` (a path or
    :class:`~dppca_dask.ledger.Ledger`), ``dataset`` and ``job_id``, given together; a ``dataset`` key without a
    budget fails here, before anything is read."""
    if (ledger is None) != (dataset is None) or (ledger is None) != (job_id is None):
        raise InvalidParameterError(
            "a partition-scoped budget needs ledger, dataset and job_id together; got "
            f"ledger={ledger!r}, dataset={dataset!r}, job_id={job_id!r}"
        )
    if ledger is None:
        return None
    from dppca_dask.ledger import Ledger

    book = Ledger(ledger) if isinstance(ledger, (str, os.PathLike)) else ledger  # a ledger, or a job's view of one
    book.budget(cast(str, dataset))  # a missing key fails before anything is read
    return {"ledger": book, "dataset": dataset, "job_id": job_id}


def _choose(plan: WindowPlan, client: Any, executor: str) -> Any:
    """Where the release runs: :func:`dppca_dask.pca`'s choice (public values only), from the window's declared
    width and its partition count (partitions are chosen from the public partition table)."""
    from dppca_dask._execution import executor_choice
    from dppca_dask.methods.window.gram import window_source

    return executor_choice(window_source(plan.store, plan.selection), client, executor)


def _execute(source: Any, client: Any, persist: bool | None, run: Any, choice: Any = None) -> Any:
    """Drive the release generator on ``choice``'s executor (in this process or on Dask), as :func:`dppca_dask.pca`
    does; ``client="local"`` calls the kernels directly."""
    from dppca_dask._execution import execute

    return execute(source, client, persist, run, choice)


@dataclass(frozen=True)
class WindowRelease:
    """One private release of a window's Gram matrix; every method is post-processing of :attr:`released`.

    The covariance is the window's second-moment matrix ``Σ a'aᵀ'`` of clipped rows, not divided by a row
    count (a time window's row count is private).
    """

    released: np.ndarray
    """The matrix as released by the mechanism (Wishart and JL releases carry their mean shift)."""
    shift: float
    """The public mean of the noise along the identity: ``c²τ`` (Wishart), ``c²σ²`` (JL), 0 (Gaussian)."""
    release: str
    """``"gaussian"``, ``"wishart"`` or ``"jl"``."""
    window: WindowSelection
    """The window: start, end, partitions (public)."""
    privacy: Any
    """The privacy report (:class:`~dppca_dask.accounting.PrivacyReport`)."""
    labels: bool = False
    """Whether the last row and column are the label's (a regression release)."""
    calibration: Mapping[str, Any] = field(default_factory=dict)
    provenance: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        matrix = np.array(self.released, dtype=np.float64, copy=True)
        matrix.setflags(write=False)
        object.__setattr__(self, "released", matrix)

    @property
    def private(self) -> bool:
        return bool(getattr(self.privacy, "private", False))

    @property
    def mechanism(self) -> str:
        """``"sliding-window"`` (the job mechanism's name; :attr:`release` names the noise)."""
        return "sliding-window"

    @property
    def guarantee(self) -> str:
        """``"conditional"`` for a spectral histogram with the paper's pruning (its (ε, δ) holds given the
        partitions it covers, which the data chose), ``"unconditional"`` otherwise."""
        return "conditional" if HISTOGRAM_CAVEAT in tuple(self.privacy.caveats) else "unconditional"

    @property
    def debiased(self) -> np.ndarray:
        """The released matrix minus its public noise mean (Thm 4 debias; may be indefinite)."""
        return self.released - self.shift * np.eye(self.released.shape[0])

    @property
    def covariance(self) -> np.ndarray:
        """The debiased feature covariance (label column dropped), projected onto the PSD cone."""
        matrix = self.debiased
        if self.labels:
            matrix = matrix[:-1, :-1]
        return tasks.psd_projection(matrix)

    def pca(self, k: int = 1) -> np.ndarray:
        """Top-k principal directions (k×d unit rows) of the released covariance."""
        return tasks.top_components(self.covariance, k)[1]

    @property
    def diagnostics(self) -> Any:
        """How far to trust the release's leading direction: :meth:`diagnostics_for` one component."""
        return self.diagnostics_for(1)

    def diagnostics_for(self, n_components: int) -> Any:
        """The :class:`~dppca_dask.diagnostics.Diagnostics` of the top ``n_components`` directions of the released
        covariance: each released eigenvalue against the public scale of the release's noise (symmetric Gaussian
        of std ``m·Δ``, ``m·c²·√nodes`` for the tree; a Wishart's spread about its mean, ``c²√τ``, its spectrum
        centred ``c²d`` above the mean as Marchenko–Pastur's is; the JL release's sample-covariance law).
        Post-processing of the released matrix and public calibration."""
        from dppca_dask import diagnostics as D

        k = int(n_components)
        cal = self.calibration
        matrix = self.debiased[:-1, :-1] if self.labels else self.debiased
        dim = int(matrix.shape[0])
        if not 1 <= k <= dim:
            raise InvalidParameterError(f"n_components must be in [1, {dim}]; got {n_components!r}")
        if not self.calibration:  # a release without public calibration (not expected): nothing to compare with
            return None
        c2 = float(cal.get("row_norm_bound", 1.0)) ** 2
        if self.release == "jl":
            values = np.linalg.eigvalsh(self.released[:-1, :-1] if self.labels else self.released)[::-1][:k]
            return D.diagnostics(D.sample_covariance_noise_to_signal(
                values, noise_level=c2 * float(cal["sigma"]) ** 2, dim=dim, n_samples=int(cal["sketch_rows"])))
        shift = 0.0
        if self.release == "wishart":  # R − τI: entries of std √τ, its spectrum [d − 2√(τd), d + 2√(τd)] about d
            sigma, shift = c2 * math.sqrt(float(cal["tau"])), c2 * dim
        elif cal.get("structure") == "binary-tree":
            sigma = float(cal["noise_multiplier"]) * c2 * math.sqrt(float(cal.get("nodes", 1)))
        else:
            sigma = float(cal["noise_multiplier"]) * float(cal.get("l2_sensitivity", c2))
        values = np.linalg.eigvalsh(matrix)[::-1][:k] - shift
        return D.diagnostics(D.symmetric_noise_to_signal(values, sigma=sigma, dim=dim))

    def _repr_facts(self) -> dict[str, Any]:
        d = self.released.shape[0] - (1 if self.labels else 0)
        w = self.window
        return {"shape": f"{d}x{d} {self.release} release{' with a label column' if self.labels else ''}",
                "extra": (f"window: ({w.start}, {w.end}], {len(w.partitions)} partitions",)}

    def __repr__(self) -> str:
        from dppca_dask._repr import short_repr

        return short_repr(self, **self._repr_facts())

    def _repr_html_(self) -> str:
        from dppca_dask._repr import short_repr_html

        return short_repr_html(self, **self._repr_facts())

    def directional_variance(self, x: Any) -> Any:
        """``xᵀCx`` of the released covariance for a vector or the rows of an array (Thm 15)."""
        return tasks.directional_variance(self.covariance, x)

    @property
    def noise_scale(self) -> float:
        """The public spectral scale of the release's noise on the feature block (label column dropped).

        Gaussian: ``2·s·√d`` for entries of standard deviation ``s`` (``noise_multiplier`` times the sensitivity,
        times ``√nodes`` for a tree's sum), the edge of the noise's semicircle. Wishart: ``c²(2√(τd) + d)``, the
        spread of ``c²·Wis_d(τ, I)`` about its mean. JL: its noise multiplies the window's Gram (plus ``c²σ²I``)
        by a ``Wis_d(m, I/m)`` factor, whose spread about the identity is ``2√r + r`` (``r = d/m``) of its mean;
        taken as ``(2√r + r)·λ_max`` of the release itself (post-processing; the released top eigenvalue is the
        mean's, inflated by the noise up to ``(1 + √r)²``).
        """
        cal = self.calibration
        dim = self.released.shape[0] - (1 if self.labels else 0)
        c = float(cal.get("row_norm_bound", 1.0))
        if self.release == "wishart":
            tau = float(cal["tau"])
            return c * c * (2.0 * math.sqrt(tau * dim) + dim)
        if self.release == "jl":
            ratio = dim / float(cal["sketch_rows"])
            top = float(np.linalg.eigvalsh(self.released[:dim, :dim])[-1])
            return max(top, 0.0) * (2.0 * math.sqrt(ratio) + ratio)
        if "l2_sensitivity" in cal:
            std = float(cal["noise_multiplier"]) * float(cal["l2_sensitivity"])
        else:  # the binary tree: a sum of `nodes` nodes, each with entries of standard deviation m·c²
            std = float(cal["noise_multiplier"]) * c * c * math.sqrt(float(cal.get("nodes", 1)))
        return 2.0 * std * math.sqrt(dim)

    def regression_ridge(self, ridge: float | str = "auto") -> float:
        """The ridge :meth:`regression` adds: a given value ≥ 0, or for ``"auto"`` the release's noise scale:
        :attr:`noise_scale` (Gaussian, JL) or the noise mean :attr:`shift` that the un-debiased Wishart release
        carries (:meth:`regression` then solves on the released matrix as it is: Thm 8's estimator)."""
        if isinstance(ridge, str):
            if ridge != "auto":
                raise InvalidParameterError(f"ridge must be 'auto' or a number >= 0; got {ridge!r}")
            return float(self.shift) if self.release == "wishart" else self.noise_scale
        return tasks._check_ridge(ridge)

    def _check_labels(self) -> None:
        if not self.labels:
            raise InvalidParameterError(
                "this release has no label column; release the window with labels=True (--task regression)"
            )

    def regression(self, *, ridge: float | str = "auto") -> np.ndarray:
        """Least-squares coefficients of the label on the features (Thm 8); needs a release with labels.

        ``ridge="auto"`` (default) adds :meth:`regression_ridge`'s public ridge to the debiased, PSD-projected
        feature block: where the noise exceeds a direction's variance, the direction's coefficient is shrunk
        towards zero instead of being blown up by the noise (measured in ``benchmarks/bench_window.py``: about as
        good as predicting zero at worst, slightly worse only where the noise is about twice every direction's
        variance, which :meth:`regression_diagnostics` reports as unreliable). ``ridge=0`` solves without one
        (exact when the noise is small against every direction).
        """
        self._check_labels()
        value = self.regression_ridge(ridge)
        if isinstance(ridge, str) and self.release == "wishart":
            return tasks.regression(self.released, ridge=0.0)  # Thm 8: the release as it is, its mean the ridge
        return tasks.regression(self.debiased, ridge=value)

    def regression_diagnostics(self, *, ridge: float | str = "auto") -> dict[str, Any]:
        """How far to trust :meth:`regression`'s fit with this ridge (released values only; see
        :func:`~dppca_dask.methods.window.tasks.regression_diagnostics`)."""
        self._check_labels()
        return tasks.regression_diagnostics(self.debiased, ridge=self.regression_ridge(ridge),
                                            noise_scale=self.noise_scale)

    def sparse_pca(self, k: int, nonzeros: int) -> np.ndarray:
        """k components with at most ``nonzeros`` non-zero entries each (Alg. 5, truncated power method)."""
        return tasks.sparse_pca(self.covariance, k, nonzeros)

    def nonnegative_pca(self, k: int) -> np.ndarray:
        """k non-negative components with disjoint supports (Alg. 5)."""
        return tasks.nonnegative_pca(self.covariance, k)

    def to_dict(self, *, include_matrix: bool = False) -> dict[str, Any]:
        """A JSON-safe summary: window, privacy, calibration, provenance (and the released matrix if asked)."""
        report = self.privacy.to_dict()
        out: dict[str, Any] = {
            "release": self.release,
            "private": self.private,
            "guarantee": self.guarantee,
            "window": self.window.to_dict(),
            "privacy": report,
            "labels": self.labels,
            "calibration": dict(self.calibration),
            "provenance": dict(self.provenance),
        }
        diagnostics = self.diagnostics
        if diagnostics is not None:
            out["diagnostics"] = diagnostics.to_dict()
        if include_matrix:
            out["released"] = self.released.tolist()
            out["shift"] = self.shift
        return out

    def save(self, directory: str | os.PathLike[str]) -> str:
        """Write ``release.json`` (summary and the released matrix) into ``directory``; returns its path."""
        from dppca_dask.results import write_result_json

        # owner-only, like every output of a job; complete or absent
        return write_result_json(directory, self.to_dict(include_matrix=True), name="release.json", indent=1)


def load_release(directory: str | os.PathLike[str]) -> WindowRelease:
    """Read a release written by :meth:`WindowRelease.save`."""
    from dppca_dask.accounting.report import PrivacyReport

    with open(os.path.join(os.fspath(directory), "release.json"), encoding="utf-8") as fh:
        obj = json.load(fh)
    report = dict(obj["privacy"])
    report.pop("meets_target", None)
    report["epsilon"] = float(report["epsilon"])
    report["caveats"] = tuple(report.get("caveats") or ())
    w = obj["window"]
    selection = WindowSelection(w["kind"], w["start"], w["end"], tuple(w["partitions"]),
                                (None,) * len(w["partitions"]), w.get("last_rows"), w.get("requested_start"))
    return WindowRelease(np.asarray(obj["released"]), float(obj["shift"]), obj["release"], selection,
                         PrivacyReport(**report), bool(obj["labels"]), obj["calibration"], obj["provenance"])


def cached_release(plan: WindowPlan, noise: NoiseSource, budget: Mapping[str, Any] | None) -> tuple[Any, Any]:
    """The source and release generator of a window whose whole partitions' exact Grams are kept beside the store
    (``cache=True``): the cached partitions are loaded, only the others read. The cache directory is checked
    first, before anything is read or reserved."""
    from dppca_dask.methods.window.gram import (
        cache_directory,
        cache_file,
        check_private_directory,
        partitions_source,
        state_exists,
    )

    check_private_directory(cache_directory(plan.store))  # before anything is read or reserved

    present = {i: cache_file(plan.store, i, plan.row_norm_bound, plan.labels)
               for i, rows in zip(plan.selection.partitions, plan.selection.row_ranges) if rows is None}
    present = {i: path for i, path in present.items() if state_exists(path, plan.store.storage_options)}
    unread = tuple(i for i in plan.selection.partitions if i not in present)
    source = partitions_source(plan.store, unread, {"kind": "store", "fingerprint": plan.store.fingerprint,
                                                    "schema": plan.store.schema})
    return source, _window_run(plan, noise, budget, cached=present)
