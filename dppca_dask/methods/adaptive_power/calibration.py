"""Calibrating adaptive power iteration (seed 004) to a target total (ε, δ): the per-step AboveThreshold ε and the
Gaussian noise multiplier of the T·k iteration pairs, and the δ the rare second pass of a step costs.

Calibration reads only public parameters (ε, δ, T, k, the budget split), never the data, so its results are cached
with the shared calibration cache (:mod:`dppca_dask.accounting.calibration`) and logged. Every calibration is checked
at the end with the same accountant code that builds the privacy report of the run, and never returns a noise level
whose figure exceeds the target.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from dp_accounting import dp_event

from dppca_dask.accounting.calibration import (
    _COARSE_FACTOR,
    _MAX_MULTIPLIER,
    _MIN_MULTIPLIER,
    _RTOL,
    MIN_PLD_DELTA,
    _bracket,
    _cache_key,
    _check_count,
    _check_target,
    _memo,
    _memo_lock,
    _read_cache,
    _solve,
    _Unreachable,
    _write_cache,
    cache_path,
)
from dppca_dask.accounting.composition import Accountant, epsilon_for, pld_interval_for
from dppca_dask.accounting.events import EpsilonDeltaDpEvent
from dppca_dask.accounting.zcdp import pure_dp_rho, zcdp_rho_for
from dppca_dask.errors import CalibrationError, InvalidParameterError

__all__ = [
    "DEFAULT_FAILURE_DELTA_SHARE",
    "MAX_RELEASES",
    "AdaptivePowerCalibration",
    "calibrate_adaptive_power",
    "pass_delta_for",
    "svt_step_delta",
]

log = logging.getLogger(__name__)

#: Share of the target δ set aside for the second-pass event of adaptive power iteration (see ``failure_delta``).
DEFAULT_FAILURE_DELTA_SHARE = 0.01
#: Most AboveThreshold + Gaussian iteration pairs (``n_iter × n_components``) one calibration accepts: 10,000
#: pairs calibrate in under 10 s; far more would make the PLD (and the run) impractically long.
MAX_RELEASES = 10_000


@dataclass(frozen=True, slots=True)
class AdaptivePowerCalibration:
    """Noise levels of the adaptive private power method for a target total (ε, δ).

    Every one of the ``n_iter × n_components`` iterations runs one AboveThreshold step that is
    ``epsilon_svt``-DP and one Gaussian release with standard deviation ``noise_multiplier × θ_t`` (θ_t the
    released threshold, which bounds the L2 sensitivity). Neighbouring relation: add/remove one row.
    """

    epsilon: float
    """Target total ε."""
    delta: float
    """Target total δ."""
    n_iter: int
    """Iterations T per component."""
    n_components: int
    """Components k (each runs T iterations)."""
    svt_share: float | None
    """Share of the zCDP budget given to the SVT steps, or None when ``epsilon_svt`` was given explicitly."""
    epsilon_svt: float
    """ε of each AboveThreshold step (pure ε-DP)."""
    noise_multiplier: float
    """Gaussian noise multiplier m: std = m·θ_t."""
    achieved_epsilon: float
    """ε at ``delta`` of the whole run by ``accountant`` (≤ ``epsilon``, checked)."""
    accountant: str
    """Accountant calibrated against: ``"pld"`` (default) or ``"rdp"``."""
    rho_total: float
    """The zCDP ρ that converts to (ε, δ) (tight Canonne–Kamath–Steinke conversion); defines the share."""
    failure_delta: float = 0.0
    """Part of ``delta`` set aside for the second-pass event: the AboveThreshold events carry
    ``svt_delta`` each, ``failure_delta`` in total (the rest of δ is the mechanisms' own)."""
    pass_delta: float = 0.0
    """δ_pass: probability, on every dataset, that any partition of the run needs the second pass;
    ``failure_delta = (1 + e^epsilon_svt)·pass_delta``."""
    svt_delta: float = 0.0
    """δ of each AboveThreshold event, :func:`svt_step_delta` ``(epsilon_svt, pass_delta, n_releases)``."""
    from_cache: bool = False
    """Whether the result was read from the on-disk cache (and re-checked) rather than computed."""

    @property
    def n_releases(self) -> int:
        """Number of (SVT, Gaussian) iteration pairs: ``n_iter × n_components``."""
        return self.n_iter * self.n_components

    @property
    def events(self) -> tuple[dp_event.DpEvent, ...]:
        """The DpEvents a full run emits, compactly: the iteration pair self-composed ``n_releases`` times."""
        return _run_events(self.epsilon_svt, self.noise_multiplier, self.n_releases, self.svt_delta)

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict of the fields (public values only)."""
        return {
            "epsilon": self.epsilon,
            "delta": self.delta,
            "n_iter": self.n_iter,
            "n_components": self.n_components,
            "svt_share": self.svt_share,
            "epsilon_svt": self.epsilon_svt,
            "noise_multiplier": self.noise_multiplier,
            "achieved_epsilon": self.achieved_epsilon,
            "accountant": self.accountant,
            "rho_total": self.rho_total,
            "failure_delta": self.failure_delta,
            "pass_delta": self.pass_delta,
            "svt_delta": self.svt_delta,
        }


def svt_step_delta(epsilon_svt: float, pass_delta: float, n_releases: int) -> float:
    """δ of one AboveThreshold step together with the second pass it may cause: ``(1 + e^ε)·δ_pass/K``.

    The step's release is ε-DP; the pass differs from "no second pass" only on a noise event of probability at
    most ``δ_pass/K`` on every dataset (a union bound spreads δ_pass over the K steps). A view that agrees with
    an ε-DP output outside an event of probability ≤ p is ``(ε, (1 + e^ε)·p)``-DP:
    ``P[V(D) ∈ S] ≤ P[O(D) ∈ S] + p ≤ e^ε·P[O(D') ∈ S] + p ≤ e^ε·(P[V(D') ∈ S] + p) + p``.
    """
    if not (math.isfinite(epsilon_svt) and epsilon_svt > 0):
        raise InvalidParameterError(f"epsilon_svt must be finite and > 0; got {epsilon_svt}")
    if not (0.0 <= pass_delta < 1.0):
        raise InvalidParameterError(f"pass_delta must be in [0, 1); got {pass_delta}")
    _check_count("n_releases", n_releases)
    if pass_delta == 0.0:
        return 0.0
    if epsilon_svt > 700:  # (1 + e^ε) leaves float64: no meaningful δ (such an ε promises nothing anyway)
        return 1.0
    return min(1.0, (1.0 + math.exp(epsilon_svt)) * pass_delta / n_releases)


def pass_delta_for(failure_delta: float, epsilon_svt: float) -> float:
    """The δ_pass whose K steps carry ``failure_delta`` in total: ``failure_delta / (1 + e^epsilon_svt)``."""
    if not (math.isfinite(epsilon_svt) and 0 < epsilon_svt <= 700):
        raise InvalidParameterError(f"epsilon_svt must be in (0, 700]; got {epsilon_svt}")
    return failure_delta / (1.0 + math.exp(epsilon_svt))


def _run_events(
    epsilon_svt: float, noise_multiplier: float, count: int, svt_delta: float = 0.0
) -> tuple[dp_event.DpEvent, ...]:
    pair = dp_event.ComposedDpEvent(
        [EpsilonDeltaDpEvent(epsilon_svt, svt_delta), dp_event.GaussianDpEvent(noise_multiplier)]
    )
    return (dp_event.SelfComposedDpEvent(pair, count),)


def _search(
    epsilon: float, delta: float, count: int, epsilon_svt: float, svt_delta: float, guess: float,
    accountant: Accountant,
) -> tuple[float, float]:
    """The smallest multiplier (to ``_RTOL``) meeting the target; returns (multiplier, achieved ε).

    The achieved ε is computed by :func:`epsilon_for` on the run's events with its default PLD grid, the very
    call that produces the privacy report's figure.
    """

    def achieved_at(coarse: bool) -> Callable[[float], float]:
        memo: dict[float, float] = {}

        def f(m: float) -> float:
            if m not in memo:
                events = _run_events(epsilon_svt, m, count, svt_delta)
                interval = _COARSE_FACTOR * pld_interval_for(events) if coarse else None
                memo[m] = epsilon_for(
                    events, delta=delta, accountant=accountant, value_discretization_interval=interval
                )
            return memo[m]

        return f

    fine = achieved_at(coarse=False)
    if accountant == "rdp":
        return _solve(fine, epsilon, _bracket(fine, epsilon, guess, 2.0), _RTOL)
    # PLD: a cheap search on a coarse grid, then a short one on the report's grid around its answer.
    coarse = achieved_at(coarse=True)
    m_coarse, _ = _solve(coarse, epsilon, _bracket(coarse, epsilon, guess, 2.0), 1e-3)
    return _solve(fine, epsilon, _bracket(fine, epsilon, m_coarse, 1.003), _RTOL)


def _check_adaptive_parameters(*, epsilon: float, delta: float, n_iter: int, n_components: int, accountant: str,
                               failure_delta_share: float, svt_share: float, epsilon_svt: float | None) -> None:
    """:func:`calibrate_adaptive_power`'s parameters checked (:class:`InvalidParameterError` for the first wrong)."""
    _check_target(epsilon, delta)
    if delta < MIN_PLD_DELTA:
        raise InvalidParameterError(
            f"delta must be >= {MIN_PLD_DELTA:g} for adaptive power iteration (the PLD accountant is not accurate "
            f"below); got {delta:g}"
        )
    _check_count("n_iter", n_iter)
    _check_count("n_components", n_components)
    if n_iter * n_components > MAX_RELEASES:
        raise InvalidParameterError(
            f"n_iter × n_components must be <= {MAX_RELEASES}; got {n_iter} × {n_components} = "
            f"{n_iter * n_components}; use fewer iterations (a few suffice: the default is 5)"
        )
    if accountant not in ("pld", "rdp"):
        raise InvalidParameterError(f"accountant must be 'pld' or 'rdp'; got {accountant!r}")
    if not (0.0 <= failure_delta_share < 1.0):
        raise InvalidParameterError(f"failure_delta_share must be in [0, 1); got {failure_delta_share}; e.g. 0.01")
    if epsilon_svt is None:
        if not (0.0 < svt_share < 1.0):
            raise InvalidParameterError(
                f"svt_share must be in (0, 1); got {svt_share}; or pass epsilon_svt explicitly"
            )
    elif not (math.isfinite(epsilon_svt) and 0 < epsilon_svt <= 700):
        raise InvalidParameterError(f"epsilon_svt must be in (0, 700]; got {epsilon_svt}")


