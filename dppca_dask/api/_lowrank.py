"""Differentially private low-rank approximation of a row-partitioned matrix: :func:`lowrank`.

Three mechanisms, each returning the approximation **factored**, ``B = left @ right`` (left n_rows×r, right r×d),
with its privacy report:

- ``"private-low-rank"`` (default): private find-and-project of Hardt & Roth 2012 (Fig. 4; seed 003): a private
  range finder, optional pruning, a private projection, two passes over the data
  (:mod:`dppca_dask.algorithms.private_low_rank`). Private for one row changing by a vector of L2 norm ≤ s.
- ``"randomized-response"``: the paper's baseline, Gaussian noise on every entry then the exact truncated SVD;
  densifies the matrix at the coordinator, so it refuses matrices that do not fit
  (:mod:`dppca_dask.algorithms.randomized_response`). Same relation.
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
import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np

from dppca_dask._version import __version__
from dppca_dask.errors import InvalidParameterError
from dppca_dask.methods.hardt_roth.plan import (  # noqa: F401  (re-exported: their home before the move)
    _PLAN_DEFAULTS,
    MAX_BOUND,
    MAX_EPSILON,
    MAX_N_ITER,
    MAX_RANK,
    MIN_DELTA,
    LowRankPlan,
    _bounded,
    _integer,
    _plan_shape,
    _positive,
    _validate,
    plan_lowrank,
    validate_lowrank,
)
from dppca_dask.results import LowRankResult, load_lowrank  # their home is the shared result module
from dppca_dask.signs import flip_factor_signs

__all__ = ["LowRankPlan", "LowRankResult", "load_lowrank", "lowrank", "plan_lowrank", "validate_lowrank"]


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
    from dppca_dask.accounting import build_report
    from dppca_dask._execution import execute as _execute
    from dppca_dask._execution import executor_choice as _executor_choice
    from dppca_dask._execution import noise_source as _noise_source
    from dppca_dask._execution import versions as _versions
    from dppca_dask.coordinator import as_source
    from dppca_dask.coordinator.sources import schema_caveats

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
    epsilon, delta, rank = parameters["epsilon"], parameters["delta"], parameters["rank"]

    if not isinstance(timings, (bool, np.bool_)):
        raise InvalidParameterError(f"timings must be True or False; got {timings!r}")
    source = as_source(data, storage_options)
    choice = _executor_choice(source, client, executor)  # public values only: the width and partition count
    planned = _plan_shape(parameters, neighbouring, int(source.n_rows), int(source.n_cols))
    caveats = schema_caveats(source)
    calibration_info = dict(planned.calibration)
    paper_figure = None
    if mechanism == "private-low-rank" and calibration == "paper":
        report = build_report(planned.events, target_epsilon=epsilon, target_delta=delta, neighbouring=neighbouring)
        if not report.meets_target:
            warnings.warn(
                f"calibration='paper' uses Hardt-Roth 2012's printed constants, which do not meet "
                f"(epsilon={epsilon:g}, delta={delta:g}) (the range finder's noise lacks a sqrt(ln(1/delta)) "
                f"factor); this run is ({report.epsilon:.4g}, {delta:g})-DP, as its privacy report states",
                UserWarning, stacklevel=2,
            )
    n_cols = int(source.n_cols)

    if noise is None:
        noise = _noise_source(seed)  # a seed warns NotPrivateWarning here
    t_calibrated = time.perf_counter()
    run = _make_run(mechanism, parameters, n_cols, noise)
    from dppca_dask.ledger import budgeted_release

    with budgeted_release(ledger, dataset, job_id, store=source.store, epsilon=epsilon, delta=delta,
                          events=planned.events, mechanism=mechanism, neighbouring=neighbouring,
                          noise=noise):  # reserved before the data is read
        output = _execute(source, client, persist, run, choice)
    finished = time.perf_counter()

    events = list(output.events)
    output, left, right, extras = _factors(mechanism, output, parameters)
    if mechanism == "private-power":
        calibration_info = output.calibration.to_dict()
        if calibration == "paper":
            paper_figure = output.calibration.paper_figure()
    report = build_report(events, target_epsilon=epsilon, target_delta=delta, neighbouring=neighbouring,
                          private=bool(noise.private), paper_figure=paper_figure)
    if mechanism != "private-power" and parameters["row_change_bound"] == parameters["row_norm_bound"]:
        report = _with_replace_one(report, events, delta)
    if caveats:
        report = dataclasses.replace(report, caveats=caveats)
    provenance = {
        "mechanism": mechanism,
        "private": report.private,
        "parameters": parameters,
        "calibration": calibration_info,
        "input": dict(source.description),
        "seeded": seed is not None or not noise.private,
        "executor": choice.executor,
        "noise_sampler": noise.sampler,
        "package": {"dppca_dask": __version__, **_versions()},
        "started": started_wall.isoformat(timespec="seconds"),
    }
    if timings:  # with the start, the duration: data-dependent, so only when timings are asked for
        provenance["finished"] = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    timing_values: dict[str, Any] = {}
    if timings:
        timing_values = {"total": finished - t0, "calibration": t_calibrated - t0, "run": finished - t_calibrated,
                         "note": "wall-clock seconds; they depend on the data and are NOT covered by the privacy "
                                 "guarantee"}
    left, right = flip_factor_signs(left, right)  # deterministic signs, as svd_flip (post-processing)
    return LowRankResult(left=left, right=right, mechanism=mechanism, privacy=report, provenance=provenance,
                         timings=timing_values, extras=extras, diagnostics=getattr(output, "diagnostics", None))


def _factors(mechanism: str, output: Any, parameters: Mapping[str, Any]) -> tuple[Any, Any, Any, dict[str, Any]]:
    """The released factors of a run's output and its mechanism's extras (post-processing of released values):
    (output, left, right, extras); private power's values of a symmetric matrix projected onto their feasible set."""
    extras: dict[str, Any] = {"n_passes": output.n_passes}
    if mechanism == "private-low-rank":
        extras.update(alphas=output.alphas, projection_sensitivity=output.projection_sensitivity,
                      width=output.calibration.width)
        return output, output.left, output.right, extras
    if mechanism == "randomized-response":
        extras.update(sigma=output.sigma)
        return output, output.left, output.right, extras
    extras.update(values=output.values, coherence=list(output.coherence), failed_rungs=list(output.failed_rungs),
                  dimension=output.dimension, n_releases=output.n_releases)
    if parameters.get("symmetric", False):
        output, order = _feasible_values(output, signed=bool(parameters["signed_values"]))
        extras.update(values=output.values, coherence=[extras["coherence"][i] for i in order],
                      failed_rungs=[extras["failed_rungs"][i] for i in order])
        return output, output.components.T, output.values[:, None] * output.components, extras
    return output, output.left[:, None], output.values[:, None] * output.components, extras


