"""Differentially private low-rank approximation of a row-partitioned matrix: :func:`lowrank`.

Three mechanisms, each returning the approximation **factored**, ``B = left @ right`` (left n_rows×r, right r×d),
with its privacy report:

- ``"private-low-rank"`` (default): private find-and-project of Hardt & Roth 2012 (Fig. 4; seed 003): a private
  range finder, optional pruning, a private projection, two passes over the data
  (:mod:`dppca_dask.methods.hardt_roth.find_and_project`). Private for one row changing by a vector of L2 norm ≤ s.
- ``"randomized-response"``: the paper's baseline, Gaussian noise on every entry then the exact truncated SVD;
  densifies the matrix at the coordinator, so it refuses matrices that do not fit
  (:mod:`dppca_dask.methods.hardt_roth.randomized_response`). Same relation.
- ``"private-power"``: ``B_k = Σ σ̂_i v_i v_iᵀ`` by private power iteration with deflation (Hardt & Roth 2013,
  Fig. 3; seed 000) for a symmetric positive semidefinite store, or ``σ̂·u vᵀ`` (rank 1) for an asymmetric one
  through its embedding. Private for one entry changing by at most ``entry_bound`` (a weaker relation).

The left factor has one row per row of the store (per individual). It is differentially private like the right
factor, but its size grows with the number of individuals; both are written by :meth:`LowRankResult.save`.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import time
from typing import Any

import numpy as np

from dppca_dask.errors import InvalidParameterError
from dppca_dask.methods.hardt_roth.lowrank_plan import _plan_shape, _validate
from dppca_dask.results import LowRankResult
from dppca_dask.signs import flip_factor_signs

__all__ = ["lowrank"]


def lowrank(
    data: Any,
    *,
    rank: int,
    epsilon: float,
    delta: float,
    mechanism: str = "private-low-rank",
    oversampling: int = 2,
    calibration: str = "standard",
    projection: str = "paper",
    prune_alpha: float = 1.0,
    left_factor: str = "orthonormal",
    truncate: bool = False,
    row_norm_bound: float = 1.0,
    row_change_bound: float | None = None,
    max_dense_bytes: int | None = None,
    entry_bound: float = 1.0,
    coherence: float | None = None,
    c_doubling: bool = False,
    n_iter: int | None = None,
    symmetric: bool = False,
    signed_values: bool = False,
    client: Any = None,
    executor: str = "auto",
    seed: int | None = None,
    persist: bool | None = None,
    noise: Any = None,
    timings: bool = False,
    storage_options: Any = None,
    ledger: Any = None,
    dataset: str | None = None,
    job_id: str | None = None,
) -> LowRankResult:
    """A differentially private low-rank approximation of a row-partitioned matrix, kept factored.

    Parameters
    ----------
    data
        A store path, a :class:`~dppca_dask.storage.MatrixStore`, a dask array, a scipy sparse matrix or a numpy
        array; each row is one individual.
    rank
        Target rank r (the output rank is r + oversampling for private-low-rank unless ``truncate``).
    epsilon, delta
        Total privacy budget.
    mechanism
        ``"private-low-rank"`` (default), ``"randomized-response"`` or ``"private-power"`` (module docstring).
    oversampling
        p of the range finder (private-low-rank); the sketch width is k = r + p ≤ min(n_rows, d).
    calibration
        ``"standard"`` (corrected constants, default) or ``"paper"`` (the paper's constants, for reproduction; for
        seed 003 they do not meet the requested (ε, δ), which the report then shows).
    projection
        Private-low-rank: ``"paper"`` (Fig. 3) or ``"tight"`` (one Gaussian on WᵀA at its Frobenius sensitivity,
        seed 003 spec §3.7: an extension beyond the paper).
    prune_alpha
        Private-low-rank: the pruning threshold α (1: none, the default and Thm 6.3's choice). Must be public:
        never derive it from the data.
    left_factor
        Private-low-rank: ``"orthonormal"`` (W, default) or ``"pruned"`` (the literal W' of Fig. 4).
    truncate
        Private-low-rank: return the best rank-r approximation of the rank-k output (post-processing).
    row_norm_bound
        Rows are clipped to this L2 norm before anything is computed (``inf``: not clipped; then give
        ``row_change_bound``). Private-low-rank and randomized response only.
    row_change_bound
        s: the relation protects one row changing by a vector of L2 norm at most s (default: ``row_norm_bound``,
        so that removing or zeroing one individual's clipped row is covered; replacing it is reported by group
        privacy). Every noise scale is proportional to s.
    max_dense_bytes
        Randomized response: the largest coordinator memory it may use (default 2 GiB); a larger matrix is
        refused before anything is read, naming the memory it would need.
    entry_bound, coherence, c_doubling, n_iter, symmetric
        Private-power: as in :func:`dppca_dask.pca` (entry-level relation; rank > 1 needs a symmetric PSD store).
    signed_values
        Private-power on a symmetric store: release the Rayleigh quotients ``v_iᵀB_{i-1}v_i`` instead of the
        paper's ``‖B_{i-1}v_i‖``, a private sign estimate that makes deflation valid for indefinite matrices
        (spec §1.4; beyond the paper). On an asymmetric store the value is always the signed ``ûᵀAv̂``.
    client, seed, persist, noise
        As in :func:`dppca_dask.pca`; a ``seed`` (or a non-private ``noise``) makes the result not private.
    executor
        As in :func:`dppca_dask.pca`: ``"auto"`` (default) runs in this process when no client is given or active
        and the input is small by its public shape (``dppca_dask.executor.in-process-max-partitions`` partitions,
        ``in-process-max-columns`` declared columns), else on an embedded ``LocalCluster``; ``"local"`` or
        ``"cluster"`` force either. ``provenance["executor"]`` states where it ran.
    timings
        Return wall-clock timings (they depend on the data and are not covered by the guarantee); default no.
    storage_options
        For a store given by its URL (``s3://bucket/x.zarr``): fsspec options of its file system (``endpoint_url``,
        ``key``, ``secret``, ...); by default the environment and configuration files (``AWS_ENDPOINT_URL``,
        ``AWS_ACCESS_KEY_ID``, ...). A ``zarr.storage.FsspecStore`` is accepted as ``data`` too. Workers read the
        store themselves, with these options; they are never shown in results, logs or provenance.
    ledger, dataset, job_id
        Keep the release in a privacy-budget ledger, as :func:`dppca_dask.pca` does (given together): reserved on
        every partition it reads before any value is read, charged once released.

    Returns
    -------
    LowRankResult
        ``left``, ``right``, the privacy report (its ``neighbouring`` names the relation), provenance, timings
        and released byproducts. Signs are deterministic, as scikit-learn's ``svd_flip`` makes them: the
        largest-magnitude entry of each row of ``right`` is positive, and the matching column of ``left`` carries
        the sign (``left @ right`` is unchanged), so that two runs are comparable factor by factor.
        ``diagnostics`` (:class:`~dppca_dask.diagnostics.Diagnostics`) says how far to trust each of the requested
        components, from released values only.

    Notes
    -----
    Validation happens before anything is read. Private-low-rank calibrates its two steps (range finder,
    projection) together to (ε, δ) by the PLD accountant; randomized response is one analytic Gaussian
    mechanism; private power composes its rounds and values exactly (see each algorithm's Notes).

    Examples
    --------
    >>> import numpy as np
    >>> import dppca_dask
    >>> rng = np.random.default_rng(0)
    >>> A = rng.normal(size=(500, 3)) @ rng.normal(size=(3, 40))  # rank 3
    >>> A /= np.linalg.norm(A, axis=1).max()
    >>> approx = dppca_dask.lowrank(A, rank=3, epsilon=1.0, delta=1e-6)
    >>> approx.left.shape, approx.right.shape  # rank + oversampling columns, kept factored
    ((500, 5), (5, 40))
    >>> approx.privacy.neighbouring
    'one row changes by a vector of L2 norm at most 1'
    """
    from dppca_dask._execution import execute as _execute
    from dppca_dask._execution import executor_choice as _executor_choice
    from dppca_dask._execution import noise_source as _noise_source
    from dppca_dask.api._provenance import run_provenance, run_timings
    from dppca_dask.coordinator import as_source
    from dppca_dask.coordinator.sources import schema_caveats
    from dppca_dask.ledger import budgeted_release
    from dppca_dask.methods.hardt_roth.entry import lowrank_report, make_run, released_factors, warn_paper_constants

    started_wall = _dt.datetime.now(_dt.timezone.utc)
    t0 = time.perf_counter()
    # -- public parameters, before the data is touched -----------------------------------------------------
    parameters, neighbouring = _validate(
        rank=rank, epsilon=epsilon, delta=delta, mechanism=mechanism, oversampling=oversampling,
        calibration=calibration, projection=projection, prune_alpha=prune_alpha, left_factor=left_factor,
        truncate=truncate, row_norm_bound=row_norm_bound, row_change_bound=row_change_bound,
        max_dense_bytes=max_dense_bytes, entry_bound=entry_bound, coherence=coherence, c_doubling=c_doubling,
        n_iter=n_iter, symmetric=symmetric, signed_values=signed_values,
    )
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer))):
        raise InvalidParameterError(f"seed must be an integer or None; got {seed!r}")
    if noise is not None and seed is not None:
        raise InvalidParameterError(
            "give either seed or noise, not both; a seeded NoiseSource is NoiseSource.from_seed"
        )
    epsilon, delta = parameters["epsilon"], parameters["delta"]
    if not isinstance(timings, (bool, np.bool_)):
        raise InvalidParameterError(f"timings must be True or False; got {timings!r}")
    # -- open the input (its public shape only) and plan from public values ---------------------------------
    source = as_source(data, storage_options)
    choice = _executor_choice(source, client, executor)  # public values only: the width and partition count
    planned = _plan_shape(parameters, neighbouring, int(source.n_rows), int(source.n_cols))
    caveats = schema_caveats(source)
    warn_paper_constants(planned.events, parameters, neighbouring)
    if noise is None:
        noise = _noise_source(seed)  # a seed warns NotPrivateWarning here
    t_calibrated = time.perf_counter()
    run = make_run(mechanism, parameters, int(source.n_cols), noise)
    # -- execute ---------------------------------------------------------------------------------------------
    with budgeted_release(ledger, dataset, job_id, store=source.store, epsilon=epsilon, delta=delta,
                          events=planned.events, mechanism=mechanism, neighbouring=neighbouring,
                          noise=noise):  # reserved before the data is read
        output = _execute(source, client, persist, run, choice)
    finished = time.perf_counter()
    # -- report (released values and public parameters only) -----------------------------------------------
    events = list(output.events)
    output, left, right, extras = released_factors(mechanism, output, parameters)
    report, calibration_info = lowrank_report(output, events, parameters, neighbouring, noise, planned.calibration)
    if caveats:
        report = dataclasses.replace(report, caveats=caveats)
    provenance = run_provenance(
        mechanism=mechanism, private=report.private, parameters=parameters, calibration=calibration_info,
        source=source, seeded=seed is not None or not noise.private, executor=choice.executor, noise=noise,
        started=started_wall, timings=timings)
    left, right = flip_factor_signs(left, right)  # deterministic signs, as svd_flip (post-processing)
    return LowRankResult(left=left, right=right, mechanism=mechanism, privacy=report, provenance=provenance,
                         timings=run_timings(timings, total=finished - t0, calibration=t_calibrated - t0,
                                             run=finished - t_calibrated),
                         extras=extras, diagnostics=getattr(output, "diagnostics", None))
