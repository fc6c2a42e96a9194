"""Matrix release mechanisms of the sliding-window family (seed 001): Wishart, JL sampled from the Gram, Gaussian.

All three release one symmetric ``d×d`` matrix from the exact Gram ``K = Σ a'ᵀa'`` of rows clipped to
``‖a'‖ ≤ c``; every downstream task (covariance, PCA, regression, constrained PCA) is post-processing of it.

- :func:`wishart_mechanism` (Sheffet 2019, Thm 11 of the paper): ``K + c²·R``, ``R ~ Wis_d(τ, I_d)``, with the
  τ rule exposed (erratum E4).
- :func:`jl_gram_mechanism` (the JL mechanism of Sheffet 2019 / Blocki et al. 2012 on ``[σI_d; A/c]``, sampled
  exactly from the Gram, §5 of the spec): ``Ã = Z·(K/c² + σ²I)^{1/2}``, ``Z`` an ``m×d`` matrix of i.i.d.
  ``N(0, 1/m)``; released as ``c²·ÃᵀÃ``. Any m works, including m < d (errata E1, E2 do not apply).
- :func:`symmetric_gaussian_mechanism` (Analyze Gauss, Dwork–Talwar–Thakurta–Zhang 2014): the Gaussian mechanism
  on the upper triangle, mirrored.

Wishart and JL draws are standard normals from the source's float sampler; their privacy proofs are about the
continuous distributions, so a source with the ``"hardened"`` sampler is refused for them (use the Gaussian
release, which the hardened sampler covers).
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
from dp_accounting import GaussianDpEvent

from dppca_dask.accounting.events import EpsilonDeltaDpEvent
from dppca_dask.errors import InvalidParameterError
from dppca_dask.mechanisms.gaussian import gaussian_mechanism
from dppca_dask.mechanisms.noise import NoiseSource
from dppca_dask.mechanisms._validation import as_release_value, positive_finite

__all__ = [
    "TAU_RULES",
    "jl_gram_mechanism",
    "jl_sigma",
    "symmetric_gaussian_mechanism",
    "wishart_mechanism",
    "wishart_tau",
]

TauRule = Literal["thm11", "thm14", "alg7"]

#: The three printed degrees-of-freedom rules (spec seed001 §1.3, erratum E4); ``"thm11"`` is the default.
TAU_RULES: tuple[str, ...] = ("thm11", "thm14", "alg7")


def _check_budget(epsilon: float, delta: float) -> tuple[float, float]:
    epsilon = positive_finite("epsilon", epsilon)
    delta = positive_finite("delta", delta)
    if not delta < 1:
        raise InvalidParameterError(f"delta must be in (0, 1); got {delta}")
    return epsilon, delta


#: Degrees of freedom beyond which a Wishart release is refused: 2^53, the last integer a float64 holds exactly.
MAX_TAU = float(2**53)


def _support_floor(dim: int, epsilon: float, delta: float, start: int) -> int:
    """The least integer τ ≥ ``start`` (and ≥ d + 1) at which adding or removing one unit row ``u`` is
    (ε, δ)-indistinguishable for ``Wis_d(τ, I)`` noise, from the exact privacy loss of that worst case.

    For ``X = K + W`` against ``X' = K + uuᵀ + W`` the loss depends only on ``q = uᵀ(X − K)⁻¹u``:
    ``L = −a·ln(1 − q) − ½`` with ``a = (τ − d − 1)/2`` (``+∞`` for ``q ≥ 1``, where the neighbour with the row has
    no density), and ``1/q ~ χ²_k``, ``k = τ − d + 1``, without the row. ``Pr[L > ε]`` without the row and
    ``Pr[−L > ε]`` with it (``q' = 1/(1 + χ²_k)``) must both be ≤ δ. For large ε the printed τ is close to d and
    ``Pr[q ≥ 1] = Pr[χ²_k < 1]`` alone exceeds δ (0.39 at τ = d + 1).
    """
    from scipy.stats import chi2

    tau = max(dim + 1, start)
    while True:
        k, a = tau - dim + 1, (tau - dim - 1) / 2.0
        threshold = -math.expm1(-(epsilon + 0.5) / a) if a > 0 else 1.0  # L > ε  ⇔  q > threshold
        removed = float(chi2.cdf(1.0 / threshold, k))
        added = 0.0
        if epsilon < 0.5:  # −L > ε  ⇔  q' < −expm1(−(½ − ε)/a) (always, at a = 0)
            added = float(chi2.sf(1.0 / -math.expm1(-(0.5 - epsilon) / a) - 1.0, k)) if a > 0 else 1.0
        if max(removed, added) <= delta:
            return tau
        tau += 1


def support_delta(dim: int, tau: float) -> float:
    """``Pr[χ²_k < 1]``, ``k = ⌈τ⌉ − d + 1``: the probability that a release without a unit row falls where the
    release with it has no density (see :func:`_support_floor`). Whatever ε, such a release is (ε, δ)-DP only for
    δ at least this: a lower bound on what a τ gives, used to state what the paper's rules really give."""
    from scipy.stats import chi2

    return float(chi2.cdf(1.0, math.ceil(tau) - dim + 1))


def wishart_tau(dim: int, *, epsilon: float, delta: float, rule: str = "thm11") -> float:
    """Degrees of freedom τ of the Wishart noise for a ``dim×dim`` Gram at (ε, δ).

    - ``"thm11"`` (default; the primitive as printed, Sheffet 2019): ``τ = d + 28·ln(4/δ)/ε²``, and at least the
      least integer at which the worst-case pair (one unit row added or removed) is exactly (ε, δ)-close
      (:func:`_support_floor`, checked at ``⌈τ⌉``): for large ε the printed τ nears d, and the release without
      the row then falls, with probability far above δ (1.4% at ε = 10, δ = 1e-6), where the one with it cannot;
    - ``"thm14"`` (Theorems 8, 14, 15, 16): ``τ = d + 14·ln(4/δ)/ε²``;
    - ``"alg7"`` (Alg. 7, line 6): ``τ = ⌊d + 14·ln(1/δ)/ε²⌋``.

    Golden values at ε = 1, δ = 1e-5, d = 10: 371.178, 190.589, 171.
    """
    if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)) or dim < 1:
        raise InvalidParameterError(f"dim must be a positive integer; got {dim!r}")
    epsilon, delta = _check_budget(epsilon, delta)
    largest = dim + 28.0 * math.log(4.0 / delta) / epsilon**2  # the largest of the rules' τ
    if not largest < MAX_TAU:
        raise InvalidParameterError(
            f"epsilon={epsilon!r} is too small for a Wishart release: its noise would need about {largest:.3g} "
            f"degrees of freedom (more than 2^53, where they can no longer be counted exactly); raise epsilon, or "
            "use the Gaussian release (release='gaussian', --release gaussian)"
        )
    if rule == "thm11":
        printed = dim + 28.0 * math.log(4.0 / delta) / epsilon**2
        floor = _support_floor(dim, epsilon, delta, math.ceil(printed))  # ⌈τ⌉ is drawn
        return printed if floor == math.ceil(printed) else float(floor)
    if rule == "thm14":
        return dim + 14.0 * math.log(4.0 / delta) / epsilon**2
    if rule == "alg7":
        return float(math.floor(dim + 14.0 * math.log(1.0 / delta) / epsilon**2))
    raise InvalidParameterError(f"tau_rule must be one of {', '.join(TAU_RULES)}; got {rule!r}")