def _feasible_values(output: Any, *, signed: bool) -> tuple[Any, list[int]]:
    """Private power's released σ̂_i of a symmetric matrix projected onto their feasible set (post-processing):
    norms (``signed=False``) are non-negative, so a negative one (Laplace noise) becomes 0; then the components are
    ordered by decreasing σ̂ (with their diagnostics), so that the values read as singular values do. Signed values
    (Rayleigh quotients) are kept as released. Returns the output and the order applied."""
    components = np.asarray(output.components)
    values = np.asarray(output.values, dtype=np.float64)
    if signed or values.shape[0] != components.shape[0]:
        return output, list(range(components.shape[0]))
    values = np.maximum(values, 0.0)
    order = [int(i) for i in np.argsort(-values, kind="stable")]
    diag = output.diagnostics
    if diag is not None:
        from dppca_dask.diagnostics import diagnostics

        diag = diagnostics([diag.noise_to_signal[i] for i in order], threshold=diag.threshold, rule=diag.rule)
    return dataclasses.replace(output, components=components[order], values=values[order], diagnostics=diag), order


def _make_run(mechanism: str, p: Mapping[str, Any], n_cols: int, noise: Any) -> Any:
    if mechanism == "private-low-rank":
        from dppca_dask.algorithms.private_low_rank import private_low_rank_run

        return private_low_rank_run(
            n_cols=n_cols, rank=p["rank"], oversampling=p["oversampling"], epsilon=p["epsilon"], delta=p["delta"],
            row_norm_bound=p["row_norm_bound"], row_change_bound=p["row_change_bound"], noise=noise,
            calibration=p["calibration"], projection=p["projection"], prune_alpha=p["prune_alpha"],
            left_factor=p["left_factor"], truncate=p["truncate"],
        )
    if mechanism == "randomized-response":
        from dppca_dask.algorithms.randomized_response import randomized_response_run

        return randomized_response_run(
            n_cols=n_cols, rank=p["rank"], epsilon=p["epsilon"], delta=p["delta"],
            row_norm_bound=p["row_norm_bound"], row_change_bound=p["row_change_bound"], noise=noise,
            calibration=p["calibration"],
        )
    from dppca_dask.algorithms.private_power import private_power_run

    return private_power_run(
        n_cols=n_cols, epsilon=p["epsilon"], delta=p["delta"], n_iter=p["n_iter"], n_components=p["rank"],
        symmetric=p["symmetric"], coherence=p["coherence"], c_doubling=p["c_doubling"],
        entry_bound=p["entry_bound"], calibration=p["calibration"], release_values=True,
        signed_values=p["signed_values"], noise=noise,
    )


def _with_replace_one(report: Any, events: list[Any], delta: float) -> Any:
    """Add the replace-one-row figure: with rows clipped to c = s, replacing a row is a change of at most 2s."""
    from dppca_dask.accounting import epsilon_for, group_events

    value = epsilon_for(group_events(events, group_size=2), delta=delta, accountant=report.accountant)
    group = {
        "neighbouring": "replace one row (rows clipped to the row-change bound)",
        "epsilon": value,
        "delta": float(delta),
        "accountant": report.accountant,
        "method": "group privacy of size 2 (sensitivities doubled)",
    }
    return dataclasses.replace(report, group_privacy=group)
