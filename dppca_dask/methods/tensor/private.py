"""The differentially private tensor power method (Wang & Anandkumar 2016, Alg. 3) for explicit tensors.

The privacy unit is the paper's (Def. 4.2): neighbouring tensors differ by ``±symmetrize(e_i⊗e_j⊗e_k)``, the sum
over the six index permutations, i.e. one entry orbit changed by a unit amount. Every power step releases
``(T − D)(I,u,u) + N(0, (m·6‖u‖∞²)² I)`` and every eigenvalue query ``(T − D)(u,u,u) + N(0, (m·6‖u‖∞³)²)``; the
ℓ₂-sensitivities 6‖u‖∞² and 6‖u‖∞³ hold for every fixed u (Thm 4.1) and are attained at i = j = k = argmax|u_i|.

Calibration (spec 002 §1.4):

- ``"standard"`` (default): the K = kL(R+1) Gaussian releases, all with the same noise multiplier m, composed
  exactly (PLD accountant; a tree of Gaussians composes in closed form) to the target (ε, δ).
- ``"paper"``: the printed ν = 6√(2 ln(1.25/δ'))/ε' with δ' = δ/(2K) and ε' = ε/√(K(4 + ln(2/δ))), i.e.
  m = ν/6. Its advanced-composition argument does not give ε: Dwork–Roth Thm 3.20 at these values gives
  1.1–1.9 ε, and the report states what the accountant certifies for the noise actually drawn.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dppca_dask.errors import InvalidParameterError
from dppca_dask.methods.tensor.power import TensorPowerResult, check_counts, check_tensor, drive, power_run
from dppca_dask.kernels import tensor as K

__all__ = [
    "ENTRY_ORBIT",
    "GaussianReleaser",
    "PrivateTensorResult",
    "TensorCalibration",
    "calibrate_tensor",
    "dwork_roth_epsilon",
    "paper_tensor_calibration",
    "private_tensor_power_method",
]

#: The neighbouring relation of Alg. 3 (Wang & Anandkumar 2016, Def. 4.2).
ENTRY_ORBIT = "one symmetric tensor entry orbit changes by ±1 (±symmetrize(e_i⊗e_j⊗e_k))"

CALIBRATIONS = ("standard", "paper")


def _check_target(epsilon: float, delta: float) -> tuple[float, float]:
    epsilon, delta = float(epsilon), float(delta)
    if not (math.isfinite(epsilon) and epsilon > 0):
        raise InvalidParameterError(f"epsilon must be finite and > 0; got {epsilon}")
    if not (0 < delta < 1):
        raise InvalidParameterError(f"delta must be in (0, 1); got {delta}")
    return epsilon, delta


def paper_tensor_calibration(epsilon: float, delta: float, n_releases: int) -> dict[str, float]:
    """The printed constants of Alg. 3, line 2, for K = ``n_releases`` = kL(R+1).

    ``δ' = δ/(2K)``, ``ε' = ε/√(K(4 + ln(2/δ)))``, ``ν = 6√(2 ln(1.25/δ'))/ε'``; the Gaussian noise multiplier
    (std / sensitivity) of each release is ``ν/6``.
    """
    epsilon, delta = _check_target(epsilon, delta)
    k = int(n_releases)
    delta_prime = delta / (2 * k)
    epsilon_prime = epsilon / math.sqrt(k * (4 + math.log(2 / delta)))
    nu = 6 * math.sqrt(2 * math.log(1.25 / delta_prime)) / epsilon_prime
    return {"K": float(k), "delta_prime": delta_prime, "epsilon_prime": epsilon_prime, "nu": nu,
            "noise_multiplier": nu / 6}


def dwork_roth_epsilon(epsilon_prime: float, n_releases: int, delta_slack: float) -> float:
    """ε of ``n_releases``-fold adaptive composition of ε'-DP steps (Dwork–Roth Thm 3.20) at slack δ''.

    ``√(2K ln(1/δ''))·ε' + K ε'(e^{ε'} − 1)``.
    """
    k = int(n_releases)
    return math.sqrt(2 * k * math.log(1 / delta_slack)) * epsilon_prime + k * epsilon_prime * math.expm1(epsilon_prime)


@dataclass(frozen=True)
class TensorCalibration:
    """Public constants of one private tensor power run, fixed before the tensor is read."""

    calibration: str
    """``"standard"`` or ``"paper"``."""
    noise_multiplier: float
    """m: each release's std is m times its ℓ₂-sensitivity."""
    n_releases: int
    """K = kL(R+1) Gaussian releases (vector and eigenvalue queries)."""
    epsilon: float
    delta: float
    paper: dict[str, float] = field(default_factory=dict)
    """The paper's constants at the same target (K, δ', ε', ν) and the ε that Dwork–Roth Thm 3.20 gives them."""

    def events(self) -> list[Any]:
        from dp_accounting import GaussianDpEvent, SelfComposedDpEvent

        return [SelfComposedDpEvent(GaussianDpEvent(self.noise_multiplier), self.n_releases)]

    def to_dict(self) -> dict[str, Any]:
        return {"calibration": self.calibration, "noise_multiplier": self.noise_multiplier,
                "n_releases": self.n_releases, "paper": dict(self.paper)}


def calibrate_tensor(
    *, epsilon: float, delta: float, n_components: int, n_restarts: int, n_iter: int, calibration: str = "standard"
) -> TensorCalibration:
    """Noise multiplier of Alg. 3 for k = ``n_components``, L = ``n_restarts``, R = ``n_iter``.

    Raises
    ------
    InvalidParameterError
        For a bad target or calibration name.
    """
    from dppca_dask.accounting import calibrate_gaussian

    epsilon, delta = _check_target(epsilon, delta)
    if calibration not in CALIBRATIONS:
        raise InvalidParameterError(f"calibration must be 'standard' or 'paper'; got {calibration!r}")
    count = int(n_components) * int(n_restarts) * (int(n_iter) + 1)  # Alg. 3, line 2: K = kL(R+1)
    paper = paper_tensor_calibration(epsilon, delta, count)
    paper["dwork_roth_epsilon"] = dwork_roth_epsilon(paper["epsilon_prime"], count, delta / 2)
    if calibration == "paper":
        multiplier = paper["noise_multiplier"]
    else:
        multiplier = calibrate_gaussian(epsilon=epsilon, delta=delta, count=count)
    return TensorCalibration(calibration, float(multiplier), count, epsilon, delta, paper)


class GaussianReleaser:
    """Releases the engine's queries with Gaussian noise calibrated to per-column ℓ₂-sensitivities.

    Parameters
    ----------
    noise
        The run's :class:`~dppca_dask.mechanisms.NoiseSource`.
    noise_multiplier
        m; each release's std is ``m × sensitivity(u)``.
    vector_sensitivity, scalar_sensitivity
        ``f(U) -> array of L`` bounds on the ℓ₂ movement of ``T(I,u,u)`` and ``|T(u,u,u)|`` between neighbours,
        functions of the (public) iterate only.
    prefix
        Release keys start with it.
    """

    def __init__(
        self,
        noise: Any,
        noise_multiplier: float,
        vector_sensitivity: Callable[[np.ndarray], np.ndarray],
        scalar_sensitivity: Callable[[np.ndarray], np.ndarray],
        prefix: str = "tensor",
    ) -> None:
        self.noise = noise
        self.multiplier = float(noise_multiplier)
        self.vector_sensitivity = vector_sensitivity
        self.scalar_sensitivity = scalar_sensitivity
        self.prefix = prefix
        self.events: list[Any] = []

    def start(self, component: int, dim: int, n_restarts: int) -> np.ndarray:
        from dppca_dask.mechanisms.secret import secret_gaussian

        return secret_gaussian(self.noise, (dim, n_restarts), release=f"{self.prefix}/component-{component}/start")

    def vector(self, component: int, step: int, exact: np.ndarray, u: np.ndarray) -> np.ndarray:
        from dppca_dask.mechanisms import gaussian_mechanism

        sensitivity = self.vector_sensitivity(u)
        out = np.empty_like(exact)
        for tau in range(exact.shape[1]):  # Alg. 3, line 7: one release per restart
            out[:, tau], event = gaussian_mechanism(
                exact[:, tau], l2_sensitivity=float(sensitivity[tau]), noise_multiplier=self.multiplier,
                noise=self.noise, release=f"{self.prefix}/component-{component}/iter-{step}/restart-{tau}",
            )
            self.events.append(event)
        return out

    def scalar(self, component: int, exact: np.ndarray, u: np.ndarray) -> np.ndarray:
        from dppca_dask.mechanisms import gaussian_mechanism

        sensitivity = self.scalar_sensitivity(u)
        out = np.empty_like(exact)
        for tau in range(exact.shape[0]):  # Alg. 3, line 10
            out[tau], event = gaussian_mechanism(
                float(exact[tau]), l2_sensitivity=float(sensitivity[tau]), noise_multiplier=self.multiplier,
                noise=self.noise, release=f"{self.prefix}/component-{component}/eigenvalue/restart-{tau}",
            )
            self.events.append(event)
        return out


def entry_vector_sensitivity(u: np.ndarray) -> np.ndarray:
    """``6‖u‖∞²`` per column (Thm 4.1)."""
    return 6.0 * np.abs(u).max(axis=0) ** 2


def entry_scalar_sensitivity(u: np.ndarray) -> np.ndarray:
    """``6‖u‖∞³`` per column (Thm 4.1)."""
    return 6.0 * np.abs(u).max(axis=0) ** 3


@dataclass(frozen=True)
class PrivateTensorResult:
    """Released eigenpairs of a private tensor power run and its privacy report."""

    eigenvalues: np.ndarray
    components: np.ndarray
    privacy: Any
    """:class:`~dppca_dask.accounting.PrivacyReport` built from the emitted events."""
    calibration: TensorCalibration

    @property
    def private(self) -> bool:
        return bool(self.privacy.private)

    def _repr_facts(self) -> dict[str, Any]:
        k, d = np.asarray(self.components).shape
        return {"shape": f"{k} eigenpairs of a {d}x{d}x{d} tensor"}

    def __repr__(self) -> str:
        from dppca_dask._repr import short_repr

        return short_repr(self, **self._repr_facts())

    def _repr_html_(self) -> str:
        from dppca_dask._repr import short_repr_html

        return short_repr_html(self, **self._repr_facts())


def private_tensor_power_method(
    tensor: Any,
    *,
    n_components: int,
    epsilon: float,
    delta: float,
    n_restarts: int = 10,
    n_iter: int = 10,
    calibration: str = "standard",
    seed: int | None = None,
    noise: Any = None,
) -> PrivateTensorResult:
    """Alg. 3: (ε, δ)-DP eigenpairs of a symmetric tensor under the entry-orbit relation.

    Parameters
    ----------
    tensor
        Symmetric d×d×d array (the private input).
    n_components, n_restarts, n_iter
        k, L, R (public); K = kL(R+1) releases.
    epsilon, delta
        Target guarantee.
    calibration
        ``"standard"`` (exact Gaussian composition, default) or ``"paper"`` (the printed ν).
    seed, noise
        A seed (result not private) or a noise source (tests); neither: OS entropy.

    Notes
    -----
    Privacy contract: neighbours differ by one entry orbit ±1 (:data:`ENTRY_ORBIT`); releases are Gaussian
    with sensitivities 6‖u‖∞² (vector, ℓ₂) and 6‖u‖∞³ (scalar), emitting K ``GaussianDpEvent(m)``; start vectors
    are data-independent, the argmax, normalisation and deflation are post-processing of released values. Only
    the top pair carries the paper's utility guarantee (Thm 4.2, incoherent components).
    """
    from dppca_dask import accounting
    from dppca_dask.mechanisms import NoiseSource

    t = check_tensor(tensor)
    dim = t.shape[0]
    check_counts(n_components, n_restarts, n_iter, dim)
    plan = calibrate_tensor(epsilon=epsilon, delta=delta, n_components=n_components, n_restarts=n_restarts,
                            n_iter=n_iter, calibration=calibration)
    if noise is not None and seed is not None:
        raise InvalidParameterError("give either seed or noise, not both")
    if noise is None:
        noise = NoiseSource.from_entropy() if seed is None else NoiseSource.from_seed(seed)
    releaser = GaussianReleaser(noise, plan.noise_multiplier, entry_vector_sensitivity, entry_scalar_sensitivity)
    run = power_run(query=lambda u, i, s: u, answer=lambda agg, u: agg, dim=dim, n_components=n_components,
                    n_restarts=n_restarts, n_iter=n_iter, start=lambda i: np.zeros((dim, n_restarts)),
                    releaser=releaser)
    found: TensorPowerResult = drive(run, lambda u: (K.dense_vector(t, u), K.dense_scalar(t, u)))
    paper_figure = {
        "epsilon": plan.paper["dwork_roth_epsilon"], "delta": plan.delta,
        "source": "Wang-Anandkumar 2016, Alg. 3 line 2 (nu as printed); epsilon by Dwork-Roth Thm 3.20 at "
                  "delta' = delta/(2K), delta'' = delta/2",
    }
    report = accounting.build_report(list(found.events), target_epsilon=plan.epsilon, target_delta=plan.delta,
                                     neighbouring=ENTRY_ORBIT, private=bool(noise.private), paper_figure=paper_figure)
    return PrivateTensorResult(found.eigenvalues, found.components, report, plan)
