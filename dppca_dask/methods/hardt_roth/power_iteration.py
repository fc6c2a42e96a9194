"""Private power iteration with a coherence bound (Hardt & Roth 2013, Fig. 2), rank k by deflation (Fig. 3).

Entry-level privacy: neighbouring matrices differ in one entry, by at most a public ``entry_bound`` b (1 in the
paper). Round t checks that the public iterate is C-incoherent, ``‖x_{t-1}‖²_∞ ≤ C/N``, which bounds the L2
sensitivity of ``B·x_{t-1}`` by ``b·sqrt(C/N)``, then releases ``B·x_{t-1} + N(0, (σ·b·sqrt(C/N))²·I)`` and
normalises. A coherent input makes the check fail; the failure is a function of released iterates, hence public,
and stops the run with :class:`~dppca_dask.errors.MechanismFailedError` (or moves to the next C of the
C-doubling wrapper, Remark 4.5).

Orientation (seed 000 spec §0.7, §1.2):

- ``symmetric=True``: the store is a square N×N matrix A meant to be symmetric (a graph's adjacency matrix, a
  Gram or covariance matrix stored as data); N = n_rows = n_cols. PPI runs on its symmetrisation
  ``B = (A + Aᵀ)/2`` (both products in the same pass), which is A itself when A is symmetric. Symmetry is never
  checked: a check that refuses an asymmetric store would release, unaccounted, whether a neighbour of a
  symmetric store is symmetric. One entry of A changing by at most b moves two entries of B by b/2 (or one
  diagonal entry by b), so ``‖(B − B')x‖ ≤ b·‖x‖_∞`` as for a symmetric A itself. Rank k > 1 deflates ``B_i = B_{i-1} − σ̂_i·v_i v_iᵀ`` and returns
  ``B_k = Σ σ̂_i v_i v_iᵀ``, never the residual; deflation by a positive σ̂ is right only for **positive
  semidefinite** B (spec §1.4, erratum 4), which the caller asserts (``signed_values`` releases Rayleigh
  quotients instead, for indefinite B). The guarantee is about entries of the *stored* matrix: when that matrix
  is itself computed from individuals' rows (``AᵀA``), one individual moves a whole row and column of it, and an
  entry-level guarantee does not protect that individual. (Also, for an undirected graph one edge is two
  entries; group privacy of size 2 applies.)
- ``symmetric=False`` (any n_rows×d store A, rows = individuals): PPI runs on ``B = [[0, A], [Aᵀ, 0]]``, N =
  n_rows + d. One entry of A is two entries of B, so every sensitivity carries a factor sqrt(2) (the spec's
  alternative to halving (ε, δ), exact rather than by group privacy). The iterate's n_rows-part stays at the
  coordinator; each pass sends every partition its own rows of it. The output splits into u (n_rows) and v (d),
  each normalised; rank 1 only (deflation is ill-defined on the ± pairs of B).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from dp_accounting import dp_event

from dppca_dask.coordinator.requests import AlgorithmRun
from dppca_dask.diagnostics import diagnostics, vector_noise_to_signal
from dppca_dask.errors import InvalidInputError, InvalidParameterError, MechanismFailedError
from dppca_dask.kernels.hardt_roth import RowSlices, assemble, row_offsets
from dppca_dask.mechanisms import NoiseSource, gaussian_mechanism, laplace_mechanism
from dppca_dask.mechanisms.secret import secret_gaussian
from dppca_dask.methods.hardt_roth.power_calibration import (
    DEFAULT_VALUE_SHARE,
    PrivatePowerCalibration,
    calibrate_private_power,
)
from dppca_dask.methods.hardt_roth.requests import EmbeddedProduct, RowCounts, RowProduct
from dppca_dask.storage.validate import safe_norm

__all__ = [
    "DEFAULT_PRIVATE_POWER_N_ITER",
    "PrivatePowerOutput",
    "PrivatePowerState",
    "coherence_ladder",
    "default_ladder_start",
    "planned_private_power",
    "private_power_run",
]

#: Default rounds T per PPI call (the paper's ``4·ln σ₁`` depends on the data; T must be public).
DEFAULT_PRIVATE_POWER_N_ITER = 20


@dataclass(frozen=True)
class PrivatePowerState:
    """Public progress of a run, passed to ``on_release`` after every round (counters and C only)."""

    component: int
    rung: int
    iteration: int
    coherence: float
    thresholds: tuple[tuple[float, ...], ...] = ()
    """Always empty (this mechanism has no thresholds; kept for the shared progress hook)."""


@dataclass(frozen=True)
class PrivatePowerOutput:
    """What a run releases (all differentially private, under the entry-level relation) and its DpEvents."""

    components: np.ndarray
    """k×d unit rows: v_i (symmetric input), or the normalised d-part v of the embedding's iterate."""
    values: np.ndarray
    """The released σ̂_i (Laplace-noised ``‖B_{i-1}v_i‖``, ``v_iᵀB_{i-1}v_i`` or ``ûᵀAv̂``); empty if none."""
    left: np.ndarray | None
    """Embedding only: the normalised n_rows-part u of the final iterate; None for symmetric input."""
    coherence: tuple[float, ...]
    """The C each component succeeded with (the smallest passing rung with C-doubling)."""
    failed_rungs: tuple[int, ...]
    """Rungs that failed before the successful one, per component (C-doubling)."""
    dimension: int
    """N: n for symmetric input, n_rows + d for the embedding."""
    n_rows: int
    calibration: PrivatePowerCalibration
    events: tuple[Any, ...] = field(default=())
    """DpEvents the guarantee covers (the rungs a C-doubling run skipped are included: see Notes of the run)."""
    n_releases: int = 0
    """Gaussian rounds actually released."""
    n_passes: int = 0
    """Passes of tasks over the partitions (the first counts their rows from a store's partition table or the
    blocks' shapes, reading no values)."""
    diagnostics: Any = None
    """The release's :class:`~dppca_dask.diagnostics.Diagnostics`: per component, the last released (noisy) round's
    norm against its noise's public scale (:func:`~dppca_dask.diagnostics.vector_noise_to_signal`)."""


