"""The public entry points: :func:`pca` and the scikit-learn-style :class:`DPPCA` estimator.

``pca`` validates every parameter and the input's metadata before anything else happens, calibrates the noise to
the requested total (ε, δ) from public parameters only, then runs the mechanism on a Dask cluster (an embedded
``LocalCluster`` unless a client or scheduler address is given) and returns a frozen :class:`PCAResult` with its
privacy report.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import inspect
import logging
import math
import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from dppca_dask import __version__
from dppca_dask._private_power_plan import PRIVATE_POWER, plan_private_power
from dppca_dask.algorithms.adaptive_power import adaptive_power_run, pass_row_budget, release_key
from dppca_dask.algorithms.block_power import (
    BLOCK_POWER,
    centring_options,
    plan_block_power,
    plan_with_centring,
    result_fields,
)
from dppca_dask.algorithms.analyze_gauss import (
    DEFAULT_MAX_DENSE_DIM,
    analyze_gauss_run,
    check_dense_dim,
)
from dppca_dask.algorithms.exact import exact_run
from dppca_dask.algorithms.private_power import DEFAULT_PRIVATE_POWER_N_ITER
from dppca_dask.coordinator import Coordinator, LocalExecutor, as_source, connect, run_algorithm
from dppca_dask.coordinator.sources import PartitionSource, schema_caveats
from dppca_dask.errors import InvalidParameterError, NotPrivateWarning
from dppca_dask.kernels import ThresholdGrid
from dppca_dask.results import PCAResult

__all__ = [
    "DEFAULT_N_ITER",
    "DEFAULT_SVT_SHARE",
    "DPPCA",
    "MechanismPlan",
    "PCAParameters",
    "ReleasePlan",
    "mechanisms",
    "pca",
    "plan_release",
    "register_mechanism",
]

log = logging.getLogger(__name__)

#: Default iterations of adaptive power iteration, chosen from ``benchmarks/bench_utility.py``: at the seed 004
#: spec's data (n = 300,000, d = 3,000), T = 5 had the lowest median error at ε = 0.5, 1 and 2 among T = 3, 5, 8, 10.
DEFAULT_N_ITER = 5
#: Default share of the zCDP budget for the SVT steps: 0.05, 0.1, 0.2, 0.3 gave median sin² 0.0064, 0.0067,
#: 0.0074, 0.0080 at ε = 1 on the same data; 0.1 is near the best while keeping the cut-off (≈ 6·ln(20)/ε_svt
#: filtered rows per iteration) moderate for smaller datasets.
DEFAULT_SVT_SHARE = 0.1
#: Largest total ε :func:`pca` accepts. Beyond it a guarantee means nothing (e^100 ≈ 2.7e43) and the accounting
#: arithmetic (e^ε) leaves floating point; use ``mechanism="exact"`` for a non-private answer.
MAX_EPSILON = 100.0
#: Smallest δ :func:`pca` accepts: the PLD accountant's tail truncation (1e-15 of probability mass) makes figures at
#: smaller δ unreliable, and a subnormal δ (e.g. 1e-320) breaks the zCDP conversions.
MIN_DELTA = 1e-14
#: Range of ``row_norm_bound`` for private mechanisms: scores and noise scale with c², which must stay far from
#: float64 overflow (1.8e308) and underflow.
ROW_NORM_BOUND_RANGE = (1e-100, 1e100)
#: Largest ``n_iter`` (and ``n_iter × n_components`` for adaptive power): a few iterations suffice, and calibrating
#: 10,000 takes seconds where a million would not finish.
MAX_N_ITER = 10_000
#: Largest grid resolution: points per octave and octaves (the grid has at most 64 × 256 + 1 points, and its
#: smallest value c²·2^-256 stays a normal float64 for every allowed c).
MAX_GRID_PER_OCTAVE = 64
MAX_GRID_OCTAVES = 256

#: Mechanisms of :func:`pca` that are not differentially private (baselines).
NON_PRIVATE_MECHANISMS = frozenset({"exact"})

ADD_REMOVE_ROW = "add/remove one row"


@dataclass(frozen=True)
class PCAParameters:
    """Every public parameter of a run, validated and fixed before the data is read (privacy invariant 4)."""

    mechanism: str
    epsilon: float
    delta: float
    n_components: int
    n_iter: int
    row_norm_bound: float
    svt_share: float
    beta: float
    grid_per_octave: int
    grid_octaves: int
    calibration: str
    max_dense_dim: int
    # private power iteration (Hardt & Roth 2013) only:
    coherence: float | None = None
    entry_bound: float = 1.0
    c_doubling: bool = False
    symmetric: bool = False

    def to_json(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def _check_positive(name: str, value: float, *, allow_inf: bool = False) -> float:
    if isinstance(value, (bool, np.bool_)):
        raise InvalidParameterError(f"{name} must be a number; got {value!r}")
    try:
        value = float(value)
    except (TypeError, ValueError) as exc:
        raise InvalidParameterError(f"{name} must be a number; got {value!r}") from exc
    if math.isnan(value) or value <= 0 or (math.isinf(value) and not allow_inf):
        raise InvalidParameterError(f"{name} must be {'> 0' if allow_inf else 'finite and > 0'}; got {value}")
    return value


def _check_int(name: str, value: Any, *, low: int, high: int | None = None, hint: str = "") -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise InvalidParameterError(f"{name} must be an integer >= {low}; got {value!r}")
    if value < low or (high is not None and value > high):
        span = f">= {low}" if high is None else f"in [{low}, {high}]"
        raise InvalidParameterError(f"{name} must be an integer {span}; got {value!r}{hint}")
    return int(value)


def _check_fraction(name: str, value: Any, example: str) -> float:
    if isinstance(value, (bool, np.bool_)):
        raise InvalidParameterError(f"{name} must be a number in (0, 1); got {value!r}")
    try:
        number = float(value)
    except (TypeError, ValueError) as exc:
        raise InvalidParameterError(f"{name} must be a number in (0, 1); got {value!r}") from exc
    if not 0.0 < number < 1.0:
        raise InvalidParameterError(f"{name} must be in (0, 1); got {value}; e.g. {example}")
    return number


def validate_parameters(
    *,
    mechanism: str,
    epsilon: float,
    delta: float,
    n_components: int,
    n_iter: int | None,
    row_norm_bound: float,
    svt_share: float,
    beta: float,
    grid_per_octave: int,
    grid_octaves: int,
    calibration: str,
    max_dense_dim: int,
    coherence: float | None = None,
    entry_bound: float = 1.0,
    c_doubling: bool = False,
    symmetric: bool = False,
) -> PCAParameters:
    """Validate the public parameters of :func:`pca` (raises :class:`InvalidParameterError`).

    Bounds (documented so that no parameter can overflow the arithmetic or hang calibration):
    ``0 < epsilon ≤`` :data:`MAX_EPSILON`, :data:`MIN_DELTA` ``≤ delta < 1``, ``row_norm_bound`` in
    :data:`ROW_NORM_BOUND_RANGE` (private mechanisms), ``1 ≤ n_iter ≤`` :data:`MAX_N_ITER` (and
    ``n_iter × n_components ≤ MAX_N_ITER`` for adaptive power), ``svt_share`` and ``beta`` in (0, 1),
    ``1 ≤ grid_per_octave ≤`` :data:`MAX_GRID_PER_OCTAVE`, ``1 ≤ grid_octaves ≤`` :data:`MAX_GRID_OCTAVES`.
    """
    if not isinstance(mechanism, str) or mechanism not in _PLANNERS:
        raise InvalidParameterError(f"mechanism must be one of {', '.join(mechanisms())}; got {mechanism!r}")
    private = mechanism not in NON_PRIVATE_MECHANISMS
    if private:
        epsilon = _check_positive("epsilon", epsilon)
        if epsilon > MAX_EPSILON:
            raise InvalidParameterError(
                f"epsilon must be <= {MAX_EPSILON:g}; got {epsilon:g}; a larger epsilon promises nothing "
                "(use mechanism='exact' for a non-private answer)"
            )
        if isinstance(delta, (bool, np.bool_)):
            raise InvalidParameterError(f"delta must be a number in [{MIN_DELTA:g}, 1); got {delta!r}")
        try:
            delta = float(delta)
        except (TypeError, ValueError) as exc:
            raise InvalidParameterError(f"delta must be a number in [{MIN_DELTA:g}, 1); got {delta!r}") from exc
        if not MIN_DELTA <= delta < 1.0:
            raise InvalidParameterError(
                f"delta must be in [{MIN_DELTA:g}, 1); got {delta:g}; the accountant is not reliable below "
                f"{MIN_DELTA:g}; use e.g. delta=1e-6 (or well below 1/n for n rows)"
            )
    bound = _check_positive("row_norm_bound", row_norm_bound, allow_inf=not private)
    low, high = ROW_NORM_BOUND_RANGE
    if private and not low <= bound <= high:
        raise InvalidParameterError(
            f"row_norm_bound must be in [{low:g}, {high:g}]; got {bound:g}; scale the data so that rows have "
            "norms of order 1"
        )
    n_components = _check_int("n_components", n_components, low=1)
    iters = _DEFAULT_N_ITERS.get(mechanism, DEFAULT_N_ITER) if n_iter is None else n_iter
    iters = _check_int("n_iter", iters, low=1, high=MAX_N_ITER, hint="; a few iterations suffice")
    if mechanism == "adaptive-power" and iters * n_components > MAX_N_ITER:
        raise InvalidParameterError(
            f"n_iter × n_components must be <= {MAX_N_ITER}; got {iters} × {n_components} = {iters * n_components}"
        )
    svt_share = _check_fraction("svt_share", svt_share, str(DEFAULT_SVT_SHARE))
    beta = _check_fraction("beta", beta, "0.05")
    grid_per_octave = _check_int("grid_per_octave", grid_per_octave, low=1, high=MAX_GRID_PER_OCTAVE)
    grid_octaves = _check_int("grid_octaves", grid_octaves, low=1, high=MAX_GRID_OCTAVES)
    if calibration not in ("standard", "paper"):
        raise InvalidParameterError(f"calibration must be 'standard' or 'paper'; got {calibration!r}")
    max_dense_dim = _check_int("max_dense_dim", max_dense_dim, low=1)
    entry_bound, coherence = _validate_private_power(mechanism, entry_bound, coherence, c_doubling, symmetric, bound)
    return PCAParameters(
        mechanism=mechanism,
        epsilon=float(epsilon) if private else float("inf"),
        delta=float(delta) if private else 0.0,
        n_components=n_components,
        n_iter=iters,
        row_norm_bound=bound,
        svt_share=svt_share,
        beta=beta,
        grid_per_octave=grid_per_octave,
        grid_octaves=grid_octaves,
        calibration=calibration,
        max_dense_dim=max_dense_dim,
        coherence=coherence,
        entry_bound=entry_bound,
        c_doubling=bool(c_doubling),
        symmetric=bool(symmetric),
    )


def _validate_private_power(
    mechanism: str, entry_bound: float, coherence: float | None, c_doubling: bool, symmetric: bool,
    row_norm_bound: float,
) -> tuple[float, float | None]:
    """Parameters of private power iteration; other mechanisms refuse them rather than ignore them."""
    if mechanism != "private-power":
        given = [name for name, value, default in (("coherence", coherence, None), ("entry_bound", entry_bound, 1.0),
                                                   ("c_doubling", c_doubling, False), ("symmetric", symmetric, False))
                 if value != default]
        if given:
            raise InvalidParameterError(
                f"{', '.join(given)} apply only to mechanism='private-power'; got mechanism={mechanism!r}"
            )
        return 1.0, None
    if row_norm_bound != 1.0:
        raise InvalidParameterError(
            f"row_norm_bound does not apply to mechanism='private-power' (it protects one entry changing by at most "
            f"entry_bound, and clips nothing); got row_norm_bound={row_norm_bound}"
        )
    bound = _check_positive("entry_bound", entry_bound)
    if not 1e-100 <= bound <= 1e100:
        raise InvalidParameterError(
            f"entry_bound must be in [1e-100, 1e+100] (noise scales are proportional to it); got {bound:g}; "
            "rescale the data instead"
        )
    if coherence is not None:
        coherence = _check_positive("coherence", coherence)
        if coherence > 1e100:
            raise InvalidParameterError(f"coherence must be <= 1e+100 (C = N is the worst case); got {coherence:g}")
        if coherence < 1.0:
            raise InvalidParameterError(f"coherence must be >= 1 (the coherence of any matrix is >= 1); got {coherence}")
    for name, flag in (("c_doubling", c_doubling), ("symmetric", symmetric)):
        if not isinstance(flag, (bool, np.bool_)):
            raise InvalidParameterError(f"{name} must be True or False; got {flag!r}")
    return bound, coherence


def _noise_source(seed: int | None) -> Any:
    from dppca_dask.mechanisms import NoiseSource

    if seed is None:
        return NoiseSource.from_entropy()
    return NoiseSource.from_seed(seed)


@dataclass
class MechanismPlan:
    """A calibrated mechanism ready to run: the algorithm generator factory and how to report it."""

    make_run: Callable[[Any, Callable[..., None] | None, Any], Any]
    """``make_run(noise, on_release, resume)`` returns the algorithm generator."""
    neighbouring: str
    """The neighbouring relation the guarantee is stated for."""
    calibration: Mapping[str, Any]
    """Public calibrated constants (for provenance)."""
    paper_figure: Mapping[str, Any] | None
    """The paper's own privacy figure, for reference in the report."""
    total_steps: int
    """Releases of the run (for progress)."""
    resumed_keys: Callable[[Any], list[str]] = lambda resume: []
    """Release keys already drawn by the interrupted run a ``resume`` state comes from."""
    private: bool = True
    planned_events: tuple[Any, ...] | None = None
    """The DpEvents a complete run emits, when they are known before the run (a ledger reserves them)."""
    replace_one: tuple[Callable[[tuple[Any, ...]], list[Any]], str] | None = None
    """For add/remove mechanisms with their own replace-one analysis: a map from the emitted events to the
    replace-one events, and one sentence saying how (the report's ``group_privacy``); None: group privacy."""