def calibrate_adaptive_power(
    *,
    epsilon: float,
    delta: float,
    n_iter: int,
    svt_share: float = 0.2,
    epsilon_svt: float | None = None,
    n_components: int = 1,
    accountant: Accountant = "pld",
    cache: bool = True,
    failure_delta_share: float = DEFAULT_FAILURE_DELTA_SHARE,
) -> AdaptivePowerCalibration:
    """Per-iteration SVT budget and Gaussian noise multiplier so that a whole run meets (ε, δ).

    Parameters
    ----------
    epsilon, delta
        Target total guarantee, ``epsilon > 0``, ``0 < delta < 1``.
    n_iter
        Iterations T per component (public, fixed before the data is read).
    svt_share
        Share of the zCDP budget for the SVT steps, in (0, 1). Ignored when ``epsilon_svt`` is given.
    epsilon_svt
        ε of each AboveThreshold step; overrides ``svt_share``.
    n_components
        k: the run has ``T·k`` iterations (k sequential single-vector runs).
    accountant
        ``"pld"`` (default, tight) or ``"rdp"`` (the cross-check; gives a larger multiplier).
    cache
        Read and write the on-disk cache (see Notes).
    failure_delta_share
        Share of ``delta`` set aside for the second-pass event (default 1%): ``failure_delta =
        failure_delta_share·delta`` and ``pass_delta = failure_delta/(1 + e^epsilon_svt)`` (see
        :func:`svt_step_delta`). A public split, reported in the result's provenance. 0 reserves nothing (the
        pure accounting of the mechanisms, as in the reference tables; a run needs a positive share).

    Returns
    -------
    AdaptivePowerCalibration
        ``epsilon_svt``, ``noise_multiplier`` and the achieved ε (≤ ``epsilon``).

    Raises
    ------
    InvalidParameterError
        For out-of-range parameters.
    CalibrationError
        When no multiplier meets the target, e.g. when the SVT steps alone exceed it.

    Notes
    -----
    Privacy contract: add/remove one row. Each iteration is an ``epsilon_svt``-DP AboveThreshold step followed by
    a Gaussian release of multiplier m; the run emits ``T·k`` pairs
    ``(EpsilonDeltaDpEvent(epsilon_svt, svt_delta), GaussianDpEvent(m))``, where ``svt_delta`` accounts for the
    second pass the step may cause (probability ``pass_delta`` over the run). The guarantee is the PLD
    composition of ``T·k`` worst-case ``(epsilon_svt, svt_delta)``-DP PLDs with the one Gaussian equivalent to
    ``T·k`` Gaussians of multiplier m (exact merge); seed 004 spec §3.3 (replacing the paper's Lemma 3.1).

    The split: ``ρ_total`` is the largest ρ whose zCDP guarantee converts to (ε, δ) (Canonne–Kamath–Steinke);
    the SVT steps get ``epsilon_svt = sqrt(2·svt_share·ρ_total/(T·k))`` each (ε-DP ⇒ ε²/2-zCDP, so together they
    use ``svt_share·ρ_total``). The split only shapes the noise; m is then the smallest multiplier (to a
    relative 1e-4) whose **PLD** ε at δ is at most the target, found by a bracketed search (safeguarded regula
    falsi in log m) on a coarse PLD grid and then on the grid the privacy report uses. Every candidate is
    evaluated with the report's own call, :func:`~dppca_dask.accounting.epsilon_for` on the run's events, and only
    an evaluated multiplier meeting the target is returned.

    Calibration inputs are public, so results are cached in ``$DPPCA_DASK_CACHE_DIR/calibration.json``
    (default ``~/.cache/dppca_dask``; an empty variable disables it), keyed by every parameter and the
    dp-accounting version. A cached multiplier is re-checked against the target before use (one PLD evaluation),
    so a damaged or edited cache can cost time but never privacy; a cache that cannot be read or written is
    logged and ignored.

    Examples
    --------
    >>> cal = calibrate_adaptive_power(epsilon=2.0, delta=1e-6, n_iter=30, epsilon_svt=0.05)  # doctest: +SKIP
    >>> round(cal.noise_multiplier, 2)  # doctest: +SKIP
    15.26
    """
    _check_adaptive_parameters(epsilon=epsilon, delta=delta, n_iter=n_iter, n_components=n_components,
                               accountant=accountant, failure_delta_share=failure_delta_share, svt_share=svt_share,
                               epsilon_svt=epsilon_svt)

    count = n_iter * n_components
    rho_total = zcdp_rho_for(epsilon, delta=delta)
    share: float | None = None
    if epsilon_svt is None:
        share = float(svt_share)
        epsilon_svt = math.sqrt(2.0 * share * rho_total / count)
    epsilon_svt = float(epsilon_svt)
    failure_delta = float(failure_delta_share) * float(delta)
    pass_delta = pass_delta_for(failure_delta, epsilon_svt)
    svt_delta = svt_step_delta(epsilon_svt, pass_delta, count)

    params = {
        "kind": "adaptive_power",
        "epsilon": float(epsilon),
        "delta": float(delta),
        "n_iter": n_iter,
        "n_components": n_components,
        "svt_share": share,
        "epsilon_svt": epsilon_svt,
        "accountant": accountant,
        "rtol": _RTOL,
        "failure_delta_share": float(failure_delta_share),
    }
    key = _cache_key(params)
    with _memo_lock:
        memo = _memo.get(key) if cache else None
    if memo is not None:
        return memo

    def result(multiplier: float, achieved: float, from_cache: bool) -> AdaptivePowerCalibration:
        return AdaptivePowerCalibration(
            epsilon=float(epsilon),
            delta=float(delta),
            n_iter=n_iter,
            n_components=n_components,
            svt_share=share,
            epsilon_svt=epsilon_svt,
            noise_multiplier=multiplier,
            achieved_epsilon=achieved,
            accountant=accountant,
            rho_total=rho_total,
            failure_delta=failure_delta,
            pass_delta=pass_delta,
            svt_delta=svt_delta,
            from_cache=from_cache,
        )

    path = cache_path() if cache else None
    if path is not None:
        entry = _read_cache(path).get(key)
        multiplier = entry.get("noise_multiplier") if isinstance(entry, dict) else None
        if isinstance(multiplier, (int, float)) and not isinstance(multiplier, bool) and multiplier > 0:
            achieved = epsilon_for(
                _run_events(epsilon_svt, float(multiplier), count, svt_delta), delta=delta, accountant=accountant
            )
            if achieved <= epsilon:
                out = result(float(multiplier), achieved, True)
                with _memo_lock:
                    _memo[key] = out
                return out
            log.warning("ignoring a calibration cache entry that does not meet its target: %s", key)
        elif entry is not None:
            log.warning("ignoring a malformed calibration cache entry: %s", key)

    svt_alone = epsilon_for(
        [dp_event.SelfComposedDpEvent(EpsilonDeltaDpEvent(epsilon_svt, svt_delta), count)], delta=delta,
        accountant=accountant,
    )
    if svt_alone >= epsilon:
        raise CalibrationError(
            f"the {count} SVT steps alone spend epsilon={svt_alone:.6g} at delta={delta:g} ({accountant.upper()}), "
            f"which already reaches the target epsilon={epsilon:g}; lower epsilon_svt (now {epsilon_svt:.6g}) "
            "or svt_share, use fewer iterations, or raise epsilon"
        )
    rho_gaussian = rho_total - count * pure_dp_rho(epsilon_svt)
    guess = math.sqrt(count / (2.0 * rho_gaussian)) if rho_gaussian > 0 else 10.0 * math.sqrt(count)
    guess = min(max(guess, _MIN_MULTIPLIER), _MAX_MULTIPLIER)
    try:
        multiplier, achieved = _search(epsilon, delta, count, epsilon_svt, svt_delta, guess, accountant)
    except _Unreachable:
        raise CalibrationError(
            f"no Gaussian noise multiplier up to {_MAX_MULTIPLIER:g} meets epsilon={epsilon:g} at delta={delta:g}: "
            f"the {count} SVT steps alone spend epsilon={svt_alone:.6g}, too close to the target; "
            "lower epsilon_svt or svt_share, or raise epsilon"
        ) from None
    # The check: ``achieved`` was computed for exactly this multiplier by the report's own accountant call.
    if not achieved <= epsilon:
        raise CalibrationError(
            f"calibration failed its check: epsilon={achieved} exceeds the target {epsilon}; please report this"
        )
    out = result(multiplier, achieved, False)
    with _memo_lock:
        _memo[key] = out
    if path is not None:
        _write_cache(path, key, {"noise_multiplier": multiplier, "epsilon_svt": epsilon_svt, "achieved": achieved})
    return out
