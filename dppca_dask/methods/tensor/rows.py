"""Row-level private tensor power method on the third moment of a store's rows (beyond the paper).

Seed 002's privacy unit is one tensor entry; here it is **one row, add/remove**, for ``T = Σ_ℓ x_ℓ^{⊗3}`` with rows
clipped to a public L2 norm c. Each step releases the d×L block ``Σ_ℓ (x_ℓᵀU)∘² ⊗ x_ℓ`` (or, at the last step,
the L values ``Σ_ℓ (x_ℓᵀU)∘³``). One row moves the block by at most its **score**
``s(x) = ‖x‖ · ‖(Uᵀx)∘²‖₂`` in Frobenius norm, and the scalars by at most ``‖(Uᵀx)∘³‖₂ ≤ s(x)`` (|xᵀu| ≤ ‖x‖).

Two calibrations:

- ``filtering="fixed"``: the worst case ``s(x) ≤ c³√L``; Gaussian noise of std ``m·c³√L``.
- ``filtering="adaptive"`` (the adaptive filtering of seed 004, applied to the score): a public geometric grid of
  thresholds θ_j; AboveThreshold (:func:`~dppca_dask.mechanisms.above_threshold`, monotone form) over the counts
  ``F_j`` of rows whose score exceeds θ_j, from the smallest θ upward, against the public cut-off
  :func:`~dppca_dask.mechanisms.svt_cutoff`; the rows above the chosen θ are dropped and the step's Gaussian noise
  has std ``m·θ``. If no grid point passes, the largest grid point (c³√L, the worst case) is used. Two passes per
  step (the histogram, then the filtered sums).

Every release is accounted: ``k·(R+1)`` Gaussian releases of multiplier m, plus as many AboveThreshold steps of
``epsilon_svt`` for the adaptive form, composed by the PLD accountant; m is the smallest multiplier meeting the
target (bisection on the accountant's ε).
"""

from __future__ import annotations

import math
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any, cast

import numpy as np

from dppca_dask.errors import InvalidParameterError
from dppca_dask.kernels.power import clip_factors
from dppca_dask.methods.tensor.power import check_counts, power_run, run_on_source

__all__ = ["RowMomentResult", "ScoreHistogram", "FilteredMoment", "private_moment_power_method", "score_grid"]

FILTERINGS = ("adaptive", "fixed")


def score_grid(row_norm_bound: float, n_restarts: int, *, per_octave: int = 2, octaves: int = 24) -> np.ndarray:
    """Public thresholds, ascending, ending at the worst-case score ``c³√L``."""
    top = row_norm_bound**3 * math.sqrt(n_restarts)
    return top * 2.0 ** (-np.arange(per_octave * octaves, -1, -1) / per_octave)


# ------------------------------------------------------------------------------------------ kernels (pure numpy)
def _scores(block: Any, norms: np.ndarray, u: np.ndarray, row_norm_bound: float) -> tuple[np.ndarray, np.ndarray]:
    factors = clip_factors(norms, row_norm_bound)
    p = np.asarray(block @ u, dtype=np.float64) * factors[:, None]
    scores = norms * factors * np.linalg.norm(p * p, axis=1)
    return p, scores


def score_histogram(block: Any, norms: np.ndarray, u: np.ndarray, *, row_norm_bound: float,
                    grid: np.ndarray) -> np.ndarray:
    """``F_j``: rows whose score exceeds ``grid[j]``."""
    _, scores = _scores(block, norms, u, row_norm_bound)
    return (scores[:, None] > grid[None, :]).sum(axis=0).astype(np.float64)


def filtered_moment(block: Any, norms: np.ndarray, u: np.ndarray, *, row_norm_bound: float,
                    threshold: float) -> tuple[np.ndarray, np.ndarray]:
    """``(Σ (xᵀU)∘² x, Σ (xᵀU)∘³)`` over the clipped rows whose score is at most ``threshold``."""
    factors = clip_factors(norms, row_norm_bound)
    p, scores = _scores(block, norms, u, row_norm_bound)
    keep = (scores <= threshold).astype(np.float64)
    square = p * p * keep[:, None]
    vector = np.asarray(block.T @ (square * factors[:, None]), dtype=np.float64)
    return vector, (square * p).sum(axis=0)


# -------------------------------------------------------------------------------------------- requests
@dataclass(frozen=True)
class ScoreHistogram:
    """Counts of rows whose score exceeds each grid point, for the iterate ``u``."""

    u: np.ndarray
    row_norm_bound: float
    grid: np.ndarray