#: Planners by mechanism name: ``planner(params, n_cols) -> MechanismPlan``, from public parameters only.
_PLANNERS: dict[str, Callable[[PCAParameters, int], MechanismPlan]] = {}
#: Default ``n_iter`` of mechanisms whose default differs from :data:`DEFAULT_N_ITER`.
_DEFAULT_N_ITERS: dict[str, int] = {}


def register_mechanism(name: str, planner: Callable[[PCAParameters, int], MechanismPlan]) -> None:
    """Make a mechanism available to :func:`pca` under ``name``."""
    _PLANNERS[name] = planner


def mechanisms() -> tuple[str, ...]:
    """Names of the mechanisms :func:`pca` accepts."""
    return tuple(_PLANNERS)


def _plan(params: PCAParameters, n_cols: int) -> MechanismPlan:
    """Calibrate the mechanism from public parameters only (no data has been read yet)."""
    if params.n_components > n_cols:
        raise InvalidParameterError(
            f"n_components must be <= the number of columns ({n_cols}); got {params.n_components}"
        )
    return _PLANNERS[params.mechanism](params, n_cols)


def _adaptive_resumed_keys(n_iter: int) -> Callable[[Any], list[str]]:
    def keys(resume: Any) -> list[str]:
        if resume is None:
            return []
        pending = getattr(resume, "pending_index", None)
        out = []
        started = resume.iteration > 0 or pending is not None  # the current component's start was drawn
        for k in range(resume.component + (1 if started else 0)):
            last = n_iter if k < resume.component else resume.iteration
            out.append(f"component-{k}/init")
            for t in range(last):
                out += [release_key(k, t, "svt"), release_key(k, t, "gaussian")]
        if pending is not None:
            out.append(release_key(resume.component, resume.iteration, "svt"))
        return out

    return keys