def jl_sigma(*, sketch_rows: int, epsilon: float, delta: float, rank_bound: int = 1) -> float:
    """σ of the JL release: ``max{(16√(r·L) + L)/ε, (4√(m·L) + L)/ε}``, ``L = ln(4/δ)``.

    The second term is Thm 12 with its r read as the projection's row count m (erratum E3); the first is Alg. 3's
    formula with the rank bound r. Golden values at ε = 1, δ = 1e-5: r = 1 → 70.364; m = 48 → 112.431.
    """
    for name, value in (("sketch_rows", sketch_rows), ("rank_bound", rank_bound)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise InvalidParameterError(f"{name} must be a positive integer; got {value!r}")
    epsilon, delta = _check_budget(epsilon, delta)
    log_term = math.log(4.0 / delta)
    return max(16.0 * math.sqrt(rank_bound * log_term) + log_term,
               4.0 * math.sqrt(sketch_rows * log_term) + log_term) / epsilon


def _square_gram(value: np.ndarray, release: str) -> np.ndarray:
    gram = as_release_value(value, release)
    if gram.ndim != 2 or gram.shape[0] != gram.shape[1] or gram.shape[0] < 1:
        raise InvalidParameterError(f"release {release!r} needs a square d×d Gram matrix; got shape {gram.shape}")
    return (gram + gram.T) / 2.0


def _float_sampler(noise: NoiseSource, what: str) -> None:
    if noise.sampler == "hardened":
        raise InvalidParameterError(
            f"the {what} release draws continuous normal matrices and has no hardened (lattice) form; use "
            "release='gaussian' with the hardened sampler, or the float sampler (DPPCA_NOISE_SAMPLER=float)"
        )


def wishart_mechanism(
    gram: np.ndarray,
    *,
    row_norm_bound: float,
    epsilon: float,
    delta: float,
    noise: NoiseSource,
    release: str,
    tau_rule: str = "thm11",
) -> tuple[np.ndarray, float, EpsilonDeltaDpEvent]:
    """Release ``K + c²·R`` with ``R ~ Wis_d(⌈τ⌉, I_d)``.

    Returns
    -------
    noisy : numpy.ndarray
        The released d×d matrix (its mean is ``K + c²·⌈τ⌉·I``).
    tau : float
        The degrees of freedom used (``⌈τ⌉``, an integer: ``R = GᵀG`` with G a ``⌈τ⌉×d`` standard normal matrix).
    event : EpsilonDeltaDpEvent
        ``EpsilonDeltaDpEvent(epsilon, delta)``.

    Notes
    -----
    Privacy contract: add/remove one row ``a`` with ``‖a‖ ≤ c``; ``K/c²`` then moves by the rank-one ``uuᵀ`` with
    ``‖u‖ ≤ 1``, the setting of the Wishart mechanism (Sheffet 2019; the paper's Thm 11): for ``τ ≥ d +
    28·ln(4/δ)/ε²`` the release ``K/c² + R`` is (ε, δ)-DP where that τ is well above d; the default rule also
    raises τ to the exact worst case's floor (large ε, see :func:`wishart_tau`). Scaling by the public ``c²`` is
    post-processing.
    The rules ``"thm14"`` and ``"alg7"`` reproduce the paper's smaller constants (E4), which the paper claims but
    does not prove give (ε, δ); where their τ provably does not (:func:`support_delta` above δ, at large ε), a
    window release's report says so in its caveats. No dp-accounting event models a Wishart
    draw: the release is accounted as the stated closed form ``EpsilonDeltaDpEvent(ε, δ)``. Rounding τ up is
    allowed (more noise, same proof).
    """
    c = positive_finite("row_norm_bound", row_norm_bound)
    exact = _square_gram(gram, release)
    dim = exact.shape[0]
    tau = float(math.ceil(wishart_tau(dim, epsilon=epsilon, delta=delta, rule=tau_rule)))
    _float_sampler(noise, "wishart")
    with noise.release(release):
        noise.audit(kind="wishart", exact=exact, sensitivity=c * c, scale=tau)
        factor = np.asarray(noise.gaussian(1.0, size=(int(tau), dim)), dtype=np.float64)
    drawn = factor.T @ factor
    noisy = exact + c * c * (drawn + drawn.T) / 2.0
    return noisy, tau, EpsilonDeltaDpEvent(float(epsilon), float(delta))


def jl_gram_mechanism(
    gram: np.ndarray,
    *,
    row_norm_bound: float,
    epsilon: float,
    delta: float,
    sketch_rows: int,
    noise: NoiseSource,
    release: str,
    rank_bound: int = 1,
) -> tuple[np.ndarray, float, EpsilonDeltaDpEvent]:
    """Release ``c²·ÃᵀÃ`` with ``Ã = Z·(K/c² + σ²I)^{1/2}``, ``Z_ij ~ N(0, 1/m)`` i.i.d., ``m = sketch_rows``.

    Returns
    -------
    noisy : numpy.ndarray
        The released d×d matrix (its mean is ``K + c²σ²·I``).
    sigma : float
        σ of :func:`jl_sigma`.
    event : EpsilonDeltaDpEvent
        ``EpsilonDeltaDpEvent(epsilon, delta)``.

    Notes
    -----
    Privacy contract: add/remove one row with ``‖a‖ ≤ c``. Each row of ``Ω·[σI; A/c]`` (Ω with i.i.d. N(0, 1/m)
    entries) is ``N(0, (K/c² + σ²I)/m)``, so ``Ã`` has exactly the JL mechanism's output distribution on the
    σ-augmented matrix, whose least singular value is ≥ σ for every A (Thm 12, with r read as m, E3), while only
    the d×d Gram is needed. Closed form ``EpsilonDeltaDpEvent(ε, δ)``; ``c²`` scaling is post-processing.
    """
    c = positive_finite("row_norm_bound", row_norm_bound)
    exact = _square_gram(gram, release)
    dim = exact.shape[0]
    sigma = jl_sigma(sketch_rows=sketch_rows, epsilon=epsilon, delta=delta, rank_bound=rank_bound)
    _float_sampler(noise, "jl")
    values, vectors = np.linalg.eigh(exact / (c * c) + sigma * sigma * np.eye(dim))
    root = (vectors * np.sqrt(np.clip(values, 0.0, None))) @ vectors.T
    with noise.release(release):
        noise.audit(kind="jl", exact=exact, sensitivity=c * c, scale=sigma)
        z = np.asarray(noise.gaussian(1.0 / math.sqrt(sketch_rows), size=(int(sketch_rows), dim)),
                       dtype=np.float64)
    sketch = z @ root
    released = c * c * (sketch.T @ sketch)
    return (released + released.T) / 2.0, sigma, EpsilonDeltaDpEvent(float(epsilon), float(delta))


def symmetric_gaussian_mechanism(
    gram: np.ndarray,
    *,
    row_norm_bound: float,
    noise_multiplier: float,
    noise: NoiseSource,
    release: str,
) -> tuple[np.ndarray, GaussianDpEvent]:
    """Analyze Gauss: Gaussian noise of std ``m·c²`` on the upper triangle (diagonal included), mirrored.

    Notes
    -----
    Privacy contract: add/remove one row ``‖a‖ ≤ c`` moves the upper triangle by that of ``aaᵀ``, of L2 norm
    ``sqrt((‖a‖⁴ + Σa_i⁴)/2) ≤ c²``; one Gaussian mechanism, ``GaussianDpEvent(noise_multiplier)``; mirroring is
    post-processing. [DTTZ14, Algorithm 1]
    """
    c = positive_finite("row_norm_bound", row_norm_bound)
    exact = _square_gram(gram, release)
    dim = exact.shape[0]
    upper = np.triu_indices(dim)
    noisy_upper, event = gaussian_mechanism(exact[upper], l2_sensitivity=c * c, noise_multiplier=noise_multiplier,
                                            noise=noise, release=release)
    noisy = np.zeros((dim, dim))
    noisy[upper] = noisy_upper
    noisy = noisy + noisy.T - np.diag(np.diag(noisy))
    return noisy, event
