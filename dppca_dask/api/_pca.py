"""The entry point :func:`pca` and its planning from public values (:func:`plan_release`); the scikit-learn
estimator :class:`~dppca_dask.estimator.DPPCA` is in :mod:`dppca_dask.estimator`.

``pca`` validates every parameter and the input's metadata before anything else happens, calibrates the noise to
the requested total (ε, δ) from public parameters only, then runs the mechanism on a Dask cluster (an embedded
``LocalCluster`` unless a client or scheduler address is given) and returns a frozen :class:`PCAResult` with its
privacy report.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import inspect
import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from dppca_dask._execution import execute as _execute
from dppca_dask._execution import executor_choice as _executor_choice
from dppca_dask._execution import noise_source as _noise_source
from dppca_dask.methods._params import DEFAULT_MAX_DENSE_DIM
from dppca_dask.methods.adaptive_power.block_plan import BLOCK_POWER
from dppca_dask.methods.adaptive_power.centring import centring_options
from dppca_dask.methods.adaptive_power.explained_variance import result_fields
from dppca_dask.methods.adaptive_power.centring_plan import plan_with_centring
from dppca_dask.api._input import file_shape_caveat, open_input
from dppca_dask.api._pca_report import pca_diagnostics, pca_extras, pca_report
from dppca_dask.api._progress import on_release as _on_release
from dppca_dask.api._progress import progress_bar
from dppca_dask.api._provenance import run_provenance, run_timings
from dppca_dask.coordinator import as_source
from dppca_dask.coordinator.sources import schema_caveats
from dppca_dask.errors import InvalidParameterError, NotPrivateWarning
from dppca_dask.methods import MechanismPlan, get_mechanism, mechanism_names
from dppca_dask.methods._params import (
    DEFAULT_SVT_SHARE,
    PCA_DEFAULTS,
    PCAParameters,
    default_mechanism,
    validate_parameters,
)
from dppca_dask.results import PCAResult

__all__ = ["ReleasePlan", "mechanisms", "pca", "plan_release", "register_mechanism"]


def register_mechanism(name: str, planner: Callable[[PCAParameters, int], MechanismPlan], *,
                       summary: str = "", private: bool = True, default_n_iter: int | None = None) -> None:
    """Make a mechanism available to :func:`pca` under ``name`` (a thin wrapper of
    :func:`dppca_dask.methods.register`, which new mechanisms use directly)."""
    from dppca_dask.methods import Mechanism, register
    from dppca_dask.methods._params import ADD_REMOVE_ROW, pca_planner, pca_validator

    register(Mechanism(name=name, entry="pca", summary=summary or name, neighbouring=ADD_REMOVE_ROW,
                       private=private, validate=pca_validator(name), plan=pca_planner(planner),
                       default_n_iter=default_n_iter))


def mechanisms() -> tuple[str, ...]:
    """Names of the mechanisms :func:`pca` accepts."""
    return mechanism_names("pca")


def _plan(params: PCAParameters, n_cols: int, n_rows: int | None = None) -> MechanismPlan:
    """Calibrate the mechanism from public parameters only (no data has been read yet)."""
    return get_mechanism(params.mechanism, "pca").plan(params, n_rows=n_rows, n_cols=n_cols)


@dataclass(frozen=True)
class ReleasePlan:
    """What a run of :func:`pca` will cost, known from public parameters and the input's shape alone."""

    mechanism: str
    neighbouring: str
    events: tuple[Any, ...]
    """DpEvents to reserve: those the run emits when they are known in advance, else one
    ``EpsilonDeltaDpEvent(epsilon, delta)`` (the run's calibrated guarantee, which never overshoots)."""
    private: bool
    calibration: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    """Public calibrated constants (with centring: ``center``, the mean's and the variance's noise multipliers
    and budget shares)."""