def _plan_adaptive_power(params: PCAParameters, n_cols: int) -> MechanismPlan:
    from dppca_dask import accounting
    from dppca_dask.mechanisms import svt_cutoff, svt_replace_one_epsilon, svt_scales

    count = params.n_iter * params.n_components
    share = accounting.DEFAULT_FAILURE_DELTA_SHARE
    if params.calibration == "paper":
        # the paper's Lemma 3.1 constants, calibrated to the δ left after the second-pass share
        paper = accounting.paper_adaptive_power_calibration(
            epsilon=params.epsilon, delta=params.delta * (1.0 - share), n_iter=count
        )
        epsilon_svt, multiplier = paper.epsilon_svt, paper.noise_multiplier
        form = "general"  # the paper's Lap(2/ε), Lap(4/ε)
        failure_delta = share * params.delta
        pass_delta = accounting.pass_delta_for(failure_delta, epsilon_svt)
    else:
        cal = accounting.calibrate_adaptive_power(
            epsilon=params.epsilon,
            delta=params.delta,
            n_iter=params.n_iter,
            svt_share=params.svt_share,
            n_components=params.n_components,
            failure_delta_share=share,
        )
        epsilon_svt, multiplier = cal.epsilon_svt, cal.noise_multiplier
        form = "monotone"  # Lyu–Su–Li 2017: Lap(2/ε), Lap(2/ε) for monotonic queries
        failure_delta, pass_delta = cal.failure_delta, cal.pass_delta
    svt_delta = accounting.svt_step_delta(epsilon_svt, pass_delta, count)
    threshold_scale, query_scale = svt_scales(epsilon_svt, form=form)
    cutoff = svt_cutoff(epsilon_svt, params.beta)
    grid = ThresholdGrid.for_bound(
        params.row_norm_bound, per_octave=params.grid_per_octave, octaves=params.grid_octaves
    )
    top_m = pass_row_budget(cutoff=cutoff, threshold_scale=threshold_scale, query_scale=query_scale,
                            n_queries=grid.n_points, n_releases=count, pass_delta=pass_delta)

    def make_run(noise: Any, on_release: Callable[..., None] | None, resume: Any) -> Any:
        return adaptive_power_run(
            n_cols=n_cols,
            n_iter=params.n_iter,
            n_components=params.n_components,
            row_norm_bound=params.row_norm_bound,
            epsilon_svt=epsilon_svt,
            noise_multiplier=multiplier,
            cutoff=cutoff,
            grid=grid,
            noise=noise,
            svt_form=form,
            pass_delta=pass_delta,
            top_m=top_m,
            resume=resume,
            on_release=on_release,
        )

    paper_figure = accounting.paper_adaptive_power_epsilon(
        epsilon_svt=epsilon_svt,
        noise_multiplier=multiplier,
        n_iter=count,
        delta=params.delta,
    )
    epsilon_replace = svt_replace_one_epsilon(threshold_scale, query_scale)
    replace_svt = accounting.EpsilonDeltaDpEvent(
        epsilon_replace, accounting.svt_step_delta(epsilon_replace, pass_delta, count)
    )

    def replace_one(events: tuple[Any, ...]) -> list[Any]:
        from dp_accounting import dp_event

        out: list[Any] = []
        for leaf, n in accounting.flatten_events(events):
            if isinstance(leaf, accounting.EpsilonDeltaDpEvent):
                out.append(dp_event.SelfComposedDpEvent(replace_svt, n))
            elif isinstance(leaf, dp_event.GaussianDpEvent):
                out.append(dp_event.SelfComposedDpEvent(dp_event.GaussianDpEvent(leaf.noise_multiplier / 2.0), n))
            else:
                raise InvalidParameterError(f"unexpected event {leaf!r:.100} in an adaptive power run")
        return out

    method = (
        f"replace one row: each AboveThreshold step is {epsilon_replace:.6g}-DP (its counts keep sensitivity 1 but "
        "are not monotonic: 1/threshold_scale + 2/query_scale, Lyu-Su-Li 2017), with the second-pass term "
        "(1 + e^eps)·delta_pass/K; each Gaussian step has sensitivity 2·theta (noise multiplier halved)"
    )
    return MechanismPlan(
        make_run,
        ADD_REMOVE_ROW,
        {"epsilon_svt": epsilon_svt, "noise_multiplier": multiplier, "cutoff": cutoff, "top_m": top_m,
         "grid": grid.to_json(), "calibration": params.calibration, "svt_form": form,
         "svt_threshold_scale": threshold_scale, "svt_query_scale": query_scale,
         "delta_split": {"total": params.delta, "second_pass": failure_delta,
                         "mechanisms": params.delta - failure_delta, "pass_probability": pass_delta,
                         "per_svt_step": svt_delta}},
        paper_figure,
        count,
        resumed_keys=_adaptive_resumed_keys(params.n_iter),
        planned_events=_adaptive_events(epsilon_svt, svt_delta, multiplier, count),
        replace_one=(replace_one, method),
    )