def default_ladder_start(dimension: int) -> float:
    """The first C of the doubling ladder: the smallest power of two ≥ 2·ln N.

    A smaller C fails on the start vector alone (``max_j x₀[j]² ≈ 2·ln N/N``, spec §1.3), whatever the data.
    """
    return float(2 ** math.ceil(math.log2(max(2.0 * math.log(max(dimension, 2)), 1.0))))


def coherence_ladder(start: float, dimension: int) -> tuple[float, ...]:
    """``C = start·2^i`` while below N, then N itself (where the check cannot fail); Remark 4.5."""
    if not (math.isfinite(start) and start > 0):
        raise InvalidParameterError(f"coherence must be finite and > 0; got {start}")
    out: list[float] = []
    c = float(start)
    while c < dimension:
        out.append(c)
        c *= 2.0
    out.append(float(dimension))
    return tuple(out)


def _unit(x: np.ndarray) -> np.ndarray:
    norm = safe_norm(x)  # the entry relation leaves values unbounded: ‖B·x‖ can be finite, its square not
    if not math.isfinite(norm):
        raise InvalidParameterError("the iterate is not finite (its norm overflows float64)")
    if norm == 0.0:
        raise InvalidParameterError("the iterate vanished (norm 0); this cannot happen with Gaussian noise")
    return x / norm


def _unit_or_zero(x: np.ndarray) -> np.ndarray:
    norm = safe_norm(x)
    return x / norm if norm > 0 else x


