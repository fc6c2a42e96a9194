"""Block adaptive private power iteration: k components in one block, optionally centred, with explained variance.

The sequential version (:mod:`dppca_dask.algorithms.adaptive_power`) computes k components by k runs of T
iterations each, so it pays k·T pairs of releases. This version carries one orthonormal d×k iterate ``X`` and pays
T pairs whatever k:

1. (``center="private"``) one Gaussian release of ``(Σ a'/c, n)`` gives the mean ``μ`` of the rows clipped to c
   (:func:`~dppca_dask.mechanisms.centred.private_mean`), projected onto the ball of radius c (post-processing:
   the true mean of rows of norm ≤ c lies in it); a user-given mean is public and used as is;
2. a random start ``X₀`` (pure noise, orthonormalised);
3. for t = 1..T: each row is clipped to c (``a' = min(1, c/‖a‖)·a``) and centred (``ã = a' − μ``, computed
   implicitly: the partition stays sparse), and scored ``s(a) = ‖ã‖·‖X ᵀã‖₂``; an AboveThreshold step on the
   counts of rows whose score exceeds each public grid value θ_j picks θ; one Gaussian release of
   ``Y = Σ_{s ≤ θ} ã(ãᵀX) + N(0, (m·θ)²)`` (every entry of the d×k matrix); ``X = qr(Y)``;
4. the components are the left singular vectors of the last release ``Y`` (ordered by its singular values: a
   post-processing of released values that orders the subspace);
5. (optional) one Gaussian release of ``(Σ(ãᵀv_j)², Σ‖ã‖², n)`` gives the explained variance, the singular
   values and the ratios against the private total variance
   (:func:`~dppca_dask.mechanisms.centred.private_variances`).

Without centring, ``ã = a'`` and a block of k = 1 is the sequential version's iteration.

Sensitivity of step 3 (add/remove one row b, with ``X`` and ``μ`` fixed: they are released or public). The rows of
the other individuals do not move: the centre is a released value, not a function of the current dataset, so
their centred rows and scores are identical on both neighbours. The released matrix therefore moves by b's
contribution alone: zero if b is filtered (``s(b) > θ``), else ``b̃(b̃ᵀX)``, whose Frobenius norm is
``‖b̃‖·‖X ᵀb̃‖₂ = s(b) ≤ θ`` (the Frobenius norm of an outer product ``uvᵀ`` is ``‖u‖·‖v‖``). So the L2
sensitivity of the d·k released entries is θ, and one Gaussian mechanism with std ``m·θ`` is ``GaussianDpEvent(m)``
— the same event as one release of the sequential version. The AboveThreshold step is that of the sequential
version (counts of filtered rows, monotone, sensitivity 1) with the same second-pass accounting
(:func:`~dppca_dask.algorithms.adaptive_power.pass_row_budget`).

Centring changes the range of the scores, not the argument: a centred row has norm ``‖a' − μ‖ ≤ ‖a'‖ + ‖μ‖ ≤
c + r`` with the public radius ``r`` (``r = c`` for the private mean, projected onto the ball of radius c;
``r = ‖μ‖`` for a given mean; 0 without centring), so scores lie in ``[0, (c + r)²]`` and the public grid must
start at ``(c + r)²`` or above (checked before any release), and the variance release has sensitivity scaled by
``(c + r)²``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dppca_dask.algorithms.adaptive_power import DEFAULT_PASS_DELTA, pass_row_budget, threshold_index
from dppca_dask.algorithms.requests import AlgorithmRun
from dppca_dask.diagnostics import block_noise_to_signal, diagnostics, mean_noise_to_signal, top_singular_values
from dppca_dask.errors import InvalidParameterError
from dppca_dask.kernels import ThresholdGrid
from dppca_dask.kernels import block as B
from dppca_dask.mechanisms import NoiseSource, gaussian_mechanism, svt_scales
from dppca_dask.mechanisms.centred import ExplainedVariance, private_mean, private_variances
from dppca_dask.storage.validate import safe_norm

__all__ = [
    "BlockFilteredSum",
    "BlockPowerOutput",
    "BlockPowerState",
    "BlockPowerStep",
    "CentredGramMatrix",
    "AutoBound",
    "MeanStep",
    "NormCounts",
    "VarianceStep",
    "CentredReleases",
    "block_power_run",
    "block_release_key",
    "centred_bound",
    "check_center",
    "ordered_basis",
    "plan_centred_releases",
    "release_explained_variance",
    "release_clipped_fraction",
    "sort_by_variance",
    "release_private_mean",
    "release_row_norm_bound",
]


def block_release_key(iteration: int, what: str) -> str:
    """The unique key of one noisy release of a block run."""
    return f"block/iter-{iteration}/{what}"


# ------------------------------------------------------------------------------------------------ requests
@dataclass(frozen=True)
class BlockPowerStep:
    """One-pass block aggregate (:func:`dppca_dask.kernels.block.block_partial`) for the d×k iterate ``x``."""

    x: np.ndarray
    row_norm_bound: float
    grid: ThresholdGrid
    top_m: int
    mean: np.ndarray | None = None


@dataclass(frozen=True)
class BlockFilteredSum:
    """Exact ``Σ ã'(ã'ᵀX)`` over the rows of bin in ``(cuts[p], index]`` of each partition in ``cuts``."""

    x: np.ndarray
    row_norm_bound: float
    grid: ThresholdGrid
    index: int
    cuts: Mapping[int, int]
    mean: np.ndarray | None = None


@dataclass(frozen=True)
class MeanStep:
    """``Σ a'`` over rows clipped to ``row_norm_bound`` and the row count (the private mean's exact inputs)."""

    row_norm_bound: float


@dataclass(frozen=True)
class NormCounts:
    """Rows of norm ≤ each public candidate bound (ascending), and the number of rows."""

    candidates: np.ndarray


@dataclass(frozen=True)
class AutoBound:
    """``row_norm_bound="auto"``: a private quantile of row norms on a public grid, from its own ε."""

    grid: Any
    """The public :class:`~dppca_dask.mechanisms.quantile.NormGrid`."""
    quantile: float
    epsilon: float


@dataclass(frozen=True)
class VarianceStep:
    """``Σ(ã'ᵀv_j)²``, ``Σ‖ã'‖²`` and the row count for the released components ``components`` (k×d)."""

    components: np.ndarray
    row_norm_bound: float
    mean: np.ndarray | None = None


@dataclass(frozen=True)
class CentredGramMatrix:
    """Dense ``Σ ã'ã'ᵀ`` (d×d) of the rows centred at ``mean`` and clipped to ``row_norm_bound``."""

    row_norm_bound: float
    mean: np.ndarray | None = None


def _register_requests() -> None:
    from dppca_dask.coordinator.driver import StepPlan, load_partition, _sum, register_request

    def block_task(item: Any, x: np.ndarray, *, row_norm_bound: float, grid: ThresholdGrid, top_m: int,
                   mean: np.ndarray | None) -> B.BlockPartial:
        part = load_partition(item)
        return B.block_partial(part.block, part.norms, x, partition=part.index, row_norm_bound=row_norm_bound,
                               grid=grid, top_m=top_m, mean=mean)

    def filtered_task(item: Any, x: np.ndarray, *, row_norm_bound: float, grid: ThresholdGrid, index: int,
                      cuts: Mapping[int, int], mean: np.ndarray | None) -> np.ndarray:
        part = load_partition(item)
        return B.block_filtered_sum(part.block, part.norms, x, row_norm_bound=row_norm_bound, grid=grid,
                                    index=index, above=cuts[part.index], mean=mean)

    def mean_task(item: Any, *, row_norm_bound: float) -> B.MeanPartial:
        part = load_partition(item)
        return B.mean_partial(part.block, part.norms, row_norm_bound=row_norm_bound)

    def variance_task(item: Any, components: np.ndarray, *, row_norm_bound: float,
                      mean: np.ndarray | None) -> B.VariancePartial:
        part = load_partition(item)
        return B.variance_partial(part.block, part.norms, components, row_norm_bound=row_norm_bound, mean=mean)

    def norms_task(item: Any, *, candidates: np.ndarray) -> B.NormCountsPartial:
        return B.norm_counts(load_partition(item).norms, candidates)

    def gram_task(item: Any, *, row_norm_bound: float, mean: np.ndarray | None) -> np.ndarray:
        part = load_partition(item)
        return B.centred_gram_matrix(part.block, part.norms, row_norm_bound=row_norm_bound, mean=mean)

    def empty_block(grid: ThresholdGrid, k: int) -> Callable[[int], B.BlockPartial]:
        import scipy.sparse as sp

        return lambda d: B.BlockPartial(np.zeros(grid.n_bins, dtype=np.int64), np.zeros((d, k)),
                                        sp.csr_array((grid.n_points, k * d)), np.zeros((grid.n_points, k)), 0.0, {})

    # every partition gets the whole top_m (never a share): all filtered rows may sit in one partition
    register_request(BlockPowerStep, lambda r: StepPlan(
        block_task, {"row_norm_bound": r.row_norm_bound, "grid": r.grid, "top_m": r.top_m, "mean": r.mean}, r.x,
        B.merge_block_partials, empty=empty_block(r.grid, r.x.shape[1]), final=B.gather_block_partials))
    register_request(BlockFilteredSum, lambda r: StepPlan(
        filtered_task, {"row_norm_bound": r.row_norm_bound, "grid": r.grid, "index": r.index,
                        "cuts": dict(r.cuts), "mean": r.mean}, r.x, _sum, partitions=sorted(r.cuts),
        empty=lambda d, k=r.x.shape[1]: np.zeros((d, k))))
    register_request(MeanStep, lambda r: StepPlan(
        mean_task, {"row_norm_bound": r.row_norm_bound}, None, B.merge_mean_partials,
        empty=lambda d: B.MeanPartial(np.zeros(d), 0)))
    register_request(VarianceStep, lambda r: StepPlan(
        variance_task, {"row_norm_bound": r.row_norm_bound, "mean": r.mean}, r.components,
        B.merge_variance_partials, empty=lambda d, k=r.components.shape[0]: B.VariancePartial(np.zeros(k), 0.0, 0)))
    register_request(NormCounts, lambda r: StepPlan(
        norms_task, {"candidates": r.candidates}, None, B.merge_norm_counts,
        empty=lambda d, j=r.candidates.shape[0]: B.NormCountsPartial(np.zeros(j, dtype=np.int64), 0)))
    register_request(CentredGramMatrix, lambda r: StepPlan(
        gram_task, {"row_norm_bound": r.row_norm_bound, "mean": r.mean}, None, _sum,
        empty=lambda d: np.zeros((d, d))))


_register_requests()


# ------------------------------------------------------------------------------------------------ shared releases
def check_center(center: str | np.ndarray | None, n_cols: int, mean_multiplier: float | None) -> np.ndarray | None:
    """Validate a run's ``center`` before any release; return the given (public) mean, or None."""
    if isinstance(center, str):
        if center != "private":
            raise InvalidParameterError(f"center must be None, 'private' or a mean vector; got {center!r}")
        if mean_multiplier is None:
            raise InvalidParameterError("center='private' needs mean_multiplier (the mean's noise multiplier)")
        return None
    if center is None:
        return None
    mean = np.array(center, dtype=np.float64)
    if mean.shape != (n_cols,) or not np.all(np.isfinite(mean)):
        raise InvalidParameterError(
            f"a given mean must be a finite vector of length {n_cols}; got shape {mean.shape}"
        )
    return mean


def release_row_norm_bound(auto: AutoBound, noise: NoiseSource) -> Generator[Any, Any, tuple[float, Any]]:
    """Release the bound c of ``row_norm_bound="auto"``: one pass of :class:`NormCounts`, then
    :func:`~dppca_dask.mechanisms.quantile.private_quantile` (``EpsilonDeltaDpEvent(auto.epsilon, 0)``)."""
    from dppca_dask.mechanisms.quantile import private_quantile

    counted = yield NormCounts(candidates=auto.grid.values)
    return private_quantile(counted.counts, counted.count, grid=auto.grid, quantile=auto.quantile,
                            epsilon=auto.epsilon, noise=noise)


def release_clipped_fraction(row_norm_bound: float, *, clipped_multiplier: float,
                             noise: NoiseSource) -> Generator[Any, Any, tuple[float, Any]]:
    """Release the fraction of rows the public bound c clips: one pass of :class:`NormCounts` at c, then
    :func:`~dppca_dask.mechanisms.centred.private_clipped_fraction` (``GaussianDpEvent(clipped_multiplier)``)."""
    from dppca_dask.mechanisms.centred import private_clipped_fraction

    counted = yield NormCounts(candidates=np.array([float(row_norm_bound)]))
    count = int(counted.count)
    return private_clipped_fraction(count - int(counted.counts[0]), count, noise_multiplier=clipped_multiplier,
                                    noise=noise)


def release_private_mean(row_norm_bound: float, *, mean_multiplier: float,
                         noise: NoiseSource) -> Generator[Any, Any, tuple[np.ndarray, float, Any]]:
    """Release the centre of ``center="private"``: one pass of :class:`MeanStep`, then
    :func:`~dppca_dask.mechanisms.centred.private_mean` (the mean projected onto the ball of radius c,
    ``GaussianDpEvent(mean_multiplier)``); returns the mean, the released count and the event."""
    totals = yield MeanStep(row_norm_bound=row_norm_bound)
    return private_mean(totals.total, totals.count, row_norm_bound=row_norm_bound,
                        noise_multiplier=mean_multiplier, noise=noise, release="mean")


def release_explained_variance(components: np.ndarray, row_norm_bound: float, mean: np.ndarray | None, *,
                               centred_row_bound: float, variance_multiplier: float,
                               noise: NoiseSource) -> Generator[Any, Any, tuple[ExplainedVariance, Any]]:
    """Release the explained variance of the released ``components`` (k×d) for rows clipped to ``row_norm_bound``
    and centred at the released or public ``mean``: one pass of :class:`VarianceStep`, then
    :func:`~dppca_dask.mechanisms.centred.private_variances` with the public bound ``centred_row_bound`` (c + r,
    :func:`centred_bound` of the run's ``center``) on the centred rows' norms
    (``GaussianDpEvent(variance_multiplier)``)."""
    totals = yield VarianceStep(components=components, row_norm_bound=row_norm_bound, mean=mean)
    return private_variances(totals.projected, totals.total, totals.count, row_norm_bound=centred_row_bound,
                             noise_multiplier=variance_multiplier, noise=noise, release="explained-variance")


# ------------------------------------------------------------------------------------------------ the run
#: The stages of a block run, in order: each :class:`BlockPowerState` says which release it follows.
BLOCK_STAGES = ("row-norm-bound", "clipped-fraction", "mean", "iteration", "explained-variance")


def _array_json(value: np.ndarray | None) -> Any:
    return None if value is None else np.asarray(value, dtype=np.float64).tolist()


def _array_from(value: Any) -> np.ndarray | None:
    return None if value is None else np.asarray(value, dtype=np.float64)


@dataclass(frozen=True)
class BlockPowerState:
    """Everything a block run has released so far: enough to resume it without drawing any released noise again.

    Every field is a differentially private output (the released bound, mean, count, iterates, thresholds and
    variances) or a public counter, so the state may be written to disk as a checkpoint. A state follows every
    release (``stage``): the row-norm quantile, the private mean, each iteration's AboveThreshold step
    (``pending_index`` set) and Gaussian step, and the explained variance.
    """

    iteration: int
    """Iterations released (both steps)."""
    x: np.ndarray | None
    """The current released orthonormal iterate (d×width); None before the start is drawn."""
    thresholds: tuple[tuple[float, ...], ...] = ()
    """Released θ (one tuple: the block has one threshold per iteration)."""
    pending_index: int | None = None
    """The released threshold index of iteration ``iteration`` before its Gaussian step; None otherwise."""
    mean: np.ndarray | None = None
    """The released (or given) centre."""
    stage: str = "iteration"
    """The release this state follows (one of :data:`BLOCK_STAGES`)."""
    released: np.ndarray | None = None
    """The last Gaussian release ``Y`` (d×width), whose singular vectors order the components; None before."""
    row_norm_bound: float | None = None
    """The released bound c (``row_norm_bound="auto"``); None otherwise or before its release."""
    mean_count: float | None = None
    """The released row count of the private mean."""
    variance: ExplainedVariance | None = None
    """The released explained variance (after the last release)."""
    clipped_fraction: float | None = None
    """The released fraction of rows the public bound clips; None when not released (yet)."""

    def released_iterations(self, n_iter: int) -> int:
        """Iterations released before the interruption (for reports)."""
        return self.iteration

    def to_json(self) -> dict[str, Any]:
        variance = None
        if self.variance is not None:
            v = self.variance
            variance = {"explained_variance": _array_json(v.explained_variance),
                        "singular_values": _array_json(v.singular_values),
                        "explained_variance_ratio": _array_json(v.explained_variance_ratio),
                        "total_variance": float(v.total_variance), "count": float(v.count)}
        return {
            "kind": "block",
            "stage": self.stage,
            "iteration": self.iteration,
            "x": _array_json(self.x),
            "thresholds": [list(t) for t in self.thresholds],
            "pending_index": self.pending_index,
            "mean": _array_json(self.mean),
            "released": _array_json(self.released),
            "row_norm_bound": self.row_norm_bound,
            "mean_count": self.mean_count,
            "variance": variance,
            "clipped_fraction": self.clipped_fraction,
        }

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> BlockPowerState:
        stage = str(obj.get("stage", "iteration"))
        if obj.get("kind") != "block" or stage not in BLOCK_STAGES:
            raise InvalidParameterError(
                f"not the checkpoint of a block run (kind {obj.get('kind')!r}, stage {stage!r}); resume a block run "
                "with the state it wrote"
            )
        pending = obj.get("pending_index")
        v = obj.get("variance")
        variance = None
        if v is not None:
            variance = ExplainedVariance(
                explained_variance=np.asarray(v["explained_variance"], dtype=np.float64),
                singular_values=np.asarray(v["singular_values"], dtype=np.float64),
                explained_variance_ratio=np.asarray(v["explained_variance_ratio"], dtype=np.float64),
                total_variance=float(v["total_variance"]), count=float(v["count"]))
        x = _array_from(obj.get("x"))
        released = _array_from(obj.get("released"))
        bound = obj.get("row_norm_bound")
        count = obj.get("mean_count")
        clipped = obj.get("clipped_fraction")
        return cls(
            iteration=int(obj["iteration"]),
            x=None if x is None else np.atleast_2d(x.T).T,
            thresholds=tuple(tuple(float(t) for t in row) for row in obj.get("thresholds", ())),
            pending_index=None if pending is None else int(pending),
            mean=_array_from(obj.get("mean")),
            stage=stage,
            released=None if released is None else np.atleast_2d(released.T).T,
            row_norm_bound=None if bound is None else float(bound),
            mean_count=None if count is None else float(count),
            variance=variance,
            clipped_fraction=None if clipped is None else float(clipped),
        )


@dataclass(frozen=True)
class BlockPowerOutput:
    """What a block run releases."""

    components: np.ndarray
    """k×d orthonormal rows, ordered by the singular values of the last release."""
    thresholds: np.ndarray
    """1×T released thresholds."""
    mean: np.ndarray | None = None
    """The released (or given) centre; None without centring."""
    mean_count: float | None = None
    """The released row count of the private mean."""
    variance: ExplainedVariance | None = None
    events: tuple[Any, ...] = field(default=())
    row_norm_bound: float | None = None
    """The bound c used (the released one with ``row_norm_bound="auto"``)."""
    basis: np.ndarray | None = None
    """All ``width`` left singular vectors of the last release (width×d; the components are its first k rows)."""
    mechanism: str | None = None
    """The mechanism that released the components, when the run chose it (``mechanism="auto"``)."""
    decision: dict[str, Any] | None = None
    """The released values behind that choice, and the rule (``mechanism="auto"``)."""
    diagnostics: Any = None
    """The release's :class:`~dppca_dask.diagnostics.Diagnostics`, per component (in the order of ``components``)."""
    signal: np.ndarray | None = None
    """The released size of each component (in the order of ``components``): the singular value of the last power
    release, or the eigenvalue of the noisy Gram matrix (for the diagnostics of a private mean's artefact)."""
    clipped_fraction: float | None = None
    """The released fraction of rows the public bound clipped; None when not released (``row_norm_bound="auto"``)."""


def _orthonormal(y: np.ndarray) -> np.ndarray:
    peak = float(np.max(np.abs(y))) if y.size else 0.0
    if not math.isfinite(peak) or peak == 0.0:
        raise InvalidParameterError(
            f"the iterate is not a finite non-zero matrix (largest entry {peak}); this cannot happen with Gaussian "
            "noise and finite data: check the data for non-finite values"
        )
    q, r = np.linalg.qr(y / peak)
    return q * np.where(np.diag(r) < 0, -1.0, 1.0)[None, :]  # a unique QR: R's diagonal non-negative


def centred_bound(row_norm_bound: float, center: str | np.ndarray | None) -> float:
    """``c + r``: the public bound on a centred row's norm (``r = c`` for the private mean, ``‖μ‖`` for a given one)."""
    if center is None:
        return float(row_norm_bound)
    if isinstance(center, str):
        return 2.0 * float(row_norm_bound)
    return float(row_norm_bound) + float(np.linalg.norm(np.asarray(center, dtype=np.float64)))


def ordered_basis(y: np.ndarray) -> np.ndarray:
    """Left singular vectors of ``y`` (d×k), ordered by singular value, as k×d rows."""
    peak = float(np.max(np.abs(y)))
    u, _s, _vt = np.linalg.svd(y / peak, full_matrices=False)
    return u.T


def _clipped_once(reused: float | None, row_norm_bound: float, clipped_multiplier: float,
                  noise: NoiseSource) -> Generator[Any, Any, tuple[float, Any]]:
    """The clipped fraction and its event: the released value of an interrupted run (no draw), else a release."""
    if reused is not None:
        from dp_accounting import GaussianDpEvent

        return float(reused), GaussianDpEvent(clipped_multiplier)
    return (yield from release_clipped_fraction(row_norm_bound, clipped_multiplier=clipped_multiplier, noise=noise))


def _check_block_parameters(
    *, n_cols: int, n_iter: int, n_components: int, oversample: int, center: str | np.ndarray | None,
    mean_multiplier: float | None, row_norm_bound: float | AutoBound, grid: ThresholdGrid,
) -> tuple[int, np.ndarray | None, AutoBound | None, float, ThresholdGrid, float]:
    """:func:`block_power_run`'s public parameters checked: returns (the block's width, the given mean, the
    automatic bound, the bound c (the largest candidate while an automatic one is not released yet), the threshold
    grid for it, the centred rows' bound c + r)."""
    if isinstance(n_iter, bool) or not isinstance(n_iter, (int, np.integer)) or n_iter < 1:
        raise InvalidParameterError(f"n_iter must be an integer >= 1; got {n_iter!r}")
    if not 1 <= n_components <= n_cols:
        raise InvalidParameterError(f"n_components must be in [1, {n_cols}]; got {n_components}")
    if isinstance(oversample, bool) or not isinstance(oversample, (int, np.integer)) or oversample < 0:
        raise InvalidParameterError(f"oversample must be an integer >= 0; got {oversample!r}")
    width = min(n_cols, n_components + int(oversample))
    mean = check_center(center, n_cols, mean_multiplier)
    auto = row_norm_bound if isinstance(row_norm_bound, AutoBound) else None
    if auto is not None:
        row_norm_bound = float(auto.grid.values[-1])  # validated below as the largest candidate; replaced by the release
        grid = ThresholdGrid.for_bound(centred_bound(row_norm_bound, center), per_octave=grid.per_octave,
                                       octaves=(grid.n_points - 1) // grid.per_octave)
    assert not isinstance(row_norm_bound, AutoBound)
    bound = centred_bound(row_norm_bound, center)
    if grid.top < bound * bound * (1.0 - 1e-12):
        raise InvalidParameterError(
            f"the grid's top {grid.top:g} is below (c + r)² = {bound * bound:g} for the centred rows' bound "
            f"(c = {row_norm_bound:g}, r = {bound - row_norm_bound:g}); build the grid with "
            "ThresholdGrid.for_bound(centred_bound(c, center))"
        )
    return width, mean, auto, row_norm_bound, grid, bound


def _resumed_block(resume: BlockPowerState | None, *, n_iter: int, n_cols: int, width: int
                   ) -> tuple[int, int | None, np.ndarray | None, np.ndarray | None, list[float]]:
    """Where a block run starts: from scratch, or from the released state of an interrupted run (checked against
    this run). Returns (the first iteration, the index an AboveThreshold step released just before the
    interruption, the iterate, the last Gaussian release, the released thresholds)."""
    if resume is None:
        return 0, None, None, None, []
    first, pending, x, noisy = resume.iteration, resume.pending_index, resume.x, resume.released
    if not 0 <= first <= n_iter or (x is None and (first > 0 or pending is not None)):
        raise InvalidParameterError(
            f"resume.iteration must be in [0, {n_iter}] with a released iterate; got {first}; resume with the "
            "state the interrupted run wrote"
        )
    if x is not None and x.shape != (n_cols, width):
        raise InvalidParameterError(
            f"resume.x must have shape ({n_cols}, {width}) for this run; got {x.shape}; resume with the same "
            "parameters as the interrupted run"
        )
    if first > 0 and (noisy is None or noisy.shape != (n_cols, width)):
        raise InvalidParameterError(
            "resume.released must hold the last Gaussian release of the interrupted run; resume with the state "
            "it wrote"
        )
    thresholds = list(resume.thresholds[0]) if resume.thresholds else []
    if len(thresholds) != first:
        raise InvalidParameterError(
            f"resume.thresholds must hold one released threshold per released iteration ({first}); got "
            f"{len(thresholds)}"
        )
    return first, pending, x, noisy, thresholds


def _block_start(start: np.ndarray | None, noise: NoiseSource, *, shape: tuple[int, int], release: str) -> np.ndarray:
    """The first iterate: the given start, or a Gaussian block drawn from ``noise`` (pure noise), orthonormalised."""
    if start is None:
        with noise.release(release, data_independent=True):  # the start is pure noise
            start = noise.gaussian(1.0, size=shape)
    return _orthonormal(np.asarray(start, dtype=np.float64).reshape(shape))


def _block_noise_to_signal(noisy: np.ndarray, thresholds: list[float], *, n_components: int,
                           noise_multiplier: float, mean_multiplier: float | None, row_norm_bound: float,
                           mean_count: float | None) -> tuple[np.ndarray, np.ndarray]:
    """The diagnostics' noise-to-signal ratios of the components and the released sizes λ̂_j (from released values
    only): the last release's noise (std m·θ_T) against the block, and the private mean's artefact when the rows
    were centred on a released mean (``mean_multiplier``)."""
    noise_to_signal = (block_noise_to_signal(noisy, sigma=noise_multiplier * thresholds[-1],
                                             n_components=n_components)
                       if thresholds else np.ones(n_components))  # noise of the last release: std m·θ_T
    signal = top_singular_values(noisy, n_components)  # released sizes λ̂_j, for the mean's artefact
    if mean_multiplier is not None:
        noise_to_signal = np.maximum(noise_to_signal, mean_noise_to_signal(
            signal, row_norm_bound=row_norm_bound, mean_multiplier=mean_multiplier, mean_count=mean_count,
            dim=noisy.shape[0]))
    return noise_to_signal, signal


def _svt_setup(epsilon_svt: float, *, svt_form: str, cutoff: float, n_points: int, n_iter: int, pass_delta: float,
               top_m: int | None) -> tuple[float, float, int, Any]:
    """The block run's AboveThreshold steps: (threshold scale, query scale, rows returned per partition, the
    event of each step with the pass it may cause)."""
    from dppca_dask.accounting import svt_step_delta
    from dppca_dask.accounting.events import EpsilonDeltaDpEvent

    rho_scale, nu_scale = svt_scales(epsilon_svt, form=svt_form)
    budget = pass_row_budget(cutoff=cutoff, threshold_scale=rho_scale, query_scale=nu_scale, n_queries=n_points,
                             n_releases=n_iter, pass_delta=pass_delta)
    top_m = budget if top_m is None else max(int(top_m), budget)
    svt_step = EpsilonDeltaDpEvent(float(epsilon_svt), svt_step_delta(epsilon_svt, pass_delta, n_iter))
    return rho_scale, nu_scale, top_m, svt_step


def _resumed_events(first: int, pending: int | None, *, svt_step: Any, noise_multiplier: float) -> list[Any]:
    """The events of the iterations an interrupted run released (and of its AboveThreshold step released just
    before the interruption, whose index is reused, never drawn again)."""
    from dp_accounting import GaussianDpEvent

    events: list[Any] = [svt_step, GaussianDpEvent(noise_multiplier)] * first if first else []
    if pending is not None:
        events.append(svt_step)
    return events


def _row_norm_bound_once(auto: AutoBound, resume: BlockPowerState | None, noise: NoiseSource
                         ) -> Generator[Any, Any, tuple[float, Any, bool]]:
    """The automatic bound c: released now, or the one an interrupted run released. Returns (c, its event,
    whether it was released before)."""
    from dppca_dask.accounting.events import EpsilonDeltaDpEvent

    if resume is not None and resume.row_norm_bound is not None:  # released before the interruption
        return float(resume.row_norm_bound), EpsilonDeltaDpEvent(float(auto.epsilon), 0.0), True
    row_norm_bound, quantile_event = yield from release_row_norm_bound(auto, noise)
    return row_norm_bound, quantile_event, False


def _private_mean_once(resume: BlockPowerState | None, row_norm_bound: float, *, n_cols: int, mean_multiplier: float,
                       noise: NoiseSource) -> Generator[Any, Any, tuple[np.ndarray, Any, Any, bool]]:
    """The private mean: released now, or the one an interrupted run released. Returns (mean, its count, its
    event, whether it was released before)."""
    if resume is not None and resume.mean is not None:  # released before the interruption
        mean = np.asarray(resume.mean, dtype=np.float64)
        if mean.shape != (n_cols,):
            raise InvalidParameterError(f"resume.mean must have length {n_cols}; got shape {mean.shape}")
        from dp_accounting import GaussianDpEvent

        return mean, resume.mean_count, GaussianDpEvent(mean_multiplier), True
    mean, mean_count, mean_event = yield from release_private_mean(
        row_norm_bound, mean_multiplier=mean_multiplier, noise=noise)
    return mean, mean_count, mean_event, False


def _explained_variance_once(resume: BlockPowerState | None, components: np.ndarray, row_norm_bound: float,
                             mean: np.ndarray | None, *, centred_row_bound: float, variance_multiplier: float,
                             noise: NoiseSource) -> Generator[Any, Any, tuple[Any, Any, bool]]:
    """The explained variance: released now, or the one an interrupted run released. Returns (variance, its
    event, whether it was released before)."""
    if resume is not None and resume.variance is not None:  # released before the interruption
        from dp_accounting import GaussianDpEvent

        return resume.variance, GaussianDpEvent(variance_multiplier), True
    variance, variance_event = yield from release_explained_variance(
        components, row_norm_bound, mean, centred_row_bound=centred_row_bound,
        variance_multiplier=variance_multiplier, noise=noise)
    return variance, variance_event, False


def block_power_run(
    *,
    n_cols: int,
    n_iter: int,
    n_components: int,
    row_norm_bound: float | AutoBound,
    epsilon_svt: float,
    noise_multiplier: float,
    cutoff: float,
    grid: ThresholdGrid,
    noise: NoiseSource,
    svt_form: str = "monotone",
    pass_delta: float = DEFAULT_PASS_DELTA,
    top_m: int | None = None,
    center: str | np.ndarray | None = None,
    mean_multiplier: float | None = None,
    variance_multiplier: float | None = None,
    on_release: Callable[[BlockPowerState, tuple[Any, ...]], None] | None = None,
    oversample: int = 0,
    clipped_multiplier: float | None = None,
    resume: BlockPowerState | None = None,
    start: np.ndarray | None = None,
    release_prefix: str = "",
) -> AlgorithmRun[BlockPowerOutput]:
    """Block adaptive power iteration as a generator of requests (see the module docstring).

    Parameters are those of :func:`~dppca_dask.algorithms.adaptive_power.adaptive_power_run` (with T releases
    instead of k·T), and:

    row_norm_bound
        The public bound c, or an :class:`AutoBound`: c is then released first by a private quantile of the row
        norms (:func:`~dppca_dask.mechanisms.quantile.private_quantile`), and ``grid`` is rebuilt for it (its
        resolution kept: a public function of the released c).
    center
        None (no centring), ``"private"`` (a released mean of the rows clipped to c, from one Gaussian release
        with multiplier ``mean_multiplier``) or a public mean (length d) used as is.
    mean_multiplier
        Noise multiplier of the private mean's release (required with ``center="private"``).
    variance_multiplier
        Noise multiplier of the explained variance's release; None: no variance is released.
    clipped_multiplier
        Noise multiplier of the release of the fraction of rows the public bound clips (first, before the mean);
        None: not released (never with an :class:`AutoBound`, which clips about a known share by construction).
    oversample
        Extra columns p of the iterate (public): the block has width ``min(d, k + p)`` and the top k of the last
        release are returned. The sensitivity is θ whatever the width, so the noise per entry does not grow with
        p, while the top components converge at the rate of ``σ_{k+p+1}/σ_k`` instead of ``σ_{k+1}/σ_k``.
    on_release
        Called after every release (the quantile, the mean, each AboveThreshold step, each Gaussian step and the
        explained variance) with a :class:`BlockPowerState` of released values only and the events emitted so far
        (checkpointing, progress).
    resume
        The last state an interrupted run passed to ``on_release``: every release it holds is reused, its events
        are emitted again without drawing any noise (an AboveThreshold step released just before the
        interruption included: ``resume.pending_index``), and the run continues with the next release. With the
        same noise for the remaining releases the result equals an uninterrupted run's.
    start
        A released (or public) d×width iterate to start from instead of a random one (a warm start: the iterate
        of an earlier release is post-processing).
    release_prefix
        Prepended to the keys of the start and the iterations' releases (two block runs under one noise source).

    Notes
    -----
    Privacy contract: add/remove one row. Events, in order: the quantile's ``EpsilonDeltaDpEvent(ε_q, 0)`` (with
    ``AutoBound``), the mean's ``GaussianDpEvent(mean_multiplier)`` (when private), then per iteration ``EpsilonDeltaDpEvent(ε_svt, (1 + e^ε_svt)·δ_pass/T)`` and ``GaussianDpEvent(m)``
    (sensitivity θ: see the module docstring), then the variance's ``GaussianDpEvent(variance_multiplier)``. The
    passes, task names and log lines depend on the data only through released values and the δ_pass event.
    """
    width, mean, auto, row_norm_bound, grid, bound = _check_block_parameters(
        n_cols=n_cols, n_iter=n_iter, n_components=n_components, oversample=oversample, center=center,
        mean_multiplier=mean_multiplier, row_norm_bound=row_norm_bound, grid=grid)
    n_points = grid.n_points
    rho_scale, nu_scale, top_m, svt_step = _svt_setup(epsilon_svt, svt_form=svt_form, cutoff=cutoff, n_points=n_points,
                                                      n_iter=n_iter, pass_delta=pass_delta, top_m=top_m)
    events: list[Any] = []
    mean_count: float | None = None
    clipped: float | None = None  # the released clipped fraction
    variance: ExplainedVariance | None = None
    released: float | None = None  # the released bound (row_norm_bound="auto")
    first, pending, x, noisy, thresholds = _resumed_block(resume, n_iter=n_iter, n_cols=n_cols, width=width)

    def emit(stage: str, iteration: int, pending_index: int | None = None) -> None:
        if on_release is not None:
            on_release(BlockPowerState(
                iteration=iteration, x=x, thresholds=(tuple(thresholds),), pending_index=pending_index, mean=mean,
                stage=stage, released=None if noisy is x else noisy, row_norm_bound=released,
                mean_count=mean_count, variance=variance, clipped_fraction=clipped), tuple(events))

    if auto is not None:
        row_norm_bound, quantile_event, earlier = yield from _row_norm_bound_once(auto, resume, noise)
        released = float(row_norm_bound)
        events.append(quantile_event)
        if not earlier:
            emit("row-norm-bound", 0)
        bound = centred_bound(row_norm_bound, center)
        grid = ThresholdGrid.for_bound(bound, per_octave=grid.per_octave, octaves=(grid.n_points - 1) // grid.per_octave)
    if pending is not None and not 0 <= pending < n_points:
        raise InvalidParameterError(
            f"resume.pending_index must be a grid index in [0, {n_points}); got {pending}; resume with the state the "
            "interrupted run wrote"
        )
    if clipped_multiplier is not None and auto is None:
        reused = None if resume is None else resume.clipped_fraction  # released before an interruption
        clipped, clipped_event = yield from _clipped_once(reused, row_norm_bound, clipped_multiplier, noise)
        events.append(clipped_event)
        if reused is None:
            emit("clipped-fraction", 0)
    if isinstance(center, str):
        assert mean_multiplier is not None
        mean, mean_count, mean_event, earlier = yield from _private_mean_once(
            resume, row_norm_bound, n_cols=n_cols, mean_multiplier=mean_multiplier, noise=noise)
        events.append(mean_event)
        if not earlier:
            emit("mean", 0)
    if x is None:
        x = _block_start(start, noise, shape=(n_cols, width), release=release_prefix + "block/init")
    if noisy is None:
        noisy = x
    events.extend(_resumed_events(first, pending, svt_step=svt_step, noise_multiplier=noise_multiplier))
    for t in range(first, n_iter):
        aggregate = yield BlockPowerStep(x=x, row_norm_bound=row_norm_bound, grid=grid, top_m=top_m, mean=mean)
        if pending is not None:
            index, pending = pending, None
        else:
            index = threshold_index(aggregate, n_points=n_points, cutoff=cutoff, epsilon_svt=epsilon_svt, noise=noise,
                                    release=release_prefix + block_release_key(t, "svt"), svt_form=svt_form,
                                    rho_scale=rho_scale, nu_scale=nu_scale)
            events.append(svt_step)
            emit("iteration", t, index)
        theta = float(grid.thetas[index])
        filtered, incomplete = B.select_block_filtered(aggregate, index, mean)
        product = aggregate.full_sum - filtered
        del aggregate, filtered
        if incomplete:  # only on the δ_pass event
            product = product - (yield BlockFilteredSum(x=x, row_norm_bound=row_norm_bound, grid=grid, index=index,
                                                        cuts=incomplete, mean=mean))
        noisy, gauss_event = gaussian_mechanism(product, l2_sensitivity=theta, noise_multiplier=noise_multiplier,
                                                noise=noise, release=release_prefix + block_release_key(t, "gaussian"))
        del product
        events.append(gauss_event)
        x = _orthonormal(noisy)
        thresholds.append(theta)
        emit("iteration", t + 1)
    basis = ordered_basis(noisy)
    components = basis[:n_components]
    noise_to_signal, signal = _block_noise_to_signal(
        noisy, thresholds, n_components=n_components, noise_multiplier=noise_multiplier,
        mean_multiplier=mean_multiplier if isinstance(center, str) else None, row_norm_bound=row_norm_bound,
        mean_count=mean_count)
    if variance_multiplier is not None:
        variance, variance_event, earlier = yield from _explained_variance_once(
            resume, components, row_norm_bound, mean, centred_row_bound=bound,
            variance_multiplier=variance_multiplier, noise=noise)
        events.append(variance_event)
        if not earlier:
            emit("explained-variance", n_iter)
        components, variance, order = sort_by_variance(components, variance)
        noise_to_signal, signal = noise_to_signal[order], signal[order]
    return BlockPowerOutput(components=components, thresholds=np.asarray([thresholds], dtype=np.float64),
                            mean=mean, mean_count=mean_count, variance=variance, events=tuple(events),
                            row_norm_bound=float(row_norm_bound), basis=basis,
                            diagnostics=diagnostics(noise_to_signal), signal=signal,
                            clipped_fraction=clipped)


def sort_by_variance(components: np.ndarray, variance: ExplainedVariance
                     ) -> tuple[np.ndarray, ExplainedVariance, np.ndarray]:
    """Components and their released variances ordered by decreasing released variance (a stable sort: ties keep
    the order of the release that found the components), and the permutation applied (post-processing).

    With :func:`~dppca_dask.mechanisms.centred.private_variances` keeping every ratio in [0, 1] and their sum at
    most 1, the ordered release is feasible: variances, ratios and singular values non-negative and
    non-increasing."""
    order = np.argsort(-np.asarray(variance.explained_variance), kind="stable")
    ordered = dataclasses.replace(variance, explained_variance=variance.explained_variance[order],
                                  singular_values=variance.singular_values[order],
                                  explained_variance_ratio=variance.explained_variance_ratio[order])
    return np.asarray(components)[order], ordered, order


# ------------------------------------------------------------------------------------------------ the planner
#: Public share of the user's (ε, δ) given to the private mean's release (``center="private"``).
DEFAULT_MEAN_SHARE = 0.1
#: Public share of the user's (ε, δ) given to the explained variance's release.
DEFAULT_VARIANCE_SHARE = 0.05
#: Public share of the user's (ε, δ) given to the release of the fraction of rows a fixed ``row_norm_bound`` clips.
DEFAULT_CLIPPED_SHARE = 0.02
#: A released clipped fraction above this warns (:class:`~dppca_dask.errors.ClippingWarning`): more than half of the
#: rows scaled down means the components are those of rescaled rows (docs/guide/clipping.md).
CLIPPED_FRACTION_WARNING = 0.5
#: Public share of the user's ε (no δ) given to the private row-norm quantile (``row_norm_bound="auto"``).
DEFAULT_QUANTILE_SHARE = 0.05
#: The quantile of row norms that ``row_norm_bound="auto"`` aims at: about 10% of the rows are clipped.
DEFAULT_NORM_QUANTILE = 0.9
#: Extra columns of the block (public): the top components then converge at the rate σ_{k+3}/σ_k. On w8a (centred,
#: c = 1, ε = 1, k = 1, T = 5) the median sin² to scikit-learn's top component was 0.019 with 0, 0.0049 with 2,
#: 0.0053 with 4 and 0.0054 with 9 extra columns; with them the block beat k sequential runs for k = 2, 5, 10, 20 on
#: w8a and on a planted rank-20 matrix (benchmarks/bench_utility.py --block). With row_norm_bound="auto" on w8a
#: (c ≈ 4.8, where the top direction already dominates) 2 extra columns cost accuracy at k = 1 (median sin² 0.018
#: against 0.003 without), measured once: benchmarks/bench_centred.py.
DEFAULT_OVERSAMPLE = 2
#: The mechanism's name in the registry.
BLOCK_POWER = "adaptive-power-block"


@dataclass(frozen=True)
class CentredReleases:
    """The releases a centred plan makes beside its main one, calibrated from public shares of the user's (ε, δ):
    the row-norm quantile (``auto_bound``), the private mean (``center="private"``) and the explained variance.

    Built by :func:`plan_centred_releases`, the one place where the block, centred Analyze Gauss and ``auto``
    planners split the budget; each planner gives its main release ``(1 − used_epsilon, 1 − used)`` of (ε, δ).
    """

    auto: AutoBound | None
    """The private bound's grid, quantile and ε; None for a public bound."""
    quantile: float
    """The quantile of row norms the bound aims at (public)."""
    mean_multiplier: float | None
    """The private mean's noise multiplier; None without a private mean."""
    variance_multiplier: float | None
    """The explained variance's noise multiplier; None when the plan releases none of its own."""
    clipped_multiplier: float | None
    """The clipped fraction's noise multiplier; None when the plan does not release it."""
    used: float
    """The share of ε and of δ spent beside the main release (mean, variance and the planner's other shares)."""
    used_epsilon: float
    """``used`` plus the quantile's share of ε (it spends no δ)."""
    center: str
    """``"private"``, ``"given"`` or ``"none"`` (provenance)."""
    shares: dict[str, float]
    """Every share, in the order of the plan's provenance, the main release's last."""

    @property
    def has_releases(self) -> bool:
        """Whether the plan releases anything beside its main release (the quantile, the mean or the variance)."""
        return any(v is not None for v in (self.auto, self.mean_multiplier, self.variance_multiplier,
                                            self.clipped_multiplier))

    def scaled(self, scale: float) -> CentredReleases:
        """The same releases with every noise scale times ``scale``: the mean's and the variance's noise
        multipliers times it, the quantile's ε (its Laplace scale is ∝ 1/ε) over it. The shares are unchanged: they
        fix the releases' relative noise."""
        if scale == 1.0:
            return self
        auto = None if self.auto is None else dataclasses.replace(self.auto, epsilon=self.auto.epsilon / scale)
        return dataclasses.replace(
            self, auto=auto,
            mean_multiplier=None if self.mean_multiplier is None else self.mean_multiplier * scale,
            clipped_multiplier=None if self.clipped_multiplier is None else self.clipped_multiplier * scale,
            variance_multiplier=None if self.variance_multiplier is None else self.variance_multiplier * scale)

    def variance_events(self) -> list[Any]:
        """The explained variance's event (after the main release), or none."""
        from dp_accounting import GaussianDpEvent

        return [] if self.variance_multiplier is None else [GaussianDpEvent(self.variance_multiplier)]

    def planned_events(self) -> list[Any]:
        """The events released before the main one, in order: the quantile's (or the clipped fraction's), then the
        mean's."""
        from dp_accounting import GaussianDpEvent

        from dppca_dask.accounting.events import EpsilonDeltaDpEvent

        planned: list[Any] = []
        if self.auto is not None:
            planned.append(EpsilonDeltaDpEvent(self.auto.epsilon, 0.0))
        if self.clipped_multiplier is not None:
            planned.append(GaussianDpEvent(self.clipped_multiplier))
        if self.mean_multiplier is not None:
            planned.append(GaussianDpEvent(self.mean_multiplier))
        return planned

    def replace_one_head(self, flat: list[Any]) -> list[Any]:
        """The replace-one-row events of the quantile, the clipped fraction and the mean, popped from the front of
        ``flat``.

        Replacing a row moves each quantile utility by at most 100 instead of ``max(a, 100 − a)`` (ε grows by
        ``100/max(a, 100 − a)``), the clipped count by at most 1 with the count fixed (sensitivity 1 instead of √2:
        the noise multiplier times √2), and the mean's scaled sum by at most 2 with the count fixed (sensitivity 2
        instead of √2: the noise multiplier divided by √2).
        """
        from dp_accounting import GaussianDpEvent

        from dppca_dask.accounting.events import EpsilonDeltaDpEvent

        head: list[Any] = []
        if self.auto is not None and flat:
            percent = round(self.quantile * 100)
            head.append(EpsilonDeltaDpEvent(flat.pop(0).epsilon * 100.0 / max(percent, 100 - percent), 0.0))
        if self.clipped_multiplier is not None and flat:
            head.append(GaussianDpEvent(flat.pop(0).noise_multiplier * math.sqrt(2.0)))
        if self.mean_multiplier is not None and flat:
            head.append(GaussianDpEvent(flat.pop(0).noise_multiplier / math.sqrt(2.0)))
        return head

    @property
    def quantile_json(self) -> dict[str, Any] | None:
        """The private bound's provenance (its quantile, ε and grid); None for a public bound."""
        if self.auto is None:
            return None
        return {"quantile": self.quantile, "epsilon": self.auto.epsilon, "grid": self.auto.grid.to_json()}


def plan_centred_releases(
    params: Any,
    *,
    center: str | np.ndarray | None,
    auto_bound: bool,
    quantile: float,
    quantile_share: float,
    mean_share: float,
    explained_variance: bool | None,
    variance_share: float = 0.0,
    norm_grid: Any = None,
    other_shares: Mapping[str, float] | None = None,
    main: str,
    main_label: str,
    clipped_fraction: bool = False,
    clipped_share: float = DEFAULT_CLIPPED_SHARE,
) -> CentredReleases:
    """Split ``params``'s (ε, δ) by public shares and calibrate the releases beside the main one.

    ``mean_share`` of (ε, δ) goes to the private mean (``center="private"``), ``variance_share`` to the explained
    variance (``explained_variance``; None: the plan has no variance release of its own and no such share),
    ``quantile_share`` of ε (no δ) to the row-norm quantile (``auto_bound``), ``clipped_share`` of (ε, δ) to the
    fraction of rows a fixed bound clips (``clipped_fraction``, never with ``auto_bound``), each of
    ``other_shares`` to the planner's own parts; the main release (``main``, provenance keys ``{main}_epsilon`` and ``{main}_delta``) gets
    the rest. The parts compose by basic composition to at most the total. Public values only: nothing here
    depends on the data.
    """
    from dppca_dask import accounting
    from dppca_dask.mechanisms.quantile import NormGrid

    others = dict(other_shares or {})
    with_clipped = bool(clipped_fraction) and not auto_bound
    if with_clipped:
        others = {"clipped_fraction": clipped_share, **others}
    uses_mean = isinstance(center, str)
    with_variance = bool(explained_variance)
    used = (mean_share if uses_mean else 0.0) + (variance_share if with_variance else 0.0)
    for share in others.values():
        used += share
    used_epsilon = used + (quantile_share if auto_bound else 0.0)
    if not (0.0 <= used and used_epsilon < 1.0):
        parts = [*others, "mean", *(["variance"] if explained_variance is not None else []), "quantile"]
        raise InvalidParameterError(
            f"the {', '.join(parts[:-1])} and {parts[-1]} shares must leave budget for {main_label}; got "
            f"{used_epsilon:g} of the total"
        )
    mean_multiplier = (accounting.calibrate_gaussian(epsilon=params.epsilon * mean_share,
                                                     delta=params.delta * mean_share) if uses_mean else None)
    variance_multiplier = (accounting.calibrate_gaussian(epsilon=params.epsilon * variance_share,
                                                         delta=params.delta * variance_share)
                           if with_variance else None)
    clipped_multiplier = (accounting.calibrate_gaussian(epsilon=params.epsilon * clipped_share,
                                                        delta=params.delta * clipped_share) if with_clipped else None)
    auto = None
    if auto_bound:
        auto = AutoBound(grid=norm_grid if norm_grid is not None else NormGrid(), quantile=quantile,
                         epsilon=params.epsilon * quantile_share)
    shares: dict[str, float] = {"row_norm_quantile_epsilon": quantile_share if auto_bound else 0.0,
                                "mean": mean_share if uses_mean else 0.0}
    if explained_variance is not None:
        shares["explained_variance"] = variance_share if with_variance else 0.0
    shares.update(others)
    shares[f"{main}_epsilon"] = 1.0 - used_epsilon
    shares[f"{main}_delta"] = 1.0 - used
    return CentredReleases(
        auto=auto, quantile=quantile, mean_multiplier=mean_multiplier, variance_multiplier=variance_multiplier,
        clipped_multiplier=clipped_multiplier, used=used, used_epsilon=used_epsilon,
        center="private" if uses_mean else ("given" if center is not None else "none"), shares=shares)


def joint_noise_scale(params: Any, events_at: Callable[[float], list[Any]], *, needed: bool) -> float:
    """The common factor on every noise scale of a plan so that all its releases together spend its (ε, δ).

    A plan first calibrates each release to its public share (the parts compose to at most the total by basic
    composition, which leaves budget unspent); ``events_at(s)`` gives the run's events with every noise scale
    ``s`` times those. The returned s is the smallest (to 1e-4 relative) whose PLD composition meets the total
    (:func:`~dppca_dask.accounting.calibrate_noise_scale`; never above it). 1.0 when the plan has no release beside
    its main one (``needed`` false: the main release is already calibrated to the whole total) or reproduces a
    paper's constants (``calibration="paper"``). Public values only.
    """
    from dppca_dask import accounting

    if not needed or getattr(params, "calibration", "standard") == "paper":
        return 1.0
    return accounting.calibrate_noise_scale(events_at, epsilon=params.epsilon, delta=params.delta).scale


def block_constants(params: Any, *, center: str | np.ndarray | None, explained_variance: bool, mean_share: float,
                    variance_share: float, auto_bound: bool, quantile: float, quantile_share: float,
                    norm_grid: Any, clipped_fraction: bool | None = None) -> tuple[CentredReleases, Any, Any]:
    """The releases of a block run before the joint scale: the side releases calibrated to their shares, the
    parameters of the iterations and their constants calibrated to the rest (:func:`plan_block_power`)."""
    from dppca_dask.methods.adaptive_plan import adaptive_constants

    shared = plan_centred_releases(params, center=center, auto_bound=auto_bound, quantile=quantile,
                                   quantile_share=quantile_share, mean_share=mean_share,
                                   explained_variance=explained_variance, variance_share=variance_share,
                                   norm_grid=norm_grid, main="iterations", main_label="the iterations",
                                   clipped_fraction=not auto_bound if clipped_fraction is None else clipped_fraction)
    power_params = dataclasses.replace(params, mechanism="adaptive-power", n_components=1,
                                       epsilon=params.epsilon * (1.0 - shared.used_epsilon),
                                       delta=params.delta * (1.0 - shared.used))
    return shared, power_params, adaptive_constants(power_params)


def _check_resume(resume: Any) -> BlockPowerState | None:
    if resume is not None and not isinstance(resume, BlockPowerState):
        raise InvalidParameterError(
            f"mechanism={BLOCK_POWER!r} resumes from the BlockPowerState its run wrote; got {type(resume).__name__}"
        )
    return resume


def plan_block_power(
    params: Any,
    n_cols: int,
    *,
    center: str | np.ndarray | None = None,
    explained_variance: bool = True,
    mean_share: float = DEFAULT_MEAN_SHARE,
    variance_share: float = DEFAULT_VARIANCE_SHARE,
    auto_bound: bool = False,
    quantile: float = DEFAULT_NORM_QUANTILE,
    quantile_share: float = DEFAULT_QUANTILE_SHARE,
    norm_grid: Any = None,
    oversample: int = DEFAULT_OVERSAMPLE,
    start: np.ndarray | None = None,
    release_prefix: str = "",
    noise_scale: float | None = None,
    clipped_fraction: bool | None = None,
) -> Any:
    """Calibrate a block run from public parameters only (a :class:`~dppca_dask.methods.MechanismPlan`).

    The user's total (ε, δ) is split by public shares: ``mean_share`` for the private mean (when
    ``center="private"``), ``variance_share`` for the explained variance (when asked), the rest for the T
    iterations, calibrated exactly as a sequential run of one component (the same T pairs of events). The parts
    compose by basic composition to at most the total, and the report composes the emitted events with the PLD
    accountant (at or below the total). With ``auto_bound``, ``quantile_share`` of ε (no δ) releases the bound
    c as the ``quantile`` of row norms on the public ``norm_grid`` (default
    :class:`~dppca_dask.mechanisms.quantile.NormGrid`: 2^-10 to 2^20, four points per octave), and
    ``params.row_norm_bound`` is not used.

    The shares fix the releases' relative noise; every noise scale (the Gaussian multipliers, the Laplace scales
    of the AboveThreshold steps and of the quantile) is then multiplied by one common factor s,
    :func:`joint_noise_scale`, so that the PLD composition of all the run's events is the total itself rather than
    below it (``calibration["noise_scale"]``). ``noise_scale`` imposes s instead (a caller that calibrates this run
    jointly with releases of its own: ``mechanism="auto"``'s pilot). With a fixed bound the run first releases
    the fraction of rows it clips from ``DEFAULT_CLIPPED_SHARE`` of (ε, δ) (``clipped_fraction``, default: unless
    ``auto_bound``; false for runs whose caller released it).
    """
    from dppca_dask.methods._registry import MechanismPlan
    from dppca_dask.methods.adaptive_plan import _plan_adaptive_power

    shared, power_params, constants = block_constants(
        params, center=center, explained_variance=explained_variance, mean_share=mean_share,
        variance_share=variance_share, auto_bound=auto_bound, quantile=quantile, quantile_share=quantile_share,
        norm_grid=norm_grid, clipped_fraction=clipped_fraction)

    def events_at(scale: float) -> list[Any]:
        releases = shared.scaled(scale)
        return [*releases.planned_events(), *constants.scaled(scale).events(), *releases.variance_events()]

    if noise_scale is None:
        noise_scale = joint_noise_scale(params, events_at, needed=shared.has_releases)
    shared = shared.scaled(noise_scale)
    uses_mean = isinstance(center, str)
    auto = shared.auto
    base = _plan_adaptive_power(power_params, n_cols, constants.scaled(noise_scale))
    cal = dict(base.calibration)
    bound = centred_bound(float(auto.grid.values[-1]) if auto is not None else params.row_norm_bound, center)
    grid = ThresholdGrid.for_bound(bound, per_octave=params.grid_per_octave, octaves=params.grid_octaves)
    mean_multiplier, variance_multiplier = shared.mean_multiplier, shared.variance_multiplier
    pass_delta = cal["delta_split"]["pass_probability"]
    top_m = pass_row_budget(cutoff=cal["cutoff"], threshold_scale=cal["svt_threshold_scale"],
                            query_scale=cal["svt_query_scale"], n_queries=grid.n_points, n_releases=params.n_iter,
                            pass_delta=pass_delta)

    def make_run(noise: Any, on_release: Callable[..., None] | None, resume: Any) -> Any:
        _check_resume(resume)
        return block_power_run(
            n_cols=n_cols, n_iter=params.n_iter, n_components=params.n_components,
            row_norm_bound=auto if auto is not None else params.row_norm_bound, epsilon_svt=cal["epsilon_svt"],
            noise_multiplier=cal["noise_multiplier"], cutoff=cal["cutoff"], grid=grid, noise=noise,
            svt_form=cal["svt_form"], pass_delta=pass_delta, top_m=top_m, center=center,
            mean_multiplier=mean_multiplier, variance_multiplier=variance_multiplier, on_release=on_release,
            oversample=oversample, resume=resume, start=start, release_prefix=release_prefix,
            clipped_multiplier=shared.clipped_multiplier,
        )

    def resumed_keys(resume: Any) -> list[str]:
        if _check_resume(resume) is None:
            return []
        keys = []
        if auto is not None and resume.row_norm_bound is not None:
            keys.append("row-norm-quantile")
        if resume.clipped_fraction is not None:
            keys.append("clipped-fraction")
        if uses_mean and resume.mean is not None:
            keys.append("mean")
        if resume.x is not None and start is None:
            keys.append(release_prefix + "block/init")
        for t in range(resume.iteration):
            keys += [release_prefix + block_release_key(t, what) for what in ("svt", "gaussian")]
        if resume.pending_index is not None:
            keys.append(release_prefix + block_release_key(resume.iteration, "svt"))
        if resume.variance is not None:
            keys.append("explained-variance")
        return keys

    planned = [*shared.planned_events(), *(base.planned_events or ()), *shared.variance_events()]
    assert base.replace_one is not None
    power_replace, power_method = base.replace_one

    def replace_one(events: tuple[Any, ...]) -> list[Any]:
        # replacing one row: the quantile and the mean as in CentredReleases.replace_one_head; the variance's
        # entries by <= √3 as under add/remove (two non-negative vectors of L1 norm <= 1 differ by <= √2 in L2, the
        # total by <= 1, the count by 0); the iterations as in the sequential version
        flat = list(events)
        head = shared.replace_one_head(flat)
        tail: list[Any] = []
        if variance_multiplier is not None and flat and len(flat) % 2 == 1:
            tail = [flat.pop()]
        return head + power_replace(tuple(flat)) + tail

    calibration = {
        **cal,
        "grid": grid.to_json(),
        "top_m": top_m,
        "centred_bound": None if auto is not None else bound,
        "block_width": min(n_cols, params.n_components + oversample),
        "center": shared.center,
        "shares": dict(shared.shares),
        "noise_scale": noise_scale,
        "mean_noise_multiplier": mean_multiplier,
        "row_norm_quantile": shared.quantile_json,
        "variance_noise_multiplier": variance_multiplier,
        "clipped_noise_multiplier": shared.clipped_multiplier,
    }
    return MechanismPlan(
        make_run,
        base.neighbouring,
        calibration,
        base.paper_figure,
        params.n_iter,
        resumed_keys=resumed_keys,
        planned_events=tuple(planned),
        replace_one=(replace_one, power_method + "; the private mean's sensitivity doubles from sqrt(2) to 2 "
                     "(noise multiplier divided by sqrt(2)); the explained variance's stays sqrt(3)"),
    )


# ------------------------------------------------------------------------------------------------ pca() options
@dataclass(frozen=True)
class CentringOptions:
    """``pca``'s analyst options, validated before any data is read: centring and a private row-norm bound."""

    center: str | np.ndarray | None
    """None, ``"private"`` or a public mean."""
    auto_bound: bool
    """``row_norm_bound="auto"``."""

    @property
    def active(self) -> bool:
        return self.center is not None or self.auto_bound

    def to_json(self) -> dict[str, Any]:
        """Provenance: only the options that were given (a run without them keeps its old parameters)."""
        out: dict[str, Any] = {}
        if self.center is not None:
            out["center"] = "private" if isinstance(self.center, str) else "given"
        if self.auto_bound:
            out["row_norm_bound"] = "auto"
        return out


#: Mechanisms of :func:`~dppca_dask.pca` that accept ``center`` and ``row_norm_bound="auto"``.
CENTRING_MECHANISMS = ("adaptive-power", BLOCK_POWER, "analyze-gauss", "auto")


def centring_options(mechanism: str, center: Any, row_norm_bound: Any) -> tuple[CentringOptions, Any]:
    """Validate ``center`` and ``row_norm_bound`` (``"auto"`` or a number); return the options and the number to
    validate as the bound (1.0 in place of ``"auto"``: the released bound replaces it)."""
    auto = isinstance(row_norm_bound, str)
    if auto and row_norm_bound != "auto":
        raise InvalidParameterError(f"row_norm_bound must be a number or 'auto'; got {row_norm_bound!r}")
    if center is None or center is False or (isinstance(center, str) and center == "none"):
        centre: str | np.ndarray | None = None
    elif center is True or (isinstance(center, str) and center == "private"):
        centre = "private"
    elif isinstance(center, str):
        raise InvalidParameterError(
            f"center must be False, True, 'private' or a public mean vector; got {center!r}")
    else:
        centre = np.array(center, dtype=np.float64)
        if centre.ndim != 1 or not np.all(np.isfinite(centre)):
            raise InvalidParameterError(
                f"a given center must be a finite 1-D vector (a public mean); got shape {centre.shape}")
        from dppca_dask.methods._params import ROW_NORM_BOUND_RANGE

        length = safe_norm(centre)  # ‖μ‖, ‖μ‖² may overflow
        if length > ROW_NORM_BOUND_RANGE[1]:
            # centred rows have the bound c + ‖μ‖, which scales every sum as c does: beyond 1e100, sums over a
            # few rows of (c + ‖μ‖)² overflow on a dataset with more rows and not on its neighbour with fewer
            raise InvalidParameterError(
                f"a given center must have norm at most {ROW_NORM_BOUND_RANGE[1]:g}, as row_norm_bound; got "
                f"{length:g}; scale the data so that rows have norms of order 1")
    options = CentringOptions(centre, auto)
    if options.active and mechanism not in CENTRING_MECHANISMS:
        raise InvalidParameterError(
            f"center and row_norm_bound='auto' apply to mechanism in {', '.join(CENTRING_MECHANISMS)}; got "
            f"mechanism={mechanism!r}"
        )
    return options, (1.0 if auto else row_norm_bound)


def result_fields(output: Any) -> dict[str, Any]:
    """The released statistics of a block or centred run, as :class:`~dppca_dask.results.PCAResult` fields."""
    variance = getattr(output, "variance", None)
    out: dict[str, Any] = {"mean": getattr(output, "mean", None)}
    if variance is not None:
        out.update(explained_variance=variance.explained_variance,
                   explained_variance_ratio=variance.explained_variance_ratio,
                   singular_values=variance.singular_values)
    return out