def _adaptive_events(epsilon_svt: float, svt_delta: float, multiplier: float, count: int) -> tuple[Any, ...]:
    from dp_accounting import dp_event

    from dppca_dask.accounting import EpsilonDeltaDpEvent

    pair = dp_event.ComposedDpEvent([EpsilonDeltaDpEvent(epsilon_svt, svt_delta), dp_event.GaussianDpEvent(multiplier)])
    return (dp_event.SelfComposedDpEvent(pair, count),)


def _plan_analyze_gauss(params: PCAParameters, n_cols: int) -> MechanismPlan:
    from dppca_dask import accounting

    check_dense_dim(n_cols, params.max_dense_dim, "analyze-gauss")
    multiplier = accounting.calibrate_gaussian(epsilon=params.epsilon, delta=params.delta)

    def make_run(noise: Any, on_release: Callable[..., None] | None, resume: Any) -> Any:
        return analyze_gauss_run(
            n_cols=n_cols,
            n_components=params.n_components,
            row_norm_bound=params.row_norm_bound,
            noise_multiplier=multiplier,
            noise=noise,
            max_dense_dim=params.max_dense_dim,
        )

    from dp_accounting import GaussianDpEvent

    def replace_one(events: tuple[Any, ...]) -> list[Any]:
        # replacing row a by b moves the upper triangle by that of aaᵀ − bbᵀ, whose squared norm is
        # (‖aaᵀ − bbᵀ‖_F² + Σ(a_i² − b_i²)²)/2 ≤ (2c⁴ + 2c⁴)/2: sensitivity √2·c², not 2·c²
        return [GaussianDpEvent(multiplier / math.sqrt(2.0))]

    return MechanismPlan(make_run, ADD_REMOVE_ROW, {"noise_multiplier": multiplier}, None, 1,
                         planned_events=(GaussianDpEvent(multiplier),),
                         replace_one=(replace_one, "replace one row: the Gram matrix's upper triangle moves by at "
                                      "most sqrt(2)·c² (noise multiplier divided by sqrt(2))"))


