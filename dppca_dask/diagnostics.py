"""How far to trust a release: a reliability diagnostic computed from released values and public parameters only.

Every pca, lowrank and window release carries a :class:`Diagnostics`: per component a ``noise_to_signal`` figure
in ``[0, 1]`` and a ``reliable`` flag. Each figure is a fixed function of values the mechanism has already released
(an eigenvalue or singular value of the noisy matrix, the norm of the last noisy power-iteration vector) and of the
noise scale the mechanism added, which is public (its noise multiplier times its sensitivity or released
threshold). Computing it is post-processing: it spends no budget and reads no data.

What the figure means
---------------------
``noise_to_signal`` is the estimated sine of the angle that the mechanism's own noise puts between a released
component and its noise-free counterpart (the same computation without noise), under the standard random-matrix
model of that noise:

- a noisy vector ``y = s + g`` with ``g ~ N(0, σ²I_d)`` (the last step of a power iteration): ``‖g‖ ≈ σ√d``, and
  ``sin²(y, s) ≈ σ²d/‖y‖²``, so the figure is ``min(1, σ√d/‖y‖)`` (``‖y‖`` the released norm); for a block power
  iteration's last release ``Y`` (d×w), its released singular values against the noise's largest, ``σ(√d + √w)``;
- a symmetric ``d×d`` matrix plus symmetric Gaussian noise of std σ per entry (Analyze Gauss, the Gaussian window
  release; a Wishart release's noise about its mean is of this kind with ``σ = c²√τ``): the noise's spectrum fills
  ``[−2σ√d, 2σ√d]``, a signal eigenvalue λ above ``σ√d`` appears at ``μ = λ + σ²d/λ`` and its eigenvector keeps
  ``cos² = 1 − σ²d/λ²``; λ is recovered from the released μ, and the figure is ``σ√d/λ`` (1 when ``μ ≤ 2σ√d``:
  the released eigenvalue is inside the noise's own range);
- a JL release (a sample covariance of m sketch rows): the spiked-covariance law with ``γ = d/m``;
- randomized response (an ``n×d`` matrix plus i.i.d. noise): the spiked rectangular law.

The square of the figure approximates the squared sine to the noise-free answer, which is at most as accurate as
the exact answer of the clipped data; it does not see errors the noise does not cause (too few iterations, a small
gap between eigenvalues that mixes neighbouring components, clipping). ``reliable`` is true when every component's
figure is at most :data:`DEFAULT_THRESHOLD`, a level calibrated on planted data (``benchmarks/bench_diagnostics.py``,
measured rates in ``docs/guide/diagnostics.md``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = [
    "DEFAULT_THRESHOLD",
    "Diagnostics",
    "RULE",
    "block_noise_to_signal",
    "diagnostics",
    "rectangular_noise_to_signal",
    "sample_covariance_noise_to_signal",
    "symmetric_noise_to_signal",
    "vector_noise_to_signal",
]

#: The ``noise_to_signal`` level above which a component is unreliable (calibrated on planted data: see the module
#: docstring and ``benchmarks/bench_diagnostics.py``).
DEFAULT_THRESHOLD = 0.4

#: The rule, in one sentence (stored with every diagnostic).
RULE = ("reliable when every component's noise_to_signal is at most the threshold; noise_to_signal is the estimated "
        "sine of the angle the mechanism's noise (of its public scale) puts between a released component and its "
        "noise-free counterpart, computed from the released eigenvalue, singular value or vector norm (1: within "
        "what noise alone releases)")


@dataclass(frozen=True)
class Diagnostics:
    """How far to trust a release (post-processing of released values and public parameters)."""

    reliable: bool
    """Whether every component's ``noise_to_signal`` is at most ``threshold``."""
    noise_to_signal: tuple[float, ...]
    """One figure in ``[0, 1]`` per component (lower is better; see the module docstring for its meaning)."""
    threshold: float
    """The ``noise_to_signal`` level above which a component is unreliable."""
    rule: str
    """The rule in one sentence."""

    def to_dict(self) -> dict[str, Any]:
        """The shared JSON form: ``reliable``, ``noise_to_signal``, ``threshold``, ``rule``."""
        return {"reliable": bool(self.reliable), "noise_to_signal": [float(v) for v in self.noise_to_signal],
                "threshold": float(self.threshold), "rule": self.rule}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Diagnostics:
        """The inverse of :meth:`to_dict` (a result read back from disk)."""
        return cls(reliable=bool(data["reliable"]),
                   noise_to_signal=tuple(float(v) for v in data["noise_to_signal"]),
                   threshold=float(data["threshold"]), rule=str(data["rule"]))

    @property
    def worst(self) -> float:
        """The largest figure (0 for a release without components)."""
        return max(self.noise_to_signal, default=0.0)

    def warning(self, what: str = "this release") -> str:
        """One line for a warning when the release is not reliable."""
        bad = [i for i, v in enumerate(self.noise_to_signal) if v > self.threshold]
        return (f"{what} is dominated by its privacy noise: noise_to_signal "
                f"{', '.join(f'{self.noise_to_signal[i]:.2f}' for i in bad)} above {self.threshold:g} for "
                f"component{'s' if len(bad) != 1 else ''} {', '.join(str(i) for i in bad)}; treat those components "
                "as noise (more data, a larger epsilon or fewer components would help)")

    def summary(self) -> str:
        """A short line for reprs: ``reliable`` and the figures."""
        shown = ", ".join(f"{v:.2f}" for v in self.noise_to_signal[:6])
        more = ", ..." if len(self.noise_to_signal) > 6 else ""
        return f"reliable={self.reliable} (noise_to_signal [{shown}{more}], threshold {self.threshold:g})"


