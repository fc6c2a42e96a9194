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

__all__ = [
    "SVT_FORMS",
    "SvtResult",
    "above_threshold",
    "svt_cutoff",
    "svt_event",
    "svt_first_below",
    "svt_replace_one_epsilon",
    "svt_scales",
]

#: ``"monotone"`` (default): Lyu–Su–Li 2017's monotone-query AboveThreshold, ρ ~ Lap(2/ε), ν ~ Lap(2/ε);
#: ``"general"``: the paper's scales ρ ~ Lap(2/ε), ν ~ Lap(4/ε), valid for any sensitivity-1 queries.
SVT_FORMS = ("monotone", "general")

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


def _check_form(form: str) -> str:
    if form not in SVT_FORMS:
        raise InvalidParameterError(f"form must be one of {', '.join(SVT_FORMS)}; got {form!r}")
    return form


def svt_scales(
    epsilon: float,
    *,
    form: str = "monotone",
    threshold_scale: float | None = None,
    query_scale: float | None = None,
) -> tuple[float, float]:
    """The Laplace scales ``(threshold_scale, query_scale)`` of an ε-DP AboveThreshold step.

    Parameters
    ----------
    epsilon
        ε of the step (add/remove one row).
    form
        ``"monotone"`` (default): ``(2/ε, 2/ε)``. ``"general"``: the paper's ``(2/ε, 4/ε)``.
    threshold_scale, query_scale
        Explicit scales; they must spend at most ε: ``1/threshold_scale + q/query_scale ≤ ε`` with ``q = 1``
        for the monotone form and ``q = 2`` for the general one. They may spend less; the event still states ε.

    Notes
    -----
    Lyu, Su & Li 2017 ("Understanding the Sparse Vector Technique for Differential Privacy", PVLDB 10(6),
    §4.1, Algorithm 7 and its monotonic case) prove AboveThreshold with ``ρ ~ Lap(Δ/ε₁)`` and ``ν_j ~ Lap(2cΔ/ε₂)`` is
    ``(ε₁ + ε₂)``-DP, and ``ν_j ~ Lap(cΔ/ε₂)`` suffices when the queries are *monotonic*: for every pair of
    neighbours, either every query moves up or every query moves down. Here ``c = 1`` (one answer) and ``Δ = 1``.
    The counts of filtered rows ``F_j`` of seed 004 are monotonic under add/remove one row (adding a row raises
    every ``F_j`` by 0 or 1). The split ``ε₁ = ε₂ = ε/2`` minimises the variance of the comparison
    ``ν_j − ρ``, ``2(1/ε₁)² + 2(c/ε₂)²`` under ``ε₁ + ε₂ = ε`` (Lyu–Su–Li §4.2: ``ε₁ : ε₂ = 1 : c^(2/3)`` for
    monotonic queries), giving ``(2/ε, 2/ε)``: that variance is 16/ε², against 40/ε² for the paper's scales.

    Under *replace one row* the counts are not monotonic (one count may rise while another falls), so the
    general bound applies: the step is ``(1/threshold_scale + 2/query_scale)``-DP, see
    :func:`svt_replace_one_epsilon` (1.5ε for the monotone default, ε for the paper's scales).

    Raises
    ------
    InvalidParameterError
        For non-positive values, an unknown form, or explicit scales that would spend more than ε.
    """
    epsilon = positive_finite("epsilon", epsilon)
    _check_form(form)
    query_weight = 1.0 if form == "monotone" else 2.0
    default_query = (2.0 if form == "monotone" else 4.0) / epsilon
    rho_scale = 2.0 / epsilon if threshold_scale is None else positive_finite("threshold_scale", threshold_scale)
    nu_scale = default_query if query_scale is None else positive_finite("query_scale", query_scale)
    spent = 1.0 / rho_scale + query_weight / nu_scale
    if spent > epsilon * (1.0 + _SCALE_RTOL):
        raise InvalidParameterError(
            f"noise scales threshold_scale={rho_scale:g}, query_scale={nu_scale:g} spend "
            f"1/threshold_scale + {query_weight:g}/query_scale = {spent:g} > epsilon={epsilon:g} "
            f"({form} form); use larger scales or leave them at their defaults"
        )
    return rho_scale, nu_scale