def _plan_exact(params: PCAParameters, n_cols: int) -> MechanismPlan:
    def make_exact(noise: Any, on_release: Callable[..., None] | None, resume: Any) -> Any:
        return exact_run(
            n_cols=n_cols,
            n_components=params.n_components,
            row_norm_bound=params.row_norm_bound,
            max_dense_dim=params.max_dense_dim,
        )

    return MechanismPlan(make_exact, "none (not private)", {}, None, 1, private=False)


register_mechanism("adaptive-power", _plan_adaptive_power)
register_mechanism("analyze-gauss", _plan_analyze_gauss)
register_mechanism("exact", _plan_exact)
register_mechanism(PRIVATE_POWER, plan_private_power)
register_mechanism(BLOCK_POWER, plan_block_power)
_DEFAULT_N_ITERS[PRIVATE_POWER] = DEFAULT_PRIVATE_POWER_N_ITER


@dataclass(frozen=True)
class ReleasePlan:
    """What a run of :func:`pca` will cost, known from public parameters and the input's shape alone."""

    mechanism: str
    neighbouring: str
    events: tuple[Any, ...]
    """DpEvents to reserve: those the run emits when they are known in advance, else one
    ``EpsilonDeltaDpEvent(epsilon, delta)`` (the run's calibrated guarantee, which never overshoots)."""
    private: bool