def plan_release(n_cols: int, *, mechanism: str | None = None, epsilon: float, delta: float,
                 n_rows: int | None = None, **parameters: Any) -> ReleasePlan:
    """Validate ``pca``'s public parameters and say what the run will spend, without reading any data.

    ``parameters`` are the keyword arguments of :func:`pca` that shape the noise (``n_components``, ``n_iter``,
    ``row_norm_bound``, ``svt_share``, ``center``, ...); arguments about execution (``client``, ``persist``, ...)
    are ignored. ``center`` (default: :func:`pca`'s) and ``row_norm_bound="auto"`` are planned as :func:`pca`
    runs them, with the private mean, quantile and explained variance events.
    ``n_rows``, when known, lets planners whose events depend on it (private power's C-doubling on the embedding)
    state them exactly.
    """
    from dppca_dask.accounting import EpsilonDeltaDpEvent

    names = set(inspect.signature(validate_parameters).parameters) - {"mechanism", "epsilon", "delta"}
    given = {k: v for k, v in parameters.items() if k in names}
    if mechanism is None:
        mechanism = default_mechanism(given.get("n_components", PCA_DEFAULTS["n_components"]))
    # centring and row_norm_bound="auto" as pca() takes them (same default), planned as pca() plans them
    center = parameters.get("center", inspect.signature(pca).parameters["center"].default)
    centring, bound = centring_options(mechanism, center, given.get("row_norm_bound", PCA_DEFAULTS["row_norm_bound"]))
    given["row_norm_bound"] = bound
    params = validate_parameters(mechanism=mechanism, epsilon=epsilon, delta=delta, **{**PCA_DEFAULTS, **given})
    plan = _plan(params, int(n_cols), None if n_rows is None else int(n_rows))
    if centring.active:
        plan = plan_with_centring(params, int(n_cols), centring)
    if plan.planned_events is not None:  # under either calibration: what the noise actually gives
        events = tuple(plan.planned_events)
    else:
        events = (EpsilonDeltaDpEvent(params.epsilon, params.delta),)
    return ReleasePlan(mechanism=params.mechanism, neighbouring=plan.neighbouring, events=events,
                       private=plan.private, calibration=dict(plan.calibration))


