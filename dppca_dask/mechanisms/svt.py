"""AboveThreshold (the sparse vector technique) in the add/remove-safe form of seed 004 spec §3.2.

The queries are counts ``F_j`` of rows *filtered* at grid point j (sensitivity 1: adding or removing one row
changes each count by at most 1), searched in order, against a **public** cut-off c. The mechanism draws
``ρ ~ Lap(threshold_scale)`` once and ``ν_j ~ Lap(query_scale)`` per query and answers the first j with
``F_j + ν_j ≤ c + ρ``, or None. Only that index is released: never ρ, the ν_j or the counts.

The paper (Nguyen–Ene–Nguyen 2026, Algorithm 1, lines 4-7) compares ``Q_k + Lap(4/ε) ≥ n − c + Lap(2/ε)`` with
the kept-row counts ``Q_k = n − F_k``; that threshold contains the private n, which differs between add/remove
neighbours. Counting filtered rows against the public c is the same test without n (spec §3.2), and it is
AboveThreshold (Dwork–Roth 2014, Theorem 3.23; Lyu–Su–Li 2017, Algorithm 1) applied to the sensitivity-1
queries ``−F_j`` with the public threshold ``−c``.

Noise comes from :class:`~dppca_dask.mechanisms.NoiseSource`: floating-point textbook Laplace samples seeded
from OS entropy, not hardened against floating-point attacks (Mironov 2012).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from dppca_dask.accounting.events import EpsilonDeltaDpEvent
from dppca_dask.errors import InvalidParameterError
from dppca_dask.mechanisms._validation import positive_finite
from dppca_dask.mechanisms.noise import NoiseSource

__all__ = ["SvtResult", "above_threshold", "svt_cutoff", "svt_event", "svt_first_below", "svt_scales"]

#: Relative slack when checking that explicit noise scales spend no more than the stated ε (rounding only).
_SCALE_RTOL = 1e-12


@dataclass(frozen=True, slots=True)
class SvtResult:
    """The output of :func:`above_threshold`: the released index and the event it emits."""

    index: int | None
    """First query j with ``F_j + ν_j ≤ c + ρ``, or None when no query is below (a DP output)."""
    event: EpsilonDeltaDpEvent
    """``EpsilonDeltaDpEvent(epsilon)``: the step is pure ε-DP."""


def svt_cutoff(epsilon: float, beta: float) -> float:
    """The public cut-off ``c = 6·ln(1/β)/ε`` of seed 004, Algorithm 1 (line 4).

    Parameters
    ----------
    epsilon
        ε of the AboveThreshold step.
    beta
        Failure probability β in (0, 1) of the utility bound (Lemma B.1: with probability ≥ 1 − 2β, at most
        ``8(log(T log n) + 2 log(2/β))/ε`` rows are filtered per iteration).
    """
    epsilon = positive_finite("epsilon", epsilon)
    if not (0.0 < beta < 1.0):
        raise InvalidParameterError(f"beta must be in (0, 1); got {beta}; e.g. beta=0.05")
    return 6.0 * math.log(1.0 / beta) / epsilon


def svt_scales(
    epsilon: float, *, threshold_scale: float | None = None, query_scale: float | None = None
) -> tuple[float, float]:
    """The Laplace scales ``(threshold_scale, query_scale)``: by default the paper's ``(2/ε, 4/ε)``.

    Explicit scales must spend at most ε by the general AboveThreshold bound ``1/threshold_scale +
    2/query_scale ≤ ε`` (Lyu–Su–Li 2017, Theorem 2, with sensitivity 1); they may spend less, and the event
    still states ε (an upper bound).

    Raises
    ------
    InvalidParameterError
        For non-positive values, or explicit scales that would spend more than ε.
    """
    epsilon = positive_finite("epsilon", epsilon)
    rho_scale = 2.0 / epsilon if threshold_scale is None else positive_finite("threshold_scale", threshold_scale)
    nu_scale = 4.0 / epsilon if query_scale is None else positive_finite("query_scale", query_scale)
    spent = 1.0 / rho_scale + 2.0 / nu_scale
    if spent > epsilon * (1.0 + _SCALE_RTOL):
        raise InvalidParameterError(
            f"noise scales threshold_scale={rho_scale:g}, query_scale={nu_scale:g} spend "
            f"1/threshold_scale + 2/query_scale = {spent:g} > epsilon={epsilon:g}; "
            "use larger scales or leave them at their defaults (2/epsilon, 4/epsilon)"
        )
    return rho_scale, nu_scale


def svt_event(
    epsilon: float, *, threshold_scale: float | None = None, query_scale: float | None = None
) -> EpsilonDeltaDpEvent:
    """The DpEvent of one AboveThreshold step: ``EpsilonDeltaDpEvent(epsilon)`` (after checking the scales).

    Used both by :func:`above_threshold` and by callers that account for steps they do not repeat (a resumed
    run), so that both produce the same event.
    """
    epsilon = positive_finite("epsilon", epsilon)
    svt_scales(epsilon, threshold_scale=threshold_scale, query_scale=query_scale)
    return EpsilonDeltaDpEvent(epsilon)


def svt_first_below(
    counts: ArrayLike, *, cutoff: float, threshold_noise: float, query_noise: ArrayLike
) -> int | None:
    """The AboveThreshold decision with given noise: the first j with ``F_j + ν_j ≤ c + ρ``.

    Pure function (no sampling), so the decision logic is tested with chosen noise values. A tie (equality)
    counts as below. Queries after the answer do not affect it.

    Parameters
    ----------
    counts
        The query values ``F_j`` in search order (1-D).
    cutoff
        Public cut-off c.
    threshold_noise
        ρ.
    query_noise
        ν_j, one per query.

    Returns
    -------
    int or None
        The index, or None when no noisy query is at or below the noisy threshold.
    """
    values = np.asarray(counts, dtype=np.float64)
    nu = np.asarray(query_noise, dtype=np.float64)
    if values.ndim != 1 or values.shape != nu.shape:
        raise InvalidParameterError(
            f"counts and query_noise must be 1-D of the same length; got shapes {values.shape} and {nu.shape}"
        )
    below = np.flatnonzero(values + nu <= float(cutoff) + float(threshold_noise))
    return int(below[0]) if below.size else None


def above_threshold(
    counts: ArrayLike,
    *,
    cutoff: float,
    epsilon: float,
    noise: NoiseSource,
    release: str,
    threshold_scale: float | None = None,
    query_scale: float | None = None,
) -> SvtResult:
    """AboveThreshold over the counts ``F_0, F_1, ...``: the first j with ``F_j + ν_j ≤ c + ρ``.

    Parameters
    ----------
    counts
        ``F_j``, the number of rows filtered at the j-th threshold searched (1-D, in search order; for seed 004
        non-increasing, from the smallest threshold upward). Each must have sensitivity 1.
    cutoff
        Public cut-off c, e.g. :func:`svt_cutoff` ``(epsilon, beta)``; never derived from the data.
    epsilon
        ε of the step.
    noise
        Where the noise comes from.
    release
        Key of this release (each key once per noise source).
    threshold_scale, query_scale
        Laplace scales of ρ and ν_j; default ``2/ε`` and ``4/ε`` (the paper's). See :func:`svt_scales`.

    Returns
    -------
    SvtResult
        The index (or None) and ``EpsilonDeltaDpEvent(epsilon)``.

    Raises
    ------
    InvalidParameterError
        For empty or non-1-D counts, non-finite counts or cut-off, or bad ε or scales.
    ReleaseError
        If ``release`` was already drawn from ``noise``.

    Notes
    -----
    Privacy contract: for neighbours under which every count changes by at most 1 (add/remove one row; also
    replace-one row for counts of filtered rows), the released index is ε-DP, ``ε = 1/threshold_scale +
    2/query_scale`` (Dwork–Roth 2014, Theorem 3.23; Lyu–Su–Li 2017, Theorem 2); with the default scales that is
    exactly ``epsilon``. Emits ``EpsilonDeltaDpEvent(epsilon)``. Implements seed 004, Algorithm 1, lines 4-7, in
    the form of spec §3.2 (public cut-off, filtered counts). Monotone queries would permit a smaller query
    noise (Lyu–Su–Li 2017, monotonic queries); the default keeps the paper's scales.

    Noise: ρ is drawn first (one value), then all ν_j at once (an array the length of ``counts``), inside one
    release. Drawing every ν_j up front is equivalent to drawing them one by one as the search proceeds, because
    the queries are fixed before the search runs (non-adaptive); the ν_j after the answer are discarded unread.
    ρ and ν are never returned or logged.
    """
    epsilon = positive_finite("epsilon", epsilon)
    rho_scale, nu_scale = svt_scales(epsilon, threshold_scale=threshold_scale, query_scale=query_scale)
    values = np.asarray(counts, dtype=np.float64)
    if values.ndim != 1 or values.size == 0:
        raise InvalidParameterError(
            f"counts must be a non-empty 1-D array (one count per threshold); got shape {values.shape}"
        )
    if not np.all(np.isfinite(values)):
        raise InvalidParameterError(
            f"counts of release {release!r} must be finite; check the histogram the counts come from"
        )
    if not math.isfinite(cutoff):
        raise InvalidParameterError(f"cutoff must be finite; got {cutoff}; use svt_cutoff(epsilon, beta)")
    with noise.release(release):
        noise.audit(kind="svt", exact=values, sensitivity=1.0, scale=(rho_scale, nu_scale))
        rho = noise.laplace(rho_scale)  # Alg. 1, line 4: the threshold's noise, once
        nu = noise.laplace(nu_scale, size=values.shape[0])  # line 7: one noise per query
    index = svt_first_below(values, cutoff=cutoff, threshold_noise=rho, query_noise=nu)
    return SvtResult(index=index, event=EpsilonDeltaDpEvent(epsilon))