def plan_release(n_cols: int, *, mechanism: str = "adaptive-power", epsilon: float, delta: float,
                 **parameters: Any) -> ReleasePlan:
    """Validate ``pca``'s public parameters and say what the run will spend, without reading any data.

    ``parameters`` are the keyword arguments of :func:`pca` that shape the noise (``n_components``, ``n_iter``,
    ``row_norm_bound``, ``svt_share``, ...); arguments about execution (``client``, ``persist``, ...) are ignored.
    """
    from dppca_dask.accounting import EpsilonDeltaDpEvent

    names = set(inspect.signature(validate_parameters).parameters) - {"mechanism", "epsilon", "delta"}
    given = {k: v for k, v in parameters.items() if k in names}
    defaults = {"n_components": 1, "n_iter": None, "row_norm_bound": 1.0, "svt_share": DEFAULT_SVT_SHARE,
                "beta": 0.05, "grid_per_octave": 4, "grid_octaves": 24, "calibration": "standard",
                "max_dense_dim": DEFAULT_MAX_DENSE_DIM}
    params = validate_parameters(mechanism=mechanism, epsilon=epsilon, delta=delta, **{**defaults, **given})
    plan = _plan(params, int(n_cols))
    if plan.planned_events is not None:  # under either calibration: what the noise actually gives
        events = tuple(plan.planned_events)
    else:
        events = (EpsilonDeltaDpEvent(params.epsilon, params.delta),)
    return ReleasePlan(mechanism=params.mechanism, neighbouring=plan.neighbouring, events=events,
                       private=plan.private)