def _check_run_parameters(*, n_iter: int, n_components: int, n_cols: int, symmetric: bool, entry_bound: float,
                          coherence: float | None) -> None:
    """:func:`private_power_run`'s public parameters checked (:class:`InvalidParameterError` for the first wrong)."""
    for name, given in (("n_iter", n_iter), ("n_components", n_components), ("n_cols", n_cols)):
        if isinstance(given, bool) or not isinstance(given, (int, np.integer)) or given < 1:
            raise InvalidParameterError(f"{name} must be an integer >= 1; got {given!r}")
    if not symmetric and n_components > 1:
        raise InvalidParameterError(
            f"n_components={n_components} needs symmetric=True: on an asymmetric store private power iteration "
            "runs on the embedding [[0, A], [A^T, 0]], whose eigenvalues come in +/- pairs, and the paper's "
            "deflation is defined only for positive semidefinite input (rank 1 only); store a PSD matrix "
            "(e.g. A^T A) and pass symmetric=True, or use mechanism='private-low-rank'"
        )
    if not (math.isfinite(entry_bound) and entry_bound > 0):
        raise InvalidParameterError(f"entry_bound must be finite and > 0; got {entry_bound}")
    if coherence is not None and not (math.isfinite(coherence) and coherence >= 1.0):
        raise InvalidParameterError(f"coherence must be finite and >= 1 (mu >= 1 always); got {coherence}")


def _public_shape(n_cols: int, symmetric: bool) -> Any:
    """The input's public shape, read before any release (rows per partition, no values): yields one request,
    returns (the row offsets of the partitions, n_rows, the dimension N the iterates live in)."""
    counts: RowSlices = yield RowCounts()
    offsets = row_offsets(counts)
    n_rows = int(offsets[-1])
    if n_rows < 1:
        raise InvalidInputError("the store has no rows; nothing to analyse")
    if symmetric:
        if n_rows != n_cols:
            raise InvalidInputError(
                f"symmetric=True needs a square store; got {n_rows} rows x {n_cols} columns; pass symmetric=False "
                "to use the embedding [[0, A], [A^T, 0]] of an asymmetric matrix"
            )
        return offsets, n_rows, n_cols
    return offsets, n_rows, n_rows + n_cols


def _component_rounds(
    i: int, *, ladder: Any, dimension: int, n_iter: int, entry_bound: float, factor: float, cal: Any, noise: Any,
    c_doubling: bool, product: Callable[[np.ndarray], Any], as_vector: Callable[[Any], np.ndarray],
    vectors: list[np.ndarray], values: list[float], events: list[Any], on_release: Any,
) -> Any:
    """Component ``i``'s noisy power rounds on each rung of the coherence ladder until one passes every check (Fig.
    2, line 3): yields requests, appends the released events to ``events``; returns (the final unit iterate, the
    releases emitted, the last release's noise-to-signal ratio, the rung's C, the rung's index)."""
    emitted = 0
    last_ratio = 1.0
    for j, c_bound in enumerate(ladder):
        x = _unit(secret_gaussian(noise, dimension, release=f"private-power/component-{i}/rung-{j}/start"))
        limit = c_bound / dimension
        std_scale = entry_bound * math.sqrt(limit)
        failed_round: int | None = None
        for t in range(1, n_iter + 1):
            if c_bound < dimension and float(np.max(x * x)) > limit:  # Fig. 2, line 3(a)
                failed_round = t
                break
            aggregate = yield product(x)
            exact = _deflate(as_vector(aggregate), x, vectors, values)  # B_{i-1} x_{t-1}
            del aggregate
            noisy, event = gaussian_mechanism(  # Fig. 2, lines 3(b)-(c)
                exact,
                l2_sensitivity=factor * std_scale,
                noise_multiplier=cal.noise_multiplier,
                noise=noise,
                release=f"private-power/component-{i}/rung-{j}/iter-{t}",
            )
            del exact
            events.append(event)
            emitted += 1
            last_ratio = float(vector_noise_to_signal(  # released values only (post-processing)
                [safe_norm(noisy)], sigma=cal.noise_multiplier * factor * std_scale, dim=dimension)[0])
            x = _unit(noisy)  # Fig. 2, line 3(d)
            if on_release is not None:
                on_release(PrivatePowerState(i, j, t, c_bound), tuple(events))
        if failed_round is None:
            return x, emitted, last_ratio, c_bound, j
        if not c_doubling:
            raise MechanismFailedError(
                f"private power iteration failed its coherence check before round {failed_round} of "
                f"component {i}: an iterate has a squared coordinate above C/N for C={c_bound:g}, "
                f"N={dimension}; the input is more coherent than C allows; raise coherence, or pass "
                "c_doubling=True to search C privately"
            )
    raise AssertionError("the last rung is C = N, where the check cannot fail")