def diagnostics(noise_to_signal: Sequence[float] | np.ndarray, *, threshold: float = DEFAULT_THRESHOLD,
                rule: str = RULE) -> Diagnostics:
    """A :class:`Diagnostics` from per-component figures (each clipped to ``[0, 1]``; NaN counts as 1)."""
    values = tuple(1.0 if not math.isfinite(float(v)) else min(1.0, max(0.0, float(v))) for v in noise_to_signal)
    return Diagnostics(reliable=all(v <= threshold for v in values), noise_to_signal=values,
                       threshold=float(threshold), rule=rule)


def exact_diagnostics(n_components: int) -> Diagnostics:
    """The diagnostic of a release without noise (a non-private baseline): every figure 0."""
    return diagnostics([0.0] * int(n_components))


def _ratio(noise: float, signal: np.ndarray) -> np.ndarray:
    """``noise/signal`` clipped to ``[0, 1]``, 1 where the signal is not positive."""
    signal = np.asarray(signal, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(signal > 0, noise / np.where(signal > 0, signal, 1.0), 1.0)
    return np.clip(np.nan_to_num(out, nan=1.0, posinf=1.0), 0.0, 1.0)


def vector_noise_to_signal(norms: Sequence[float] | np.ndarray, *, sigma: float, dim: int) -> np.ndarray:
    """``min(1, σ√d/‖y‖)`` for released noisy vectors ``y = s + N(0, σ²I_d)`` of norms ``norms``.

    ``‖y‖² ≈ ‖s‖² + σ²d``, and the noise turns ``y`` away from ``s`` by ``sin² ≈ σ²d/‖y‖²``.
    """
    return _ratio(float(sigma) * math.sqrt(max(int(dim), 1)), np.asarray(norms, dtype=np.float64))


def block_noise_to_signal(released: np.ndarray, *, sigma: float, n_components: int) -> np.ndarray:
    """Per component, ``min(1, σ(√d + √w)/s_j)`` for the singular values ``s_j`` (descending) of a released ``d×w``
    block ``Y = S + N(0, σ²)``: the noise's largest singular value is about ``σ(√d + √w)`` (so pure noise gives
    about 1), and each column's noise has norm about ``σ√d`` (as :func:`vector_noise_to_signal`)."""
    released = np.asarray(released, dtype=np.float64)
    peak = float(np.max(np.abs(released))) if released.size else 0.0
    if not math.isfinite(peak) or peak == 0.0:
        return np.ones(int(n_components))
    singular = np.linalg.svd(released / peak, compute_uv=False) * peak
    singular = np.sort(singular)[::-1][: int(n_components)]
    out = np.ones(int(n_components))
    edge = float(sigma) * (math.sqrt(released.shape[0]) + math.sqrt(released.shape[1]))
    out[: singular.shape[0]] = _ratio(edge, singular)
    return out


def symmetric_noise_to_signal(eigenvalues: Sequence[float] | np.ndarray, *, sigma: float, dim: int) -> np.ndarray:
    """Per released eigenvalue μ of ``K + E`` (E symmetric Gaussian of std σ per entry, d×d): ``σ√d/λ`` for the
    signal eigenvalue ``λ = (μ + sqrt(μ² − 4σ²d))/2`` that the noise moves to μ, and 1 when ``μ ≤ 2σ√d`` (inside
    the noise's own spectrum). Then ``cos² = 1 − σ²d/λ²`` in the spiked Wigner model, so the figure is the sine."""
    mu = np.asarray(eigenvalues, dtype=np.float64)
    scale = float(sigma) * math.sqrt(max(int(dim), 1))
    if scale == 0.0:
        return np.where(mu > 0, 0.0, 1.0)
    with np.errstate(invalid="ignore"):
        edge = mu > 2.0 * scale
        lam = np.where(edge, (mu + np.sqrt(np.maximum(mu * mu - 4.0 * scale * scale, 0.0))) / 2.0, 0.0)
    return np.where(edge, _ratio(scale, lam), 1.0)


def sample_covariance_noise_to_signal(eigenvalues: Sequence[float] | np.ndarray, *, noise_level: float,
                                      dim: int, n_samples: int) -> np.ndarray:
    """Per released eigenvalue μ of a sample covariance of ``n_samples`` Gaussian rows whose population covariance
    is ``noise_level·(I + ℓ·vvᵀ)`` (a JL release: ``noise_level = c²σ²``): ``sqrt(1 − cos²)`` with
    ``cos² = (1 − γ/ℓ²)/(1 + γ/ℓ)``, ``γ = d/n_samples``, and ℓ recovered from ``μ/noise_level = (1 + ℓ)(1 + γ/ℓ)``
    (1 when μ is inside the Marchenko–Pastur bulk, ``μ ≤ noise_level·(1 + √γ)²``)."""
    mu = np.asarray(eigenvalues, dtype=np.float64) / float(noise_level)
    gamma = max(int(dim), 1) / max(int(n_samples), 1)
    b = mu - 1.0 - gamma
    with np.errstate(invalid="ignore", divide="ignore"):
        edge = mu > (1.0 + math.sqrt(gamma)) ** 2
        ell = np.where(edge, (b + np.sqrt(np.maximum(b * b - 4.0 * gamma, 0.0))) / 2.0, 1.0)
        cos2 = np.clip((1.0 - gamma / ell**2) / (1.0 + gamma / ell), 0.0, 1.0)
    return np.where(edge, np.sqrt(1.0 - cos2), 1.0)


def rectangular_noise_to_signal(singular_values: Sequence[float] | np.ndarray, *, sigma: float, n_rows: int,
                                n_cols: int) -> np.ndarray:
    """Per released singular value μ of an ``n×d`` matrix plus i.i.d. ``N(0, σ²)`` noise (randomized response):
    the sine of the right singular vector's angle in the spiked rectangular model, ``cos² = (θ⁴ − ndσ⁴)/(θ⁴ +
    dσ²θ²)``, with the signal θ recovered from ``μ² = (θ² + nσ²)(θ² + dσ²)/θ²`` (1 when ``μ ≤ σ(√n + √d)``)."""
    mu = np.asarray(singular_values, dtype=np.float64)
    n, d, s2 = float(n_rows), float(n_cols), float(sigma) ** 2
    if s2 == 0.0:
        return np.where(mu > 0, 0.0, 1.0)
    b = mu * mu - (n + d) * s2
    with np.errstate(invalid="ignore", divide="ignore"):
        edge = mu > math.sqrt(s2) * (math.sqrt(n) + math.sqrt(d))
        t2 = np.where(edge, (b + np.sqrt(np.maximum(b * b - 4.0 * n * d * s2 * s2, 0.0))) / 2.0, 1.0)
        cos2 = np.clip((t2 * t2 - n * d * s2 * s2) / (t2 * t2 + d * s2 * t2), 0.0, 1.0)
    return np.where(edge, np.sqrt(1.0 - cos2), 1.0)


def warn_if_unreliable(diag: Diagnostics | None, what: str = "this release", *, stacklevel: int = 2) -> None:
    """Issue an :class:`~dppca_dask.errors.UnreliableReleaseWarning` when ``diag`` says the noise dominates."""
    import warnings

    from dppca_dask.errors import UnreliableReleaseWarning

    if diag is not None and not diag.reliable:
        warnings.warn(diag.warning(what), UnreliableReleaseWarning, stacklevel=stacklevel + 1)


def print_cli_warning(diag: Diagnostics | None, what: str = "this release") -> None:
    """The command line's one warning line on stderr when ``diag`` is not reliable."""
    import sys

    if diag is not None and not diag.reliable:
        print(f"dppca-dask: warning: {diag.warning(what)}", file=sys.stderr)


def top_singular_values(released: np.ndarray, k: int) -> np.ndarray:
    """The ``k`` largest singular values of a released matrix (descending; zeros past its rank)."""
    released = np.asarray(released, dtype=np.float64)
    peak = float(np.max(np.abs(released))) if released.size else 0.0
    out = np.zeros(int(k))
    if math.isfinite(peak) and peak > 0.0:
        values = np.sort(np.linalg.svd(released / peak, compute_uv=False) * peak)[::-1][: int(k)]
        out[: values.shape[0]] = values
    return out


def mean_noise_to_signal(signal: Sequence[float] | np.ndarray, *, row_norm_bound: float, mean_multiplier: float,
                         mean_count: float | None, dim: int) -> np.ndarray:
    """Per component, ``min(1, λ_μ/λ_j)``: the rows centred at a private mean ``μ̂`` carry the rank-one artefact
    ``n(μ − μ̂)(μ − μ̂)ᵀ`` of expected size ``λ_μ = 2c²m²d/n̂`` (the mean's noise has std ``c·m·√2/n̂`` per
    coordinate, for the mean's noise multiplier m and the released count n̂), so a component whose released size
    ``λ_j`` (eigenvalue, or singular value of the last power release, in the units of ``Σ ããᵀ``) is not well above
    it may be that artefact rather than a direction of the data."""
    count = max(float(mean_count if mean_count is not None else 1.0), 1.0)
    spurious = 2.0 * float(row_norm_bound) ** 2 * float(mean_multiplier) ** 2 * max(int(dim), 1) / count
    return _ratio(spurious, np.asarray(signal, dtype=np.float64))


def with_mean_error(diag: Diagnostics, signal: Sequence[float] | np.ndarray, *, row_norm_bound: float,
                    mean_multiplier: float, mean_count: float | None, dim: int) -> Diagnostics:
    """``diag`` with each figure raised to :func:`mean_noise_to_signal` where that is larger (a private mean)."""
    extra = mean_noise_to_signal(signal, row_norm_bound=row_norm_bound, mean_multiplier=mean_multiplier,
                                 mean_count=mean_count, dim=dim)
    return diagnostics(np.maximum(np.asarray(diag.noise_to_signal), extra), threshold=diag.threshold,
                       rule=diag.rule)
