"""Shared public parameters of :func:`dppca_dask.pca`'s mechanisms and their validation (once, for all of them)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from dppca_dask.errors import InvalidParameterError
from dppca_dask.methods._registry import MechanismPlan, get_mechanism, mechanism_names

#: Largest dimension for which the dense Gram matrix is formed by default (Analyze Gauss, the exact baseline).
DEFAULT_MAX_DENSE_DIM = 4096
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
#: Largest ``n_iter`` (and ``n_iter × n_components`` for adaptive power, whose components run one after another):
#: every iteration is a pass over the data (two for adaptive power's AboveThreshold step), and a few suffice. The
#: cost is a pass's: in this process on a 2,000 × 50 store in 4 partitions, 2,000 iterations of ``auto`` took 30 s
#: (16 s with the calibration cached) and 10,000 ran past 120 s, while a cluster adds its round trips to every
#: pass; 1,000 stay within about 15 s there, as ``topics``' ``n_iter`` limit does.
MAX_N_ITER = 1_000
#: Largest grid resolution: points per octave and octaves (the grid has at most 64 × 256 + 1 points, and its
#: smallest value c²·2^-256 stays a normal float64 for every allowed c).
MAX_GRID_PER_OCTAVE = 64
MAX_GRID_OCTAVES = 256

#: Mechanisms of :func:`pca` that are not differentially private (baselines).
NON_PRIVATE_MECHANISMS = frozenset({"exact"})  # kept for callers; the registry's ``private`` decides

ADD_REMOVE_ROW = "add/remove one row"


def default_mechanism(n_components: int) -> str:
    """The mechanism :func:`dppca_dask.pca`, the CLI, the estimator and ``pp.pca`` run when none is named: ``"auto"``.

    ``"auto"`` (:mod:`dppca_dask.methods.adaptive_power.auto`) chooses between block adaptive power and Analyze Gauss
    from a private pilot (10% of the budget); ``benchmarks/bench_utility.py --auto`` measured its error within
    1.4× of the better of adaptive power (sequential or block) and Analyze Gauss on low- and high-coherence data
    and on w8a at ε = 1, where either fixed choice is 3–4× worse in one regime. Where adaptive power is named,
    the block version is the better one for k > 1 (``--block``: w8a at ε = 1, k = 2/5/10/20: subspace error
    0.012/0.097/0.140/0.262 against 0.204/0.219/0.194/0.295). A public function of public parameters.
    """
    return "auto"

#: Defaults of :func:`dppca_dask.pca`'s parameters that shape the noise (for planning without running).
PCA_DEFAULTS: dict[str, Any] = {"n_components": 1, "n_iter": None, "row_norm_bound": 1.0,
                                "svt_share": DEFAULT_SVT_SHARE, "beta": 0.05, "grid_per_octave": 4,
                                "grid_octaves": 24, "calibration": "standard", "max_dense_dim": DEFAULT_MAX_DENSE_DIM}


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
    if not isinstance(mechanism, str) or mechanism not in mechanism_names("pca"):
        raise InvalidParameterError(
            f"mechanism must be one of {', '.join(mechanism_names('pca'))}; got {mechanism!r}"
        )
    spec = get_mechanism(mechanism, "pca")
    private = spec.private
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
    iters = (spec.default_n_iter or DEFAULT_N_ITER) if n_iter is None else n_iter
    iters = _check_int("n_iter", iters, low=1, high=MAX_N_ITER,
                       hint=f"; each iteration is a pass over the data and a few suffice (default {DEFAULT_N_ITER})")
    if mechanism == "adaptive-power" and iters * n_components > MAX_N_ITER:
        raise InvalidParameterError(
            f"n_iter × n_components must be <= {MAX_N_ITER}; got {iters} × {n_components} = {iters * n_components} "
            "passes over the data; lower n_iter, or use mechanism='adaptive-power-block', which runs the components "
            "together"
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


def pca_validator(name: str) -> Callable[[Mapping[str, Any]], PCAParameters]:
    """``Mechanism.validate`` of the ``pca`` mechanism ``name``: :func:`validate_parameters` with pca's defaults."""

    def validate(params: Mapping[str, Any]) -> PCAParameters:
        return validate_parameters(mechanism=name, **{**PCA_DEFAULTS, **dict(params)})

    return validate


def pca_planner(planner: Callable[[PCAParameters, int], MechanismPlan]) -> Callable[..., MechanismPlan]:
    """``Mechanism.plan`` from ``planner(params, n_cols)``, with the check every pca mechanism shares."""

    def plan(params: PCAParameters, *, n_rows: int | None = None, n_cols: int) -> MechanismPlan:
        if params.n_components > n_cols:
            raise InvalidParameterError(
                f"n_components must be <= the number of columns ({n_cols}); got {params.n_components}"
            )
        return planner(params, n_cols)

    return plan
