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
import math
import time
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from dppca_dask._version import __version__
from dppca_dask.errors import InvalidParameterError
from dppca_dask.methods import mechanism_names
from dppca_dask.results import LowRankResult, load_lowrank  # their home is the shared result module
from dppca_dask.signs import flip_factor_signs

__all__ = ["LowRankPlan", "LowRankResult", "load_lowrank", "lowrank", "plan_lowrank", "validate_lowrank"]

# ------------------------------------------------------------------------------------------------ validation
def _positive(name: str, value: Any, *, allow_inf: bool = False) -> float:
    try:
        out = float(value)
    except (TypeError, ValueError):
        raise InvalidParameterError(f"{name} must be a number; got {value!r}") from None
    if math.isnan(out) or out <= 0 or (math.isinf(out) and not allow_inf):
        raise InvalidParameterError(f"{name} must be {'> 0' if allow_inf else 'finite and > 0'}; got {out}")
    return out


def _integer(name: str, value: Any, minimum: int, *, maximum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise InvalidParameterError(f"{name} must be an integer >= {minimum}; got {value!r}")
    if maximum is not None and value > maximum:
        raise InvalidParameterError(f"{name} must be an integer <= {maximum}; got {value!r}")
    return int(value)


_SPECIFIC: dict[str, tuple[str, ...]] = {
    "private-low-rank": ("oversampling", "projection", "prune_alpha", "left_factor", "truncate"),
    "randomized-response": ("max_dense_bytes",),
    "private-power": ("entry_bound", "coherence", "c_doubling", "n_iter", "symmetric", "signed_values"),
}
_ROW_PARAMETERS = ("row_norm_bound", "row_change_bound")


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
    from dppca_dask.api import _execute, _executor_choice, _noise_source, _versions
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
    symmetric = parameters.get("symmetric", False)

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
    extras: dict[str, Any] = {"n_passes": output.n_passes}
    if mechanism != "private-power":
        left, right = output.left, output.right
    if mechanism == "private-low-rank":
        extras.update(alphas=output.alphas, projection_sensitivity=output.projection_sensitivity,
                      width=output.calibration.width)
    elif mechanism == "randomized-response":
        extras.update(sigma=output.sigma)
    else:
        cal_pp = output.calibration
        calibration_info = cal_pp.to_dict()
        extras.update(values=output.values, coherence=list(output.coherence), failed_rungs=list(output.failed_rungs),
                      dimension=output.dimension, n_releases=output.n_releases)
        if calibration == "paper":
            paper_figure = cal_pp.paper_figure()
        if symmetric:
            output, order = _feasible_values(output, signed=bool(parameters["signed_values"]))
            extras.update(values=output.values, coherence=[extras["coherence"][i] for i in order],
                          failed_rungs=[extras["failed_rungs"][i] for i in order])
            left = output.components.T
            right = output.values[:, None] * output.components
        else:
            left = output.left[:, None]
            right = output.values[:, None] * output.components
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


#: Bounds on public parameters (issue: absurd values must fail before anything is read, not deep in calibration).
MAX_EPSILON = 100.0
MIN_DELTA = 1e-30
MAX_RANK = 100_000
MAX_N_ITER = 10_000
MAX_BOUND = 1e100


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


def _bounded(name: str, value: Any, *, allow_inf: bool = False) -> float:
    out = _positive(name, value, allow_inf=allow_inf)
    if math.isfinite(out) and not 1.0 / MAX_BOUND <= out <= MAX_BOUND:
        raise InvalidParameterError(
            f"{name} must be in [{1.0 / MAX_BOUND:g}, {MAX_BOUND:g}] (noise scales are proportional to it); got "
            f"{out:g}; rescale the data instead"
        )
    return out


def _validate(
    *, rank: Any, epsilon: Any, delta: Any, mechanism: str, oversampling: Any, calibration: str, projection: str,
    prune_alpha: Any, left_factor: str, truncate: bool, row_norm_bound: Any, row_change_bound: Any,
    max_dense_bytes: Any, entry_bound: Any, coherence: Any, c_doubling: bool, n_iter: Any, symmetric: bool,
    signed_values: bool,
) -> tuple[dict[str, Any], str]:
    """Every public parameter of :func:`lowrank` checked, without the data: (parameters, neighbouring relation)."""
    from dppca_dask.accounting.hardt_roth import entry_relation, row_change_relation
    from dppca_dask.algorithms.private_power import DEFAULT_PRIVATE_POWER_N_ITER
    from dppca_dask.algorithms.randomized_response import DEFAULT_MAX_DENSE_BYTES

    if mechanism not in mechanism_names("lowrank"):
        raise InvalidParameterError(
            f"mechanism must be one of {', '.join(mechanism_names('lowrank'))}; got {mechanism!r}"
        )
    for name, flag in (("truncate", truncate), ("c_doubling", c_doubling), ("symmetric", symmetric),
                       ("signed_values", signed_values)):
        if not isinstance(flag, (bool, np.bool_)):  # bool("False") is True: never coerce a flag
            raise InvalidParameterError(f"{name} must be True or False; got {flag!r}")
    given = {
        "oversampling": oversampling != 2, "projection": projection != "paper", "prune_alpha": prune_alpha != 1.0,
        "left_factor": left_factor != "orthonormal", "truncate": bool(truncate),
        "max_dense_bytes": max_dense_bytes is not None, "entry_bound": entry_bound != 1.0,
        "coherence": coherence is not None, "c_doubling": bool(c_doubling), "n_iter": n_iter is not None,
        "symmetric": bool(symmetric), "signed_values": bool(signed_values), "row_norm_bound": row_norm_bound != 1.0,
        "row_change_bound": row_change_bound is not None,
    }
    allowed = set(_SPECIFIC[mechanism]) | (set(_ROW_PARAMETERS) if mechanism != "private-power" else set())
    wrong = [name for name, is_set in given.items() if is_set and name not in allowed]
    if wrong:
        raise InvalidParameterError(f"{', '.join(wrong)} do not apply to mechanism={mechanism!r}")
    epsilon = _positive("epsilon", epsilon)
    if epsilon > MAX_EPSILON:
        raise InvalidParameterError(
            f"epsilon must be <= {MAX_EPSILON:g} (a larger epsilon protects nothing); got {epsilon:g}"
        )
    try:
        delta = float(delta)
    except (TypeError, ValueError):
        raise InvalidParameterError(f"delta must be a number; got {delta!r}") from None
    if not MIN_DELTA <= delta < 1.0:
        raise InvalidParameterError(
            f"delta must be in [{MIN_DELTA:g}, 1); got {delta}; pass e.g. delta=1e-6 (or below 1/n_rows)"
        )
    rank = _integer("rank", rank, 1, maximum=MAX_RANK)
    if calibration not in ("standard", "paper"):
        raise InvalidParameterError(f"calibration must be 'standard' or 'paper'; got {calibration!r}")
    parameters: dict[str, Any] = {"mechanism": mechanism, "epsilon": epsilon, "delta": delta, "rank": rank,
                                  "calibration": calibration}
    if mechanism == "private-power":
        entry_bound = _bounded("entry_bound", entry_bound)
        if coherence is not None:
            coherence = _bounded("coherence", coherence)
            if coherence < 1.0:
                raise InvalidParameterError(
                    f"coherence must be >= 1 (the coherence of any matrix is >= 1); got {coherence}"
                )
        iters = DEFAULT_PRIVATE_POWER_N_ITER if n_iter is None else _integer("n_iter", n_iter, 1, maximum=MAX_N_ITER)
        if rank > 1 and not symmetric:
            raise InvalidParameterError(
                f"mechanism='private-power' with rank={rank} needs symmetric=True (a symmetric PSD store); use "
                "mechanism='private-low-rank' for an asymmetric store"
            )
        parameters.update(entry_bound=entry_bound, coherence=coherence, c_doubling=bool(c_doubling),
                          n_iter=iters, symmetric=bool(symmetric), signed_values=bool(signed_values))
        neighbouring = entry_relation(entry_bound)
    else:
        clip = _bounded("row_norm_bound", row_norm_bound, allow_inf=True)
        if row_change_bound is None:
            if math.isinf(clip):
                raise InvalidParameterError(
                    "row_norm_bound=inf leaves rows unbounded; give row_change_bound (the L2 change of one row the "
                    "guarantee covers) or a finite row_norm_bound"
                )
            change = clip
        else:
            change = _bounded("row_change_bound", row_change_bound)
        parameters.update(row_norm_bound=clip, row_change_bound=change)
        neighbouring = row_change_relation(change)
        if mechanism == "private-low-rank":
            oversampling = _integer("oversampling", oversampling, 0, maximum=MAX_RANK)
            prune_alpha = _positive("prune_alpha", prune_alpha)
            if left_factor not in ("orthonormal", "pruned"):
                raise InvalidParameterError(f"left_factor must be 'orthonormal' or 'pruned'; got {left_factor!r}")
            if projection not in ("paper", "tight"):
                raise InvalidParameterError(f"projection must be 'paper' or 'tight'; got {projection!r}")
            parameters.update(oversampling=oversampling, projection=projection, prune_alpha=prune_alpha,
                              left_factor=left_factor, truncate=bool(truncate))
        else:
            limit = DEFAULT_MAX_DENSE_BYTES if max_dense_bytes is None else _integer("max_dense_bytes",
                                                                                     max_dense_bytes, 1)
            parameters.update(max_dense_bytes=limit)
    return parameters, neighbouring


@dataclass(frozen=True)
class LowRankPlan:
    """What a complete :func:`lowrank` run on a store of a given (public) shape releases, known before the run."""

    mechanism: str
    neighbouring: str
    """The relation the guarantee is stated for."""
    events: tuple[Any, ...]
    """The DpEvents a complete run emits (the same accounting as the run's report): a ledger reserves these."""
    parameters: Mapping[str, Any]
    calibration: Mapping[str, Any]
    """Public calibrated constants."""


def _plan_shape(p: Mapping[str, Any], neighbouring: str, n_rows: int, n_cols: int) -> LowRankPlan:
    from dp_accounting import dp_event

    from dppca_dask.accounting.hardt_roth import calibrate_private_low_rank, rr_sigma
    from dppca_dask.algorithms.private_power import planned_private_power
    from dppca_dask.algorithms.randomized_response import dense_bytes_needed

    mechanism, epsilon, delta, rank, calibration = p["mechanism"], p["epsilon"], p["delta"], p["rank"], p["calibration"]
    if mechanism == "private-low-rank":
        width = rank + p["oversampling"]
        if width > min(n_rows, n_cols):
            raise InvalidParameterError(
                f"rank + oversampling = {width} must be <= min(n_rows, n_cols) = {min(n_rows, n_cols)}; lower them"
            )
        cal = calibrate_private_low_rank(epsilon=epsilon, delta=delta, rank=rank, oversampling=p["oversampling"],
                                         calibration=calibration, projection=p["projection"])
        calibration_info = cal.to_dict()
        events = list(cal.events())
    elif mechanism == "randomized-response":
        if rank > min(n_rows, n_cols):
            raise InvalidParameterError(f"rank must be <= min(n_rows, n_cols) = {min(n_rows, n_cols)}; got {rank}")
        need = dense_bytes_needed(n_rows, n_cols)
        if need > p["max_dense_bytes"]:
            raise InvalidParameterError(
                f"randomized-response densifies the {n_rows}x{n_cols} matrix at the coordinator and would need about "
                f"{need / 2**30:.2f} GiB ({need} bytes), more than max_dense_bytes={p['max_dense_bytes']}; "
                "use mechanism='private-low-rank', or raise max_dense_bytes if the coordinator has the memory"
            )
        sigma = rr_sigma(epsilon, delta, calibration=calibration)
        calibration_info = {"sigma": sigma, "calibration": calibration}
        events = [dp_event.GaussianDpEvent(sigma)]
    else:
        if rank > n_cols:
            raise InvalidParameterError(f"rank must be <= the number of columns ({n_cols}); got {rank}")
        pp = planned_private_power(
            n_rows=n_rows, n_cols=n_cols, epsilon=epsilon, delta=delta, n_iter=p["n_iter"], n_components=rank,
            symmetric=p["symmetric"], coherence=p["coherence"], c_doubling=p["c_doubling"], calibration=calibration,
            release_values=True,
        )
        calibration_info = pp.to_dict()
        events = list(pp.events())
    return LowRankPlan(mechanism=mechanism, neighbouring=neighbouring, events=tuple(events), parameters=dict(p),
                       calibration=calibration_info)


#: Defaults of :func:`lowrank`'s public parameters (for planning without running).
_PLAN_DEFAULTS: dict[str, Any] = {
    "mechanism": "private-low-rank", "oversampling": 2, "calibration": "standard", "projection": "paper",
    "prune_alpha": 1.0, "left_factor": "orthonormal", "truncate": False, "row_norm_bound": 1.0,
    "row_change_bound": None, "max_dense_bytes": None, "entry_bound": 1.0, "coherence": None,
    "c_doubling": False, "n_iter": None, "symmetric": False, "signed_values": False,
}


def validate_lowrank(*, rank: Any, epsilon: Any, delta: Any, **parameters: Any) -> dict[str, Any]:
    """Every public parameter of :func:`lowrank` checked with its defaults, without the data (the same errors)."""
    unknown = sorted(set(parameters) - set(_PLAN_DEFAULTS))
    if unknown:
        raise InvalidParameterError(f"unknown lowrank parameters: {', '.join(unknown)}")
    return _validate(rank=rank, epsilon=epsilon, delta=delta, **{**_PLAN_DEFAULTS, **parameters})[0]


def plan_lowrank(
    n_rows: int, n_cols: int, *, rank: int, epsilon: float, delta: float, **parameters: Any
) -> LowRankPlan:
    """Plan a :func:`lowrank` run on an n_rows×n_cols store from public parameters only (nothing is read).

    Validates every parameter exactly as :func:`lowrank` does (the same errors) and returns the relation and the
    DpEvents a complete run emits, under either calibration; the job runner reserves these before the run.
    ``parameters`` are :func:`lowrank`'s keyword arguments (``mechanism``, ``oversampling``, ...).
    """
    unknown = sorted(set(parameters) - set(_PLAN_DEFAULTS))
    if unknown:
        raise InvalidParameterError(f"unknown lowrank parameters: {', '.join(unknown)}")
    params, neighbouring = _validate(rank=rank, epsilon=epsilon, delta=delta, **{**_PLAN_DEFAULTS, **parameters})
    return _plan_shape(params, neighbouring, _integer("n_rows", n_rows, 1), _integer("n_cols", n_cols, 1))


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