def pca(
    data: Any,
    *,
    epsilon: float,
    delta: float,
    n_components: int = 1,
    n_iter: int | None = None,
    row_norm_bound: float | str = 1.0,
    mechanism: str | None = None,
    client: Any = None,
    seed: int | None = None,
    persist: bool | None = None,
    svt_share: float = DEFAULT_SVT_SHARE,
    beta: float = 0.05,
    grid_per_octave: int = 4,
    grid_octaves: int = 24,
    calibration: str = "standard",
    max_dense_dim: int = DEFAULT_MAX_DENSE_DIM,
    progress: bool | None = None,
    on_release: Callable[[Any, tuple[Any, ...]], None] | None = None,
    resume: Any = None,
    noise: Any = None,
    coherence: float | None = None,
    entry_bound: float = 1.0,
    c_doubling: bool = False,
    symmetric: bool = False,
    timings: bool = False,
    center: Any = False,
    executor: str = "auto",
    layer: str | None = None,
    storage_options: Any = None,
    ledger: Any = None,
    dataset: str | None = None,
    job_id: str | None = None,
) -> PCAResult:
    """Differentially private top principal directions (right singular vectors) of a row-partitioned matrix.

    Parameters
    ----------
    data
        A store path or URL (``file://``; ``memory://``, ``s3://``, ... through fsspec and zarr, with the scheme's
        package installed), an opened :class:`~dppca_dask.storage.MatrixStore`, the path of an AnnData ``.h5ad`` file
        (read in row blocks from the file, never whole), a ``dask.array.Array`` (rows chunked), a ``scipy.sparse``
        matrix or a 2-D ``numpy`` array. Each row is one individual. An ``.h5ad`` file's width is read from the
        file, not declared: the result carries the inferred-schema caveat (ingest it with ``--n-features`` to
        declare it).
    epsilon, delta
        Total privacy budget of the run (ignored by ``mechanism="exact"``).
    n_components
        Number of components k.
    n_iter
        Iterations T per component (adaptive power; default :data:`DEFAULT_N_ITER`). Public and fixed in advance. At
        most :data:`~dppca_dask.methods._params.MAX_N_ITER` (1,000; ``n_iter × n_components`` too for sequential
        adaptive power): each iteration is a pass over the data.
    row_norm_bound
        Public L2 bound c; rows are scaled down to it (never dropped). ``"auto"``: c is released first as the 90th
        percentile of the row norms on a public log grid (report noisy max, 5% of ε), so about 10% of the rows are
        clipped; no count of clipped rows is released. With a fixed c, runs with centring or block power release
        the fraction of rows c clips (2% of the budget; ``result.clipped_fraction``) and warn above one half
        (:class:`~dppca_dask.errors.ClippingWarning`; see the clipping guide).
    center
        ``False`` (default: components of the clipped, uncentred rows, as before), ``True`` or ``"private"`` (the
        mean of the clipped rows is released from 10% of the budget and the rows are centred at it inside the
        kernels: sparse partitions stay sparse), or a public mean vector used as is (finite, of norm at most
        1e100). With centring or ``row_norm_bound="auto"``, adaptive power runs as one block of k components (T
        releases) and Analyze Gauss on the centred Gram matrix; both release the explained variance from 5% of the
        budget (``result.explained_variance``, ``explained_variance_ratio``, ``singular_values``, ``mean``). The
        shares fix the releases' relative noise; one common factor on every noise scale, found by the PLD
        accountant, makes them spend the whole (ε, δ) (``provenance["calibration"]["noise_scale"]``).
    mechanism
        ``"auto"`` (the default, also for None): block adaptive power or Analyze Gauss, chosen from a private
        pilot run (10% of the budget; block adaptive power only above ``max_dense_dim``; ``result.mechanism``
        names the choice, ``result.extras["auto"]`` the pilot's released thresholds); ``"adaptive-power"`` (seed
        004; k components by k sequential runs), ``"adaptive-power-block"`` (k components in one block of T
        releases), ``"analyze-gauss"`` (baseline), ``"private-power"`` (seed 000: entry-level privacy, see
        below) or ``"exact"`` (not private).
    client
        ``None`` (an embedded ``LocalCluster``), a scheduler address, or a ``distributed.Client``; ``"local"``
        runs in this process, calling the kernels directly (the reference the Dask path is tested against).
    layer
        Analyse ``layers/<layer>`` of an AnnData ``.h5ad`` file or ``.zarr`` store instead of ``X`` (``data`` must
        then be such a path).
    storage_options
        For a store given by its URL (``s3://bucket/x.zarr``): fsspec options of its file system (``endpoint_url``,
        ``key``, ``secret``, ...); by default the environment and configuration files (``AWS_ENDPOINT_URL``,
        ``AWS_ACCESS_KEY_ID``, ...). A ``zarr.storage.FsspecStore`` is accepted as ``data`` too. Workers read the
        store themselves, with these options; they are never shown in results, logs or provenance.
    ledger, dataset, job_id
        Keep the release in a privacy-budget ledger (a SQLite path, a ``postgresql://`` URL or a
        :class:`~dppca_dask.ledger.Ledger`; given together): its events are reserved under ``job_id`` on every
        partition of the store it reads (for in-memory data, on every partition of ``dataset``) in the books of
        ``dataset`` before any value is read, the run is refused (:class:`~dppca_dask.errors.BudgetExceededError`)
        if a partition would exceed the key's total, and the reservation is charged once the release is made (see
        ``docs/guide/ledger.md``).
    executor
        Where the run executes when ``client`` is ``None``: ``"auto"`` (default) uses the active Dask client if
        there is one, else runs **in this process** (the same coordinator, tasks and passes on a pool of threads,
        without starting a cluster) when the input has at most ``dppca_dask.executor.in-process-max-partitions``
        partitions and ``in-process-max-columns`` declared columns, else starts an embedded ``LocalCluster``;
        ``"local"`` always runs in this process; ``"cluster"`` always on Dask. The choice reads public values only
        (the declared width, the partition count, the configuration), never the rows or values, and
        ``provenance["executor"]`` states it (``"in-process"`` or ``"cluster"``).
    seed
        Makes the run reproducible; the result is then **not private** (``privacy.private`` is false) and a
        :class:`~dppca_dask.errors.NotPrivateWarning` is issued.
    persist
        Keep partitions in worker memory between steps (``None``: the ``dppca_dask.persist`` setting, false by
        default: partitions are re-read every step). Never decided from the data's size, which is private.
    svt_share
        Share of the zCDP budget given to the sparse vector steps (adaptive power).
    beta
        Failure probability of the SVT cut-off ``6·ln(1/β)/ε_svt``.
    grid_per_octave, grid_octaves
        The public threshold grid ``c²·2^(-j/g)``.
    calibration
        ``"standard"`` (PLD-calibrated to the total budget) or ``"paper"`` (the paper's Lemma 3.1 constants).
    max_dense_dim
        Largest d for which dense d×d matrices are formed (Analyze Gauss; exact eigendecomposition).
    progress
        Show a progress bar (default: only on a terminal).
    on_release
        Called after each release with the released state and events (checkpointing). Adaptive power calls it
        twice per iteration: after the AboveThreshold step (``state.pending_index`` set) and after the Gaussian
        step, so a resume never draws a released step again.
    resume
        Released state of an interrupted run to continue from.
    noise
        The :class:`~dppca_dask.mechanisms.NoiseSource` to draw from (default: a new one from the operating
        system's entropy, or from ``seed``). A caller that must know whether any noise was drawn before a failure
        (the job runner's ledger) passes its own and inspects ``noise.released_keys``.
    coherence
        Private power only: the public coherence bound C (default: N, the worst case, where the check cannot
        fail; with ``c_doubling``, the first C tried). A run whose iterate is more coherent than C allows stops
        with :class:`~dppca_dask.errors.MechanismFailedError` (a public failure).
    entry_bound
        Private power only: neighbours differ in one entry by at most this (default 1); scales all noise.
    c_doubling
        Private power only: try ``C, 2C, 4C, …, N`` and keep the first run that passes (Remark 4.5 of Hardt &
        Roth 2013); the budget is split over all rungs.
    symmetric
        Private power only: the store is a square matrix A meant to be symmetric (squareness is checked before
        any release; symmetry never is: the run uses ``(A + Aᵀ)/2``, A itself when A is symmetric, so that an
        asymmetric neighbour takes the same path); required for ``n_components > 1``, which also assumes it is
        positive semidefinite. Otherwise the run uses the embedding ``[[0, A], [Aᵀ, 0]]`` and returns the top
        right singular vector (rank 1).
    timings
        Put wall-clock timings in ``result.timings`` (default: empty). They depend on the data and are **not**
        covered by the privacy guarantee; the result labels them so.

    Returns
    -------
    PCAResult
        ``components`` (k×d), ``thresholds``, ``privacy`` report, ``provenance``, ``timings`` (when asked), and
        ``diagnostics`` (:class:`~dppca_dask.diagnostics.Diagnostics`): ``reliable`` and a ``noise_to_signal``
        figure per component, computed from released values and public parameters only (no budget). With
        centring, the released variances are projected onto their feasible set (non-negative, non-increasing,
        ratios in [0, 1] summing to at most 1) and the components ordered by them.

    Notes
    -----
    Privacy contract: neighbouring datasets differ by adding or removing one row (replace-one follows by group
    privacy and is reported in ``privacy.group_privacy``). The report composes the DpEvents actually emitted with
    the PLD accountant. Components are the top right singular vectors of the clipped matrix, not of the centred
    data: centre the data first if that is what you need. ``mechanism="private-power"`` is private for one entry
    changing by at most ``entry_bound`` (its report says so), a weaker relation than a row; its default ``n_iter``
    is 20.

    Examples
    --------
    Rows are people; here 20,000 generated rows whose largest variance lies along the first column, scaled so
    that every row norm is at most the default ``row_norm_bound`` of 1:

    >>> import numpy as np
    >>> import dppca_dask
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(20_000, 8)) * [4, 2, 1, 1, 1, 1, 1, 1]
    >>> X /= np.linalg.norm(X, axis=1).max()
    >>> result = dppca_dask.pca(X, epsilon=1.0, delta=1e-6, n_components=2)
    >>> result.components.shape
    (2, 8)
    >>> bool(abs(result.components[0, 0]) > 0.9)  # the first column's direction, up to the noise
    True
    >>> result.privacy.private, result.privacy.neighbouring
    (True, 'add/remove one row')

    Centred, with the explained variance released too (the CLI's and the estimator's default):

    >>> centred = dppca_dask.pca(X, epsilon=1.0, delta=1e-6, n_components=2, center="private")
    >>> centred.explained_variance_ratio.shape, centred.mean.shape
    ((2,), (8,))
    """
    started_wall = _dt.datetime.now(_dt.timezone.utc)
    t0 = time.perf_counter()
    # -- public parameters, before the data is touched ------------------------------------------------------------
    if mechanism is None:
        mechanism = default_mechanism(n_components)
    centring, bound = centring_options(mechanism, center, row_norm_bound)
    params = validate_parameters(
        mechanism=mechanism,
        epsilon=epsilon,
        delta=delta,
        n_components=n_components,
        n_iter=n_iter,
        row_norm_bound=bound,
        svt_share=svt_share,
        beta=beta,
        grid_per_octave=grid_per_octave,
        grid_octaves=grid_octaves,
        calibration=calibration,
        max_dense_dim=max_dense_dim,
        coherence=coherence,
        entry_bound=entry_bound,
        c_doubling=c_doubling,
        symmetric=symmetric,
    )
    # -- open the input (its public shape only) ----------------------------------------------------------------------
    data, read_from_file = open_input(data, layer, storage_options)
    source = as_source(data, storage_options)
    choice = _executor_choice(source, client, executor)
    # -- plan from public values: one calibration, the centred run's own (not the plain plan's as well) -----------
    plan = plan_with_centring(params, source.n_cols, centring) if centring.active else _plan(params, source.n_cols)
    caveats = schema_caveats(source) if plan.private else ()
    if read_from_file and plan.private:
        caveats = (*caveats, *file_shape_caveat())
    t_calibrated = time.perf_counter()
    if not isinstance(timings, (bool, np.bool_)):
        raise InvalidParameterError(f"timings must be True or False; got {timings!r}")
    if seed is not None and (isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer))):
        raise InvalidParameterError(f"seed must be an integer or None; got {seed!r}")
    if not plan.private:
        warnings.warn(f"mechanism={params.mechanism!r} is not differentially private", NotPrivateWarning,
                      stacklevel=2)
    if noise is not None and seed is not None:
        raise InvalidParameterError("give either seed or noise, not both; a seeded NoiseSource is NoiseSource.from_seed")
    if noise is None and plan.private:
        noise = _noise_source(seed)
    if noise is not None and resume is not None:
        noise.mark_released(plan.resumed_keys(resume))
    # -- execute ---------------------------------------------------------------------------------------------------
    iteration_times: list[float] = []
    bar = progress_bar(plan.total_steps, params.mechanism, progress, source.n_partitions)
    released = _on_release(plan.total_steps, on_release, bar, iteration_times)
    from dppca_dask.ledger import budgeted_release

    with budgeted_release(ledger, dataset, job_id, store=source.store, epsilon=epsilon, delta=delta,
                          events=plan.planned_events if plan.private else None, mechanism=params.mechanism,
                          neighbouring=plan.neighbouring, noise=noise):  # reserved before the data is read
        try:
            output = _execute(source, client, persist, plan.make_run(noise, released, resume), choice, bar.passed)
        finally:
            bar.close()
    finished = time.perf_counter()
    # -- report (released values and public parameters only) ---------------------------------------------------
    report = pca_report(params, plan, tuple(getattr(output, "events", ())), noise)
    if caveats:
        report = dataclasses.replace(report, caveats=caveats)
    provenance = run_provenance(
        mechanism=params.mechanism, private=report.private,
        parameters={**params.to_json(), **centring.to_json()}, calibration=dict(plan.calibration),
        source=source, seeded=seed is not None or (noise is not None and not noise.private),
        executor=choice.executor, noise=noise, started=started_wall, timings=timings)
    return PCAResult(
        components=output.components,
        mechanism=getattr(output, "mechanism", None) or (
            BLOCK_POWER if centring.active and params.mechanism == "adaptive-power" else params.mechanism),
        privacy=report,
        thresholds=getattr(output, "thresholds", None),
        provenance=provenance,
        timings=run_timings(timings, total=finished - t0, calibration=t_calibrated - t0, iterations=iteration_times),
        extras=pca_extras(output, params, auto_bound=centring.auto_bound),
        diagnostics=pca_diagnostics(output, params.mechanism),
        **result_fields(output),
    )