def private_power_run(
    *,
    n_cols: int,
    epsilon: float,
    delta: float,
    n_iter: int = DEFAULT_PRIVATE_POWER_N_ITER,
    n_components: int = 1,
    symmetric: bool = False,
    coherence: float | None = None,
    c_doubling: bool = False,
    entry_bound: float = 1.0,
    calibration: str = "standard",
    release_values: bool = False,
    signed_values: bool = False,
    value_share: float = DEFAULT_VALUE_SHARE,
    noise: NoiseSource,
    on_release: Callable[[PrivatePowerState, tuple[Any, ...]], None] | None = None,
) -> AlgorithmRun[PrivatePowerOutput]:
    """Private power iteration as a generator of requests (driven by the coordinator).

    Parameters
    ----------
    n_cols
        d, the store's columns.
    epsilon, delta
        Total budget of the run.
    n_iter
        Rounds T of each PPI call (public).
    n_components
        k; more than 1 needs ``symmetric=True`` (and a PSD store).
    symmetric
        The store is a square matrix A and PPI runs on ``(A + Aᵀ)/2`` (A itself when symmetric; never checked,
        see the module docstring); else on the embedding of the store.
    coherence
        The public coherence bound C, clamped to N. ``None``: N (the worst case; the check cannot fail). With
        ``c_doubling`` it is the first rung (default :func:`default_ladder_start`).
    c_doubling
        Remark 4.5: run PPI with ``C = C₀, 2C₀, 4C₀, …, N`` and keep the first that does not fail.
    entry_bound
        b: neighbours differ in one entry by at most b; all noise scales are multiplied by b.
    calibration
        ``"standard"`` (default: exact Gaussian composition calibrated to the target) or ``"paper"``.
    release_values
        Release σ̂_i for every component (needed for ``B_k``); otherwise only those deflation needs (i < k).
    signed_values
        Symmetric input: release the Rayleigh quotient ``v_iᵀB_{i-1}v_i`` instead of the paper's ``‖B_{i-1}v_i‖``,
        so that deflation also removes negative eigenvalues of an indefinite matrix (spec §1.4; not in the paper).
    value_share
        Share of ε for the values under ``"standard"``.
    noise
        The noise source (also the source of the start vectors).
    on_release
        Called after every round with public progress.

    Notes
    -----
    Privacy contract: one entry of the store changes by at most b
    (:func:`~dppca_dask.methods.hardt_roth.relations.entry_relation`).
    Round t of a call is the Gaussian mechanism on ``B_{i-1}x_{t-1}`` (Fig. 2, line 3(c)), whose L2 sensitivity
    is at most ``f·b·‖x_{t-1}‖_∞ ≤ f·b·sqrt(C/N)`` once the check of line 3(a) has passed (f = sqrt(2) for the
    embedding, 1 for the symmetrisation ``(A + Aᵀ)/2``, where one entry change of A moves ``B·x`` by
    ``(b/2)·sqrt(x_i² + x_j²) ≤ b·‖x‖_∞``; deflation subtracts released values only), with std ``σ·b·sqrt(C/N)``:
    ``GaussianDpEvent(σ/f)``. A value σ̂_i = ``‖B_{i-1}v_i‖ + Lap(b/ε_v)`` (Fig. 3, line 3(b)) has sensitivity
    ``b·‖v_i‖_∞ ≤ b`` (the Rayleigh quotient ``b·‖v_i‖²_∞ ≤ b``): ``LaplaceDpEvent(1/ε_v)``. On the embedding the
    value is ``ûᵀAv̂`` of the normalised blocks (sensitivity ``b·‖û‖_∞‖v̂‖_∞ ≤ b``): ``‖Bx‖`` would lose the
    relative sign of û and v̂, which power iteration on B leaves arbitrary (the top eigenspace of B holds both
    ``(u, v)`` and ``(u, −v)``), and ``ûᵀAv̂`` is also the best scale of ``û v̂ᵀ``. The check and the failure
    are post-processing of released iterates. With C-doubling, the rungs are independent runs whose outputs are
    released up to the first success; that prefix is post-processing of all rungs run in full, so the guarantee
    (and the events returned) cover every rung's T rounds, including the rungs skipped after the success. The start
    vector ``x₀`` is data-independent Gaussian, normalised (spec §5). The accountant composes the events; σ and the
    split come from :func:`~dppca_dask.methods.hardt_roth.power_calibration.calibrate_private_power`.
    """
    _check_run_parameters(n_iter=n_iter, n_components=n_components, n_cols=n_cols, symmetric=symmetric,
                          entry_bound=entry_bound, coherence=coherence)

    # -- the public structure of the input, before any release --------------------------------------------
    offsets, n_rows, dimension = yield from _public_shape(n_cols, symmetric)
    passes = 1

    ladder, cal = _ladder_and_calibration(
        dimension, epsilon=epsilon, delta=delta, n_iter=int(n_iter), n_components=int(n_components),
        symmetric=symmetric, coherence=coherence, c_doubling=c_doubling, calibration=calibration,
        release_values=release_values, value_share=value_share,
    )
    n_values = cal.n_values
    factor = cal.embedding_factor

    def product(x: np.ndarray) -> Any:
        x_rows = {i: x[offsets[i] : offsets[i + 1]] for i in range(len(offsets) - 1)}
        if symmetric:  # A x as row slices and Aᵀ x as the sum, in one pass
            return EmbeddedProduct(x_cols=x, x_rows=x_rows)
        return EmbeddedProduct(x_cols=x[n_rows:], x_rows=x_rows)

    def as_vector(agg: RowSlices) -> np.ndarray:
        total = agg.total if agg.total is not None else np.zeros(n_cols)
        rows = assemble(agg) if agg.parts else np.zeros(0)
        if symmetric:
            return 0.5 * rows + 0.5 * total  # B x = (A x + Aᵀ x)/2, halved first: the sum may overflow
        return np.concatenate([rows, total])

    events: list[Any] = []
    vectors: list[np.ndarray] = []
    values: list[float] = []
    used: list[float] = []
    failed: list[int] = []
    released = 0
    x = np.zeros(dimension)
    noise_to_signal: list[float] = []
    for i in range(n_components):
        x, emitted, last_ratio, c_bound, j = yield from _component_rounds(
            i, ladder=ladder, dimension=dimension, n_iter=n_iter, entry_bound=entry_bound, factor=factor, cal=cal,
            noise=noise, c_doubling=c_doubling, product=product, as_vector=as_vector, vectors=vectors,
            values=values, events=events, on_release=on_release)
        passes += emitted
        released += emitted
        used.append(c_bound)
        failed.append(j)
        noise_to_signal.append(last_ratio)
        reserved = cal.n_runs * cal.n_iter - emitted
        if reserved:
            events.append(dp_event.SelfComposedDpEvent(dp_event.GaussianDpEvent(cal.noise_multiplier), reserved))
        v = x  # the final unit iterate (for the embedding, split into u and v below)
        if i < n_values:  # Fig. 3, line 3(b)
            if symmetric:
                aggregate = yield product(v)
                deflated = _deflate(as_vector(aggregate), v, vectors, values)  # B_{i-1} v
                value = float(v @ deflated) if signed_values else safe_norm(deflated)
            else:
                u_hat, v_hat = _unit_or_zero(x[:n_rows]), _unit_or_zero(x[n_rows:])
                aggregate = yield RowProduct(x=v_hat)
                value = float(u_hat @ assemble(aggregate))  # ûᵀ A v̂: its sign pairs û with v̂
            passes += 1
            del aggregate
            noisy_value, event = laplace_mechanism(
                value,
                l1_sensitivity=entry_bound,
                epsilon=float(cal.value_epsilon),  # type: ignore[arg-type]
                noise=noise,
                release=f"private-power/component-{i}/value",
            )
            events.append(event)
            values.append(float(noisy_value))
        vectors.append(v)  # Fig. 3, line 3(c): B_i = B_{i-1} - σ̂_i v vᵀ (implicit)

    if symmetric:
        components = np.vstack(vectors)
        left = None
    else:
        components = _unit_or_zero(x[n_rows:])[None, :]
        left = _unit_or_zero(x[:n_rows])
    return PrivatePowerOutput(
        components=components,
        values=np.asarray(values, dtype=np.float64),
        left=left,
        coherence=tuple(used),
        failed_rungs=tuple(failed),
        dimension=dimension,
        n_rows=n_rows,
        calibration=cal,
        events=tuple(events),
        n_releases=released,
        n_passes=passes,
        diagnostics=diagnostics(noise_to_signal if symmetric else noise_to_signal[-1:]),
    )


