"""The seed-004 paper's own privacy arithmetic (Nguyen, Ene & Nguyen 2026, Lemma 3.1), for reproduction.

Lemma 3.1: T iterations, each an ε₀-DP AboveThreshold step and an (ε₀, δ₀)-DP Gaussian step, are
``(ε', δ')``-DP with ``ε' = 2(T·ε₀² + sqrt(2·ln(1/δ₀)·T)·ε₀)`` and ``δ' = (T + 1)·δ₀``.

These figures are reported next to the accountant's, never instead of it: the Lemma's second-order term
``T·ε₀²`` stands for advanced composition's ``T·ε₀(e^ε₀ − 1)``, which is larger, and the Gaussian constant it
relies on is printed two ways (seed 004 spec §2). ``calibration="paper"`` uses the proof's (larger) constant,
``σ/θ = 2·sqrt(ln(2/δ₀))/ε₀``; the privacy report of such a run still states the PLD figure of the noise actually
added.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from dppca_dask.errors import InvalidParameterError

__all__ = [
    "PaperCalibration",
    "lemma31_epsilon_delta",
    "paper_adaptive_power_calibration",
    "paper_adaptive_power_epsilon",
]


def _check(epsilon_name: str, epsilon: float, delta_name: str, delta: float, n_iter: int) -> None:
    if not (math.isfinite(epsilon) and epsilon > 0):
        raise InvalidParameterError(f"{epsilon_name} must be finite and > 0; got {epsilon}")
    if not (0.0 < delta < 1.0):
        raise InvalidParameterError(f"{delta_name} must be in (0, 1); got {delta}")
    if isinstance(n_iter, bool) or not isinstance(n_iter, int) or n_iter < 1:
        raise InvalidParameterError(f"n_iter must be an integer >= 1; got {n_iter!r}")


def lemma31_epsilon_delta(*, epsilon0: float, delta0: float, n_iter: int) -> tuple[float, float]:
    """Lemma 3.1 as printed: ``(2(T·ε₀² + sqrt(2·ln(1/δ₀)·T)·ε₀), (T + 1)·δ₀)``.

    Parameters
    ----------
    epsilon0
        Per-iteration ε₀ of both the SVT and the Gaussian step.
    delta0
        Per-iteration δ₀ of the Gaussian step.
    n_iter
        T.
    """
    _check("epsilon0", epsilon0, "delta0", delta0, n_iter)
    t = n_iter
    epsilon = 2.0 * (t * epsilon0**2 + math.sqrt(2.0 * math.log(1.0 / delta0) * t) * epsilon0)
    return epsilon, (t + 1) * delta0


@dataclass(frozen=True, slots=True)
class PaperCalibration:
    """Noise levels by the paper's arithmetic (``calibration="paper"``): Lemma 3.1 solved for ε₀."""

    epsilon: float
    """Target total ε'."""
    delta: float
    """Target total δ'."""
    n_iter: int
    """T (all iterations of the run, ``n_iter × n_components`` for k components)."""
    epsilon0: float
    """Per-iteration ε₀ with ``lemma31_epsilon_delta(epsilon0, delta0, T) == (epsilon, delta)``."""
    delta0: float
    """``delta / (T + 1)``."""
    epsilon_svt: float
    """ε of each AboveThreshold step (= ε₀)."""
    noise_multiplier: float
    """Gaussian σ/θ by the proof's constant: ``2·sqrt(ln(2/δ₀))/ε₀``."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "epsilon": self.epsilon,
            "delta": self.delta,
            "n_iter": self.n_iter,
            "epsilon0": self.epsilon0,
            "delta0": self.delta0,
            "epsilon_svt": self.epsilon_svt,
            "noise_multiplier": self.noise_multiplier,
        }


def paper_adaptive_power_calibration(*, epsilon: float, delta: float, n_iter: int) -> PaperCalibration:
    """Invert Lemma 3.1: the per-iteration ε₀ and the paper's Gaussian multiplier for a total (ε, δ) over T steps.

    Parameters
    ----------
    epsilon, delta
        Target total (ε', δ'), ``epsilon > 0``, ``0 < delta < 1``.
    n_iter
        T, all iterations of the run.

    Returns
    -------
    PaperCalibration

    Notes
    -----
    ``δ₀ = δ/(T + 1)``; ε₀ is the positive root of ``2T·ε₀² + 2·sqrt(2·ln(1/δ₀)·T)·ε₀ − ε = 0``, written as
    ``ε / (sqrt(2LT) + sqrt(2LT + 2Tε))`` with ``L = ln(1/δ₀)`` to avoid cancellation. The multiplier uses the
    constant of the proof of Lemma 3.1, ``2·sqrt(ln(2/δ₀))``, the larger of the two the paper prints.
    """
    _check("epsilon", epsilon, "delta", delta, n_iter)
    t = n_iter
    delta0 = delta / (t + 1)
    log_term = 2.0 * math.log(1.0 / delta0) * t
    epsilon0 = epsilon / (math.sqrt(log_term) + math.sqrt(log_term + 2.0 * t * epsilon))
    return PaperCalibration(
        epsilon=float(epsilon),
        delta=float(delta),
        n_iter=t,
        epsilon0=epsilon0,
        delta0=delta0,
        epsilon_svt=epsilon0,
        noise_multiplier=2.0 * math.sqrt(math.log(2.0 / delta0)) / epsilon0,
    )


def paper_adaptive_power_epsilon(
    *, epsilon_svt: float, noise_multiplier: float, n_iter: int, delta: float
) -> dict[str, Any]:
    """The paper's figure (Lemma 3.1) for a run with the given noise, as a JSON-safe dict for the report.

    Parameters
    ----------
    epsilon_svt
        ε of each AboveThreshold step.
    noise_multiplier
        Gaussian σ/θ of each release.
    n_iter
        T, all iterations of the run.
    delta
        Total δ' of the run; ``δ₀ = δ'/(T + 1)``.

    Returns
    -------
    dict
        ``epsilon`` (the Lemma's ε'), ``delta``, ``delta0``, ``epsilon0_svt``, ``epsilon0_gaussian`` and
        ``source``.

    Notes
    -----
    The Gaussian step's ε₀ follows from the proof's constant, ``ε₀ = 2·sqrt(ln(2/δ₀))/m``. When it differs from
    ``epsilon_svt`` the Lemma's two halves are summed separately:
    ``Σ_{ε₀ ∈ {ε_svt, ε_gauss}} (T·ε₀² + sqrt(2·ln(1/δ₀)·T)·ε₀)``, which equals the printed formula when the two
    are equal (as under ``calibration="paper"``).
    """
    if not (math.isfinite(noise_multiplier) and noise_multiplier > 0):
        raise InvalidParameterError(f"noise_multiplier must be finite and > 0; got {noise_multiplier}")
    _check("epsilon_svt", epsilon_svt, "delta", delta, n_iter)
    t = n_iter
    delta0 = delta / (t + 1)
    epsilon_gaussian = 2.0 * math.sqrt(math.log(2.0 / delta0)) / noise_multiplier
    root = math.sqrt(2.0 * math.log(1.0 / delta0) * t)
    total = sum(t * e**2 + root * e for e in (epsilon_svt, epsilon_gaussian))
    return {
        "epsilon": total,
        "delta": float(delta),
        "delta0": delta0,
        "epsilon0_svt": float(epsilon_svt),
        "epsilon0_gaussian": epsilon_gaussian,
        "n_iter": t,
        "source": "Nguyen-Ene-Nguyen 2026, Lemma 3.1 (advanced composition as printed; for reference only)",
    }