def svt_replace_one_epsilon(threshold_scale: float, query_scale: float) -> float:
    """ε of an AboveThreshold step under *replace one row*: ``1/threshold_scale + 2/query_scale``.

    Replacing a row changes each count of filtered rows by at most 1 (sensitivity 1), but not all in the same
    direction, so the general (non-monotonic) AboveThreshold bound holds (Lyu–Su–Li 2017, Theorem 2 with
    ``Δ = c = 1``); no group-privacy doubling is needed.
    """
    rho_scale = positive_finite("threshold_scale", threshold_scale)
    nu_scale = positive_finite("query_scale", query_scale)
    return 1.0 / rho_scale + 2.0 / nu_scale


def svt_event(
    epsilon: float,
    *,
    form: str = "monotone",
    threshold_scale: float | None = None,
    query_scale: float | None = None,
) -> EpsilonDeltaDpEvent:
    """The DpEvent of one AboveThreshold step: ``EpsilonDeltaDpEvent(epsilon)`` (after checking the scales).

    Used both by :func:`above_threshold` and by callers that account for steps they do not repeat (a resumed
    run), so that both produce the same event.
    """
    epsilon = positive_finite("epsilon", epsilon)
    svt_scales(epsilon, form=form, threshold_scale=threshold_scale, query_scale=query_scale)
    return EpsilonDeltaDpEvent(epsilon)


def svt_first_below(
    counts: ArrayLike, *, cutoff: float, threshold_noise: float, query_noise: ArrayLike
) -> int | None:
    """The AboveThreshold decision with given noise: the first j with ``F_j + ν_j ≤ c + ρ``.

    Pure function (no sampling), so the decision logic is tested with chosen noise values. A tie (equality)
    counts as below. Queries after the answer do not affect it.

    The comparison is exact: comparing two rounded float sums could order two exact values closer than a rounding
    step the wrong way, and the SVT's privacy proof (which shifts ρ by 1 and ν_j by 2) is about the exact
    comparison. Every float64 is a multiple of 2^-1074, so the exact ``F_j + ν_j − c − ρ`` is zero or at least
    2^-1074 in magnitude, and :func:`math.fsum` (the correctly rounded exact sum) has its sign.

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
    minus_threshold = (-float(cutoff), -float(threshold_noise))
    for j, (count, drawn) in enumerate(zip(values.tolist(), nu.tolist())):
        if math.fsum((count, drawn, *minus_threshold)) <= 0.0:
            return j
    return None


def above_threshold(
    counts: ArrayLike,
    *,
    cutoff: float,
    epsilon: float,
    noise: NoiseSource,
    release: str,
    form: str = "monotone",
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
    form
        ``"monotone"`` (default; the counts must move in one direction between neighbours, as counts of filtered
        rows do under add/remove): ρ ~ Lap(2/ε), ν_j ~ Lap(2/ε). ``"general"``: the paper's Lap(2/ε), Lap(4/ε).
    threshold_scale, query_scale
        Explicit Laplace scales of ρ and ν_j. See :func:`svt_scales`.

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
    Privacy contract: for neighbours under which every count changes by at most 1, the released index is
    ``(1/threshold_scale + 2/query_scale)``-DP (Dwork–Roth 2014, Theorem 3.23; Lyu–Su–Li 2017, Theorem 2); when
    moreover all counts move in the same direction (monotonic queries, e.g. counts of filtered rows under
    add/remove one row) it is ``(1/threshold_scale + 1/query_scale)``-DP (Lyu–Su–Li 2017, §4.1, monotonic queries). The
    default monotone scales ``(2/ε, 2/ε)`` therefore spend exactly ``epsilon`` under add/remove (and
    ``1.5·epsilon`` under replace-one, :func:`svt_replace_one_epsilon`); the general form's ``(2/ε, 4/ε)`` spend
    ``epsilon`` under both. Emits ``EpsilonDeltaDpEvent(epsilon)``. Implements seed 004, Algorithm 1, lines
    4-7, in the form of spec §3.2 (public cut-off, filtered counts).

    Noise: ρ is drawn first (one value), then all ν_j at once (an array the length of ``counts``), inside one
    release. Drawing every ν_j up front is equivalent to drawing them one by one as the search proceeds, because
    the queries are fixed before the search runs (non-adaptive); the ν_j after the answer are discarded unread.
    ρ and ν are never returned or logged.
    """
    epsilon = positive_finite("epsilon", epsilon)
    rho_scale, nu_scale = svt_scales(epsilon, form=form, threshold_scale=threshold_scale, query_scale=query_scale)
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