@dataclass(frozen=True)
class FilteredMoment:
    """Moment sums over rows of score at most ``threshold`` (``inf``: all rows, clipped)."""

    u: np.ndarray
    row_norm_bound: float
    threshold: float


def _histogram_task(item: Any, u: np.ndarray, *, row_norm_bound: float, grid: np.ndarray) -> np.ndarray:
    from dppca_dask.coordinator.driver import load_partition

    part = load_partition(item)
    return score_histogram(part.block, part.norms, u, row_norm_bound=row_norm_bound, grid=grid)


def _filtered_task(item: Any, u: np.ndarray, *, row_norm_bound: float, threshold: float) -> tuple[np.ndarray, ...]:
    from dppca_dask.coordinator.driver import load_partition

    part = load_partition(item)
    return filtered_moment(part.block, part.norms, u, row_norm_bound=row_norm_bound, threshold=threshold)


def _register() -> None:
    from dppca_dask.coordinator.driver import StepPlan, register_request
    from dppca_dask.methods.tensor.requests import _sum, _sum_pairs

    register_request(ScoreHistogram, lambda r: StepPlan(
        _histogram_task, {"row_norm_bound": r.row_norm_bound, "grid": r.grid}, r.u, _sum,
        empty=lambda d: np.zeros(len(r.grid))))
    register_request(FilteredMoment, lambda r: StepPlan(
        _filtered_task, {"row_norm_bound": r.row_norm_bound, "threshold": r.threshold}, r.u, _sum_pairs,
        empty=lambda d: (np.zeros((d, r.u.shape[1])), np.zeros(r.u.shape[1]))))


_register()


# ------------------------------------------------------------------------------------------ calibration
def calibrate_rows(*, epsilon: float, delta: float, n_steps: int, epsilon_svt: float | None) -> float:
    """Gaussian multiplier m of the ``n_steps`` releases.

    Fixed filtering: the exact composition of ``n_steps`` Gaussians to (ε, δ). Adaptive: the AboveThreshold steps
    are pure ``epsilon_svt``-DP each and compose (basic composition) to ``n_steps·epsilon_svt``; the Gaussians get
    ``(ε − n_steps·epsilon_svt, δ)`` exactly. The report's PLD figure is at most ε.
    """
    from dppca_dask.accounting import calibrate_gaussian
    from dppca_dask.errors import CalibrationError

    rest = epsilon if epsilon_svt is None else epsilon - n_steps * epsilon_svt
    if rest <= 0:
        raise CalibrationError(
            f"the {n_steps} AboveThreshold steps of epsilon_svt={epsilon_svt} spend all of epsilon={epsilon}; "
            "lower svt_share"
        )
    return calibrate_gaussian(epsilon=rest, delta=delta, count=n_steps)


@dataclass(frozen=True)
class RowMomentResult:
    """Released eigenpairs of the row-level private tensor power method."""

    eigenvalues: np.ndarray
    """λ̂ in the scale of sums over rows (Σ x^{⊗3})."""
    components: np.ndarray
    thresholds: np.ndarray
    """The released θ of each step (k × (R+1)); the worst case for ``filtering="fixed"``."""
    privacy: Any
    noise_multiplier: float

    def _repr_facts(self) -> dict[str, Any]:
        k, d = np.asarray(self.components).shape
        return {"shape": f"{k} eigenpairs in dimension {d}"}

    def __repr__(self) -> str:
        from dppca_dask._repr import short_repr

        return short_repr(self, **self._repr_facts())

    def _repr_html_(self) -> str:
        from dppca_dask._repr import short_repr_html

        return short_repr_html(self, **self._repr_facts())