def _ladder_and_calibration(
    dimension: int, *, epsilon: float, delta: float, n_iter: int, n_components: int, symmetric: bool,
    coherence: float | None, c_doubling: bool, calibration: str, release_values: bool, value_share: float,
) -> tuple[tuple[float, ...], PrivatePowerCalibration]:
    if c_doubling:
        ladder = coherence_ladder(default_ladder_start(dimension) if coherence is None else coherence, dimension)
    else:
        ladder = (float(dimension) if coherence is None else min(float(coherence), float(dimension)),)
    cal = calibrate_private_power(
        epsilon=epsilon, delta=delta, n_iter=n_iter, n_components=n_components, n_runs=len(ladder),
        n_values=n_components if release_values else n_components - 1, embedding=not symmetric,
        calibration=calibration, value_share=value_share,
    )
    return ladder, cal


def planned_private_power(
    *,
    n_rows: int,
    n_cols: int,
    epsilon: float,
    delta: float,
    n_iter: int = DEFAULT_PRIVATE_POWER_N_ITER,
    n_components: int = 1,
    symmetric: bool = False,
    coherence: float | None = None,
    c_doubling: bool = False,
    calibration: str = "standard",
    release_values: bool = False,
    value_share: float = DEFAULT_VALUE_SHARE,
) -> PrivatePowerCalibration:
    """The calibration a complete run on an n_rows×d store uses, from public parameters and the public shape.

    Its :meth:`~dppca_dask.methods.hardt_roth.power_calibration.PrivatePowerCalibration.events` are exactly the
    events the run emits (every rung of the ladder, every value), under either calibration, whatever the data; a
    ledger reserves them before the run.
    """
    if symmetric and n_rows != n_cols:
        raise InvalidInputError(
            f"symmetric=True needs a square store; got {n_rows} rows x {n_cols} columns; pass symmetric=False "
            "to use the embedding [[0, A], [A^T, 0]] of an asymmetric matrix"
        )
    dimension = int(n_cols) if symmetric else int(n_rows) + int(n_cols)
    _, cal = _ladder_and_calibration(
        dimension, epsilon=epsilon, delta=delta, n_iter=n_iter, n_components=n_components, symmetric=symmetric,
        coherence=coherence, c_doubling=c_doubling, calibration=calibration, release_values=release_values,
        value_share=value_share,
    )
    return cal


def _deflate(product: np.ndarray, x: np.ndarray, vectors: list[np.ndarray], values: list[float]) -> np.ndarray:
    """``B_{i-1}x = Bx − Σ_j σ̂_j v_j (v_jᵀx)`` with the released ``(σ̂_j, v_j)`` (kept implicit, spec §5)."""
    out = np.array(product, dtype=np.float64, copy=True)
    for v, value in zip(vectors, values):
        out -= value * float(v @ x) * v
    return out