def pca(
    data: Any,
    *,
    epsilon: float,
    delta: float,
    n_components: int = 1,
    n_iter: int | None = None,
    row_norm_bound: float | str = 1.0,
    mechanism: str = "adaptive-power",
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
) -> PCAResult:
    """Differentially private top principal directions (right singular vectors) of a row-partitioned matrix.

    Parameters
    ----------
    data
        A store path, an opened :class:`~dppca_dask.storage.MatrixStore`, a ``dask.array.Array`` (rows chunked),
        a ``scipy.sparse`` matrix or a 2-D ``numpy`` array. Each row is one individual.
    epsilon, delta
        Total privacy budget of the run (ignored by ``mechanism="exact"``).
    n_components
        Number of components k.
    n_iter
        Iterations T per component (adaptive power; default :data:`DEFAULT_N_ITER`). Public and fixed in advance.
    row_norm_bound
        Public L2 bound c; rows are scaled down to it (never dropped). ``"auto"``: c is released first as the 90th
        percentile of the row norms on a public log grid (report noisy max, 5% of ε), so about 10% of the rows are
        clipped; no count of clipped rows is released.
    center
        ``False`` (default: components of the clipped, uncentred rows, as before), ``True`` or ``"private"`` (the
        mean of the clipped rows is released from 10% of the budget and the rows are centred at it inside the
        kernels: sparse partitions stay sparse), or a public mean vector used as is. With centring or
        ``row_norm_bound="auto"``, adaptive power runs as one block of k components (T releases) and Analyze
        Gauss on the centred Gram matrix; both release the explained variance from 5% of the budget
        (``result.explained_variance``, ``explained_variance_ratio``, ``singular_values``, ``mean``).
    mechanism
        ``"adaptive-power"`` (default; seed 004), ``"analyze-gauss"`` (baseline), ``"private-power"`` (seed 000:
        entry-level privacy, see below) or ``"exact"`` (not private).
    client
        ``None`` (an embedded ``LocalCluster``), a scheduler address, or a ``distributed.Client``; ``"local"``
        runs in this process without Dask (small data, tests).
    seed
        Makes the run reproducible; the result is then **not private** (``privacy.private`` is false) and a
        :class:`~dppca_dask.errors.NotPrivateWarning` is issued.
    persist
        Keep partitions in worker memory (``None``: when they fit in 60% of the cluster's memory).
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
        Private power only: the store is itself a symmetric matrix (checked before any release); required for
        ``n_components > 1``, which also assumes it is positive semidefinite. Otherwise the run uses the
        embedding ``[[0, A], [Aᵀ, 0]]`` and returns the top right singular vector (rank 1).
    timings
        Put wall-clock timings in ``result.timings`` (default: empty). They depend on the data and are **not**
        covered by the privacy guarantee; the result labels them so.

    Returns
    -------
    PCAResult
        ``components`` (k×d), ``thresholds``, ``privacy`` report, ``provenance``, ``timings`` (when asked).

    Notes
    -----
    Privacy contract: neighbouring datasets differ by adding or removing one row (replace-one follows by group
    privacy and is reported in ``privacy.group_privacy``). The report composes the DpEvents actually emitted with
    the PLD accountant. Components are the top right singular vectors of the clipped matrix, not of the centred
    data: centre the data first if that is what you need. ``mechanism="private-power"`` is private for one entry
    changing by at most ``entry_bound`` (its report says so), a weaker relation than a row; its default ``n_iter``
    is 20.
    """
    started_wall = _dt.datetime.now(_dt.timezone.utc)
    t0 = time.perf_counter()
    centring, row_norm_bound = centring_options(mechanism, center, row_norm_bound)
    params = validate_parameters(
        mechanism=mechanism,
        epsilon=epsilon,
        delta=delta,
        n_components=n_components,
        n_iter=n_iter,
        row_norm_bound=row_norm_bound,
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
    source = as_source(data)
    plan = _plan(params, source.n_cols)
    if centring.active:
        plan = plan_with_centring(params, source.n_cols, centring)
    caveats = schema_caveats(source) if plan.private else ()
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

    iteration_times: list[float] = []
    bar = _progress(plan.total_steps, params.mechanism, progress)
    last = [time.perf_counter()]

    def released(state: Any, events: tuple[Any, ...]) -> None:
        if on_release is not None:
            on_release(state, events)  # checkpoint first: what is logged below must be on disk
        if getattr(state, "pending_index", None) is not None:  # an AboveThreshold step; its Gaussian step follows
            log.debug("released the threshold step of iteration %d/%d", len(iteration_times) + 1, plan.total_steps)
            return
        now = time.perf_counter()
        iteration_times.append(now - last[0])
        last[0] = now
        theta = state.thresholds[-1][-1] if state.thresholds and state.thresholds[-1] else None
        # public numbers only (iteration counters, the released θ); no durations: they depend on the data
        log.info("released iteration %d/%d (theta=%s)", len(iteration_times), plan.total_steps,
                 f"{theta:.4g}" if theta is not None else "-")
        bar.update(1)
        if theta is not None:
            bar.set_postfix_str(f"theta={theta:.3g}")

    try:
        output = _execute(source, client, persist, plan.make_run(noise, released, resume))
    finally:
        bar.close()
    finished = time.perf_counter()
    events = tuple(getattr(output, "events", ()))
    report = _report(params, plan, events, noise)
    if caveats:
        report = dataclasses.replace(report, caveats=caveats)
    thresholds = getattr(output, "thresholds", None)
    extras: dict[str, Any] = {}
    if centring.auto_bound:
        extras["row_norm_bound"] = float(output.row_norm_bound)  # released by the private quantile
    if params.mechanism == "exact":
        extras["eigenvalues"] = np.asarray(output.eigenvalues).tolist()
        extras["passes"] = output.n_passes
    provenance = {
        "mechanism": params.mechanism,
        "private": report.private,
        "parameters": {**params.to_json(), **centring.to_json()},
        "calibration": dict(plan.calibration),
        "input": dict(source.description),
        "seeded": seed is not None or (noise is not None and not noise.private),
        "noise_sampler": noise.sampler if noise is not None else None,
        "package": {"dppca_dask": __version__, **_versions()},
        "started": started_wall.isoformat(timespec="seconds"),
        "finished": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }
    timing_values: dict[str, Any] = {}
    if timings:
        timing_values = {
            "total": finished - t0,
            "calibration": t_calibrated - t0,
            "iterations": iteration_times,
            "note": "wall-clock seconds; they depend on the data and are NOT covered by the privacy guarantee",
        }
    return PCAResult(
        components=output.components,
        mechanism=BLOCK_POWER if centring.active and params.mechanism == "adaptive-power" else params.mechanism,
        privacy=report,
        thresholds=thresholds,
        provenance=provenance,
        timings=timing_values,
        extras=extras,
        **result_fields(output),
    )


def _execute(source: PartitionSource, client: Any, persist: bool | None, run: Any) -> Any:
    if isinstance(client, str) and client == "local":
        executor = LocalExecutor(source)
        try:
            return run_algorithm(executor, run)
        finally:
            executor.close()
    with connect(client) as dask_client, Coordinator(dask_client, source, persist=persist) as coordinator:
        return run_algorithm(coordinator, run)


def _report(params: PCAParameters, plan: MechanismPlan, events: tuple[Any, ...], noise: Any) -> Any:
    from dppca_dask import accounting

    if params.mechanism == "exact":
        from dp_accounting import NonPrivateDpEvent

        return accounting.build_report(
            [NonPrivateDpEvent()], target_epsilon=float("inf"), target_delta=0.0,
            neighbouring=plan.neighbouring, private=False,
        )
    replace_events, method = (None, None) if plan.replace_one is None else (plan.replace_one[0](events),
                                                                          plan.replace_one[1])
    return accounting.build_report(
        list(events),
        target_epsilon=params.epsilon,
        target_delta=params.delta,
        neighbouring=plan.neighbouring,
        private=bool(noise.private),
        paper_figure=plan.paper_figure,
        replace_one_events=replace_events,
        replace_one_method=method,
    )


def _versions() -> dict[str, str]:
    import dask
    import distributed
    import zarr

    try:
        import dp_accounting  # noqa: F401
        from importlib.metadata import version

        dpa = version("dp-accounting")
    except Exception:  # pragma: no cover - always installed
        dpa = "unknown"
    return {"dask": dask.__version__, "distributed": distributed.__version__, "zarr": zarr.__version__,
            "numpy": np.__version__, "dp-accounting": dpa}


def _progress(total: int, mechanism: str, enabled: bool | None) -> Any:
    from dppca_dask._progress import progress_bar

    return progress_bar(total=total, desc=mechanism, unit="iter", enabled=enabled)


class DPPCA:
    """Differentially private PCA with the scikit-learn vocabulary; a thin wrapper around :func:`pca`.

    Parameters are those of :func:`pca`. After ``fit``: ``components_`` (k×d), ``result_`` (the
    :class:`PCAResult`), ``privacy_`` (its report), ``n_features_in_``. ``transform(X)`` projects rows onto the
    components (``X @ components_.T``); it is a public function of the released components applied to whatever
    data you give it.
    """

    def __init__(
        self,
        n_components: int = 1,
        *,
        epsilon: float = 1.0,
        delta: float = 1e-6,
        n_iter: int | None = None,
        row_norm_bound: float = 1.0,
        mechanism: str = "adaptive-power",
        client: Any = None,
        seed: int | None = None,
        persist: bool | None = None,
        svt_share: float = DEFAULT_SVT_SHARE,
    ) -> None:
        self.n_components = n_components
        self.epsilon = epsilon
        self.delta = delta
        self.n_iter = n_iter
        self.row_norm_bound = row_norm_bound
        self.mechanism = mechanism
        self.client = client
        self.seed = seed
        self.persist = persist
        self.svt_share = svt_share

    _PARAMS = ("n_components", "epsilon", "delta", "n_iter", "row_norm_bound", "mechanism", "client", "seed",
               "persist", "svt_share")

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self._PARAMS}

    def set_params(self, **params: Any) -> DPPCA:
        for name, value in params.items():
            if name not in self._PARAMS:
                raise InvalidParameterError(f"unknown parameter {name!r}; valid: {', '.join(self._PARAMS)}")
            setattr(self, name, value)
        return self

    def fit(self, X: Any, y: Any = None) -> DPPCA:
        result = pca(
            X,
            epsilon=self.epsilon,
            delta=self.delta,
            n_components=self.n_components,
            n_iter=self.n_iter,
            row_norm_bound=self.row_norm_bound,
            mechanism=self.mechanism,
            client=self.client,
            seed=self.seed,
            persist=self.persist,
            svt_share=self.svt_share,
        )
        self.result_ = result
        self.components_ = result.components
        self.privacy_ = result.privacy
        self.n_features_in_ = int(result.components.shape[1])
        return self

    def transform(self, X: Any) -> np.ndarray:
        if not hasattr(self, "components_"):
            raise InvalidParameterError("this DPPCA instance is not fitted yet; call fit(X) first")
        if X.shape[1] != self.n_features_in_:
            raise InvalidParameterError(
                f"X has {X.shape[1]} features; the model was fitted with {self.n_features_in_}"
            )
        return np.asarray(X @ self.components_.T)

    def fit_transform(self, X: Any, y: Any = None) -> np.ndarray:
        return self.fit(X).transform(X)