def private_moment_power_method(
    data: Any,
    *,
    n_components: int,
    epsilon: float,
    delta: float,
    row_norm_bound: float = 1.0,
    filtering: str = "adaptive",
    svt_share: float = 0.1,
    beta: float = 0.05,
    n_restarts: int = 4,
    n_iter: int = 5,
    client: Any = "local",
    persist: bool | None = None,
    seed: int | None = None,
    noise: Any = None,
) -> RowMomentResult:
    """(ε, δ)-DP eigenpairs of ``Σ x^{⊗3}`` under add/remove one row (rows clipped to ``row_norm_bound``).

    Beyond seed 002 (whose unit is one tensor entry). ``svt_share`` is the share of ε given to the
    AboveThreshold steps (``epsilon_svt = svt_share·ε/(k(R+1))`` each), ``beta`` sets the public cut-off.

    Raises
    ------
    InvalidParameterError
        For a bad filtering, bound, share or budget, before any data is read.
    """
    from dppca_dask import accounting
    from dppca_dask.coordinator import as_source
    from dppca_dask.mechanisms import NoiseSource, above_threshold, gaussian_mechanism, svt_cutoff

    source = as_source(data)
    dim = source.n_cols
    check_counts(n_components, n_restarts, n_iter, dim)
    if filtering not in FILTERINGS:
        raise InvalidParameterError(f"filtering must be 'adaptive' or 'fixed'; got {filtering!r}")
    if not (math.isfinite(row_norm_bound) and row_norm_bound > 0):
        raise InvalidParameterError(f"row_norm_bound must be finite and > 0; got {row_norm_bound}")
    if not 0 < svt_share < 1:
        raise InvalidParameterError(f"svt_share must be in (0, 1); got {svt_share}")
    if not (math.isfinite(epsilon) and epsilon > 0) or not 0 < delta < 1:
        raise InvalidParameterError(f"epsilon must be > 0 and delta in (0, 1); got {epsilon}, {delta}")
    n_steps = n_components * (n_iter + 1)
    epsilon_svt = svt_share * epsilon / n_steps if filtering == "adaptive" else None
    multiplier = calibrate_rows(epsilon=epsilon, delta=delta, n_steps=n_steps, epsilon_svt=epsilon_svt)
    grid = score_grid(row_norm_bound, n_restarts)
    cutoff = svt_cutoff(epsilon_svt, beta) if epsilon_svt is not None else 0.0
    if noise is not None and seed is not None:
        raise InvalidParameterError("give either seed or noise, not both")
    if noise is None:
        noise = NoiseSource.from_entropy() if seed is None else NoiseSource.from_seed(seed)
    events: list[Any] = []
    thresholds: list[float] = []

    def threshold_for(u: np.ndarray, key: str) -> Generator[Any, Any, float]:
        if filtering == "fixed":
            return float(grid[-1])
        counts = yield ScoreHistogram(u, row_norm_bound, grid)
        chosen = above_threshold(counts, cutoff=cutoff, epsilon=cast(float, epsilon_svt), noise=noise,
                                 release=f"{key}/svt")
        events.append(chosen.event)
        return float(grid[-1] if chosen.index is None else grid[chosen.index])

    def run() -> Generator[Any, Any, Any]:
        state: dict[str, Any] = {}

        def query(u: np.ndarray, i: int, t: int) -> Any:
            state["key"] = f"rows/component-{i}/iter-{t}"
            return u

        class _Releaser:
            def start(self, component: int, dim_: int, n_restarts_: int) -> np.ndarray:
                from dppca_dask.mechanisms.secret import secret_gaussian

                return secret_gaussian(noise, (dim_, n_restarts_), release=f"rows/component-{component}/start")

            def vector(self, component: int, step: int, exact: np.ndarray, u: np.ndarray) -> np.ndarray:
                noisy, event = gaussian_mechanism(exact, l2_sensitivity=state["theta"], noise_multiplier=multiplier,
                                                  noise=noise, release=state["key"])
                events.append(event)
                return np.asarray(noisy)

            def scalar(self, component: int, exact: np.ndarray, u: np.ndarray) -> np.ndarray:
                noisy, event = gaussian_mechanism(exact, l2_sensitivity=state["theta"], noise_multiplier=multiplier,
                                                  noise=noise, release=f"rows/component-{component}/eigenvalue")
                events.append(event)
                return np.asarray(noisy)

        engine = power_run(query=query, answer=lambda agg, u: (agg[0], agg[1]), dim=dim, n_components=n_components,
                           n_restarts=n_restarts, n_iter=n_iter, start=lambda i: np.zeros(0), releaser=_Releaser())
        u = next(engine)
        try:
            while True:
                theta = yield from threshold_for(u, state["key"])
                state["theta"] = theta
                thresholds.append(theta)
                aggregate = yield FilteredMoment(u, row_norm_bound, theta)
                u = engine.send(aggregate)
        except StopIteration as stop:
            return stop.value

    found = run_on_source(source, client, run(), persist)
    report = accounting.build_report(events, target_epsilon=epsilon, target_delta=delta,
                                     neighbouring=accounting.ADD_REMOVE_ROW, private=bool(noise.private))
    return RowMomentResult(found.eigenvalues, found.components,
                           np.asarray(thresholds).reshape(n_components, n_iter + 1), report, multiplier)
