"""The entry point :func:`window`: one private release of a sliding window's covariance (seed 001).

Open the store, plan the release from public values (the window from the partition table, the mechanism's
calibration, the partitions to charge), execute it once (from the window's exact Gram, its cache or the spectral
histogram; :mod:`dppca_dask.methods.window.release`), and report. Every downstream task is post-processing of the
returned :class:`~dppca_dask.methods.window.release.WindowRelease`.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
from typing import Any

from dppca_dask._execution import execute as _execute
from dppca_dask.accounting import build_report
from dppca_dask.coordinator.sources import schema_caveats
from dppca_dask.errors import InvalidParameterError
from dppca_dask.mechanisms import NoiseSource
from dppca_dask.methods.window.gram import window_source
from dppca_dask.methods.window.release import (
    DEFAULT_MAX_DENSE_DIM,
    WindowRelease,
    _choose,
    _histogram_release,
    _paper_tau_caveats,
    _window_run,
    cached_release,
    check_seed,
    check_store_argument,
    partition_budget,
    plan_charges,
    plan_window,
)
from dppca_dask.storage import MatrixStore, open_matrix

__all__ = ["window"]


def window(
    store: Any,
    *,
    last: Any = None,
    last_rows: int | None = None,
    end: Any = None,
    epsilon: float,
    delta: float,
    release: str = "gaussian",
    structure: str = "exact",
    eta: float = 0.2,
    regularizer: float | None = None,
    pruning: str = "partitions",
    labels: bool = False,
    row_norm_bound: float = 1.0,
    tau_rule: str = "thm11",
    sketch_rows: int | None = None,
    rank_bound: int = 1,
    max_dense_dim: int = DEFAULT_MAX_DENSE_DIM,
    client: Any = None,
    executor: str = "auto",
    persist: bool | None = None,
    seed: int | None = None,
    noise: NoiseSource | None = None,
    cache: bool = False,
    ledger: Any = None,
    dataset: str | None = None,
    job_id: str | None = None,
    storage_options: Any = None,
) -> WindowRelease:
    """Release a sliding window's covariance once, with (ε, δ)-DP for adding or removing one row.

    Parameters
    ----------
    store
        A store path or :class:`~dppca_dask.storage.MatrixStore` with a partition table (timestamps for ``last``).
    last, last_rows, end
        The window: ``last="30D"`` (partitions stamped in ``(end − 30 days, end]``; ``end`` defaults to the newest
        partition's timestamp) or ``last_rows=W`` (the last W rows, or all of them when fewer are stored).
        Public parameters. Which partitions hold a row window's rows follows their row counts, which are private,
        so a row window reads, reports and is charged to every partition up to its end (and is placed from that
        number); only the rows kept inside the tasks follow the counts. Give both (``last_rows=W, last="7D"``) for
        the last W rows of the time window's partitions (all of theirs when they hold fewer): a horizon that keeps
        a nightly row window from reading and charging the whole store.
    epsilon, delta
        The release's budget (ε ≤ 100, as ``pca``).
    release
        ``"gaussian"`` (default; Analyze Gauss on the window Gram), ``"wishart"`` (F2), ``"jl"`` (F1 sampled
        from the Gram).
    structure
        ``"exact"`` (default): the exact Gram of the window, with the unconditional guarantee.
        ``"spectral-histogram"``: the paper's structure (:mod:`~dppca_dask.methods.window.histogram`), kept
        beside the store, started at the first release's window and updated with the partitions appended since its
        last use (a nightly release reads only the new partitions, and keeps ``O(log W/η)`` Grams instead of W);
        it releases its first checkpoint, which covers the window and possibly some partitions before it (at most
        ``W/(1−η)`` partitions for a window of W): the release reports the partitions it covers, its ``start``
        the one they start after (the asked one in ``window.requested_start``), and is charged to each of them.
        Time windows ending at the newest partition only.
    eta, regularizer, pruning
        Spectral histogram: pruning threshold η in (0, 1) and the rule: ``"partitions"`` (default) keeps
        checkpoints by their partition counts, from the partition table alone, so the covered partitions are public
        and the guarantee unconditional; ``"spectral"`` is the paper's Loewner test on the data (for reproducing
        the paper): its guarantee holds only conditional on the covered partitions (erratum E8), the release says
        so (a caveat, ``guarantee: "conditional"``) and is refused with a budget. ``regularizer`` is its public
        floor λ > 0 (default: the release's noise level along the identity: ``c²τ`` Wishart, ``c²σ²`` JL,
        ``2·σ·√d`` Gaussian); the ``"partitions"`` rule reads no λ.
    labels
        Append the stored ``labels`` array as a last column (regression); the bound ``row_norm_bound`` is then on
        ``‖(x, y)‖`` (E13).
    row_norm_bound
        Public L2 bound c in [1e-100, 1e100]; rows are scaled down to it.
    tau_rule
        Wishart degrees of freedom: ``"thm11"`` (default), ``"thm14"``, ``"alg7"`` (see
        :func:`~dppca_dask.mechanisms.wishart.wishart_tau`).
    sketch_rows, rank_bound
        JL release: rows m of the sketch (default d) and the rank bound r of Alg. 3's σ.
    max_dense_dim
        Refuse a dimension above this (the Gram is dense).
    client, persist
        As :func:`dppca_dask.pca` (``"local"`` runs in this process).
    executor
        As :func:`dppca_dask.pca`: ``"auto"`` (default) runs in this process when no client is given or active and
        the window has at most ``dppca_dask.executor.in-process-max-partitions`` partitions and the store at most
        ``in-process-max-columns`` declared columns (public values: the partition table and the schema), else on
        an embedded ``LocalCluster``; ``"local"`` or ``"cluster"`` force either. ``provenance["executor"]`` states
        where it ran.
    seed, noise
        A seed (or a test noise source) makes the release **not private**.
    cache
        Keep each whole partition's exact Gram beside the store (owner-only, keyed by the store's id, the bound
        and the label column) and reuse it: a nightly release of ``structure="exact"`` then reads only the
        partitions it has not seen. The cache is as sensitive as the data (an existing cache directory that is a
        link, another user's, or not owner-only is refused before anything is read). ``True`` or ``False`` only;
        refused with ``structure="spectral-histogram"``, which keeps a structure of its own, and with a row window
        (which partitions it holds whole follows their private row counts).
    ledger, dataset, job_id
        Partition-scoped budget (:mod:`~dppca_dask.methods.window.budget`): a ledger (path or
        :class:`~dppca_dask.ledger.Ledger`) whose key ``dataset`` has a budget; the release is charged to every
        partition it reads under ``job_id``, and refused if any of them would exceed the key's total, or if
        ``job_id`` is already charged on any of them (a job id stands for one release: its noise is fresh).
    storage_options
        For a store given by its URL (``s3://bucket/x.zarr``): fsspec options of its file system (see
        :func:`dppca_dask.pca`); workers read the store themselves with them. The Gram cache (``cache=True``) and
        the spectral histogram of such a store keep their exact Grams as objects beside it in its bucket
        (``s3://bucket/.x.zarr.window-grams/...``), read and written with the same options: whoever can read the
        store can read them, as with the rows themselves.

    Returns
    -------
    WindowRelease

    Notes
    -----
    Privacy contract: neighbouring datasets differ by adding or removing one row of L2 norm ≤ c (event-level: a
    person with rows in several partitions is covered only by group privacy over their rows). The exact window
    Gram moves by ``aaᵀ`` (``aaᵀ − bbᵀ`` for a row window). One release per call, noise drawn once at the
    coordinator; the report is built from the emitted event: ``GaussianDpEvent`` (gaussian) or the stated
    closed form ``EpsilonDeltaDpEvent(ε, δ)`` (wishart, jl).

    Examples
    --------
    A store of three days, one partition each, and a release of the last two days' covariance:

    >>> import datetime, os, tempfile
    >>> import numpy as np
    >>> import dppca_dask
    >>> rng = np.random.default_rng(0)
    >>> days = rng.normal(size=(3, 400, 6)) * [3, 1, 1, 1, 1, 1]
    >>> days /= np.linalg.norm(days, axis=2).max()
    >>> tmp = tempfile.TemporaryDirectory()
    >>> path = os.path.join(tmp.name, "days.zarr")
    >>> store = dppca_dask.ingest(days[0], path, n_features=6, timestamp="2026-11-01")
    >>> for day, rows in ((2, days[1]), (3, days[2])):
    ...     store = dppca_dask.append_partition(
    ...         path, rows, timestamp=datetime.datetime(2026, 11, day, tzinfo=datetime.timezone.utc))
    >>> release = dppca_dask.window(path, last="2D", epsilon=1.0, delta=1e-6)
    >>> release.window.partitions
    (1, 2)
    >>> release.covariance.shape, release.pca(2).shape  # post-processing of the one release
    ((6, 6), (2, 6))
    >>> tmp.cleanup()
    """
    # -- open the input and plan from public values (the partition table, the schema) ------------------------------
    check_store_argument(store)
    if not isinstance(store, MatrixStore):
        store = open_matrix(store, storage_options=storage_options)
    plan = plan_window(store, last=last, last_rows=last_rows, end=end, epsilon=epsilon, delta=delta,
                       release=release, labels=labels, row_norm_bound=row_norm_bound, tau_rule=tau_rule,
                       sketch_rows=sketch_rows, rank_bound=rank_bound, max_dense_dim=max_dense_dim)
    choice = _choose(plan, client, executor)
    check_seed(seed, noise)
    if noise is None:
        noise = NoiseSource.from_entropy() if seed is None else NoiseSource.from_seed(int(seed))
    if plan.release != "gaussian" and noise.sampler == "hardened":  # refused by the mechanism: before any read
        from dppca_dask.mechanisms.wishart import _float_sampler

        _float_sampler(noise, plan.release)
    budget = partition_budget(ledger, dataset, job_id)
    charges = plan_charges(plan, structure=structure, last=last, end=end, eta=eta, regularizer=regularizer,
                           cache=cache, pruning=pruning)
    if budget is not None and charges.histogram is not None and charges.histogram.conditional:
        raise InvalidParameterError(
            "pruning='spectral' (the paper's) chooses the partitions a release covers from the data, so its "
            "(epsilon, delta) holds only conditional on them and cannot be charged to a budget as such; use the "
            "default pruning='partitions' (unconditional), or release without ledger, dataset and job_id"
        )
    if budget is not None:
        budget["partitions"] = charges.partitions
    started = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    # -- execute: one release, from the exact Gram, its cache or the spectral histogram ----------------------------
    caveats: tuple[str, ...] = ()
    if charges.histogram is not None:
        plan, source, run, caveats = _histogram_release(plan, charges.histogram, noise, budget)
    elif cache:
        source, run = cached_release(plan, noise, budget)
    else:
        source = window_source(plan.store, plan.selection)
        run = _window_run(plan, noise, budget)
    try:
        noisy, shift, events = _execute(source, client, persist, run, choice)
    except BaseException:
        run.close()  # a failure before the noise (a lost cluster, a bad chunk) returns the reservation
        raise
    # -- report (the emitted event, public values) -----------------------------------------------------------------
    report = build_report(list(events), target_epsilon=plan.epsilon, target_delta=plan.delta,
                          neighbouring=plan.neighbouring, private=bool(noise.private))
    caveats += _paper_tau_caveats(plan)
    if plan.store.schema != "declared" or caveats:
        report = dataclasses.replace(report, caveats=schema_caveats(source) + caveats)
    provenance = {
        "mechanism": "sliding-window",
        "structure": structure,
        **({"pruning": pruning} if charges.histogram is not None else {}),
        "input": {"fingerprint": plan.store.fingerprint, "schema": plan.store.schema},
        "executor": choice.executor,
        "seeded": not noise.private,
        "noise_sampler": noise.sampler,
        "started": started,  # no finishing time: with the start it gives the duration, which depends on the data
    }
    return WindowRelease(noisy, shift, plan.release, plan.selection.public(), report, plan.labels,
                         dict(plan.calibration), provenance)
