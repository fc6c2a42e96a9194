"""Block adaptive private power iteration: k components in one block, optionally centred, with explained variance.

The sequential version (:mod:`dppca_dask.methods.adaptive_power.sequential`) computes k components by k runs of T
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
(:func:`~dppca_dask.methods.adaptive_power.sequential.pass_row_budget`).

Centring changes the range of the scores, not the argument: a centred row has norm ``‖a' − μ‖ ≤ ‖a'‖ + ‖μ‖ ≤
c + r`` with the public radius ``r`` (``r = c`` for the private mean, projected onto the ball of radius c;
``r = ‖μ‖`` for a given mean; 0 without centring), so scores lie in ``[0, (c + r)²]`` and the public grid must
start at ``(c + r)²`` or above (checked before any release), and the variance release has sensitivity scaled by
``(c + r)²``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dppca_dask.coordinator.requests import AlgorithmRun
from dppca_dask.diagnostics import block_noise_to_signal, diagnostics, mean_noise_to_signal, top_singular_values
from dppca_dask.errors import InvalidParameterError
from dppca_dask.kernels import ThresholdGrid
from dppca_dask.kernels import block as B
from dppca_dask.mechanisms import NoiseSource, gaussian_mechanism, svt_scales
from dppca_dask.mechanisms.centred import ExplainedVariance
from dppca_dask.methods.adaptive_power.centring import centred_bound, check_center, release_private_mean
from dppca_dask.methods.adaptive_power.explained_variance import release_explained_variance, sort_by_variance
from dppca_dask.methods.adaptive_power.requests import BlockFilteredSum, BlockPowerStep
from dppca_dask.methods.adaptive_power.row_norm_bound import AutoBound, release_clipped_fraction, release_row_norm_bound
from dppca_dask.methods.adaptive_power.sequential import DEFAULT_PASS_DELTA, pass_row_budget, threshold_index

__all__ = [
    "BLOCK_STAGES",
    "BlockPowerOutput",
    "BlockPowerState",
    "block_power_run",
    "block_release_key",
    "ordered_basis",
]


def block_release_key(iteration: int, what: str) -> str:
    """The unique key of one noisy release of a block run."""
    return f"block/iter-{iteration}/{what}"


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
    from dppca_dask.methods.adaptive_power.calibration import svt_step_delta
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

    Parameters are those of :func:`~dppca_dask.methods.adaptive_power.sequential.adaptive_power_run` (with T releases
    instead of k·T), and:

    row_norm_bound
        The public bound c, or an :class:`~dppca_dask.methods.adaptive_power.row_norm_bound.AutoBound`: c is then released first by a private quantile of the row
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
        None: not released (never with an :class:`~dppca_dask.methods.adaptive_power.row_norm_bound.AutoBound`, which clips about a known share by construction).
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
