"""A differentially private topic model: the method of moments of Anandkumar et al. (2014) with the private tensor
power method (Wang & Anandkumar 2016, Alg. 3, extended to documents as the privacy unit).

The rows of the store are documents (word counts, whole numbers from 0 to 2^53); documents of fewer than three
words are not used. With ``alpha0 = 0`` the model is the single-topic model (each document draws one topic h with
probability w_h, then its words i.i.d. from μ_h); with ``alpha0 > 0`` it is LDA with Dirichlet concentration α₀ = Σα_h, whose
moments carry the corrections of Anandkumar et al. (2012, Thm 3.5). The moments are U-statistics of each
document's distinct word positions: ``P2_doc = (ccᵀ − diag c)/(ℓ(ℓ−1))`` and the distinct-triples tensor
``P3_doc``, both probability distributions, which is what bounds one document's influence without clipping.

Steps (each a pass over the data through the coordinator, one Gaussian release per step):

1. ``alpha0 > 0`` only: release ``(Σ c/ℓ, N)`` (sensitivity √2), giving M̂1 and N̂.
2. Private whitening: noisy subspace iteration on ``S2 = Σ P2_doc`` (``S2·Y`` released with each document's
   product clipped to the public Frobenius bound ``pair_bound`` ≤ 1, which is then its sensitivity: ‖P2_doc‖_F ≤ 1
   and Y is orthonormal), then ``YᵀS2Y`` (same clipped products, same sensitivity); W = V diag(σ)^{-1/2} from its
   eigenpairs (the α₀ correction subtracts released terms).
3. The private tensor power method on the whitened third moment ``M3(W,W,W)``, each contraction computed from rows
   (``v = W u``, never d² or d³ numbers). With ``r_j = Wᵀe_j``, one document moves ``Wᵀ P3_doc(I,v,v)`` by at
   most ``max_i‖r_i‖ · max_j (r_jᵀu)²`` and ``P3_doc(v,v,v)`` by at most ``max_j |r_jᵀu|³``; these bounds are
   functions of released values (W) and the public iterate, so the noise adapts to each step (the analogue of the
   paper's ‖u‖∞ factors). With ``tensor_clip`` κ < 1 each document's whitened vector (for LDA, with its α₀
   correction) is clipped to κ times that bound, which is then the vector query's sensitivity.
4. Un-whitening: ``μ_h = λ_h B v_h (α₀+2)/2`` with ``B = V diag(σ)^{1/2}``, projected onto the probability
   simplex; weights ``∝ 1/λ_h²``.

Privacy: add/remove one document; all releases are Gaussian, composed exactly by the accountant to the target
(ε, δ), with ``pca_share`` of the zCDP budget (1/m² sums) for steps 1–2 and the rest for step 3. This is an
extension beyond seed 002 (whose unit is one tensor entry), labelled so in the report.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dppca_dask.errors import InvalidInputError, InvalidParameterError
from dppca_dask.methods.tensor.power import check_counts, power_run
from dppca_dask.methods.tensor.private import GaussianReleaser
from dppca_dask.methods.tensor.requests import CountCheck, FirstMoment, PairStep, TopicStep

__all__ = [
    "DOCUMENT",
    "TopicResult",
    "TopicsCalibration",
    "calibrate_topics",
    "check_corpus",
    "load_topics",
    "project_simplex",
]

#: Neighbouring relation of the topic model.
DOCUMENT = "add/remove one row"

#: Defaults of the tensor part (k topics: K = k·L·(R+1) releases).
DEFAULT_RESTARTS = 3
DEFAULT_TENSOR_ITER = 6
DEFAULT_PCA_ITER = 5
DEFAULT_PCA_SHARE = 0.5
#: ``pair_bound`` when not given: ``min(1, DEFAULT_PAIR_BOUND_SCALE/√d)`` (d, the number of columns, is public).
DEFAULT_PAIR_BOUND_SCALE = 3.5
DEFAULT_TENSOR_CLIP = 0.25


@dataclass(frozen=True)
class TopicsCalibration:
    """Public constants of a private topic model run, fixed before the data is read."""

    whitening_multiplier: float
    """Noise multiplier of the first-moment and second-moment releases."""
    tensor_multiplier: float
    """Noise multiplier of each tensor power method release."""
    n_whitening: int
    n_tensor: int
    total_multiplier: float
    """The single Gaussian multiplier the whole run composes to (1/m² = Σ count/m_i²)."""

    def events(self) -> list[Any]:
        from dp_accounting import GaussianDpEvent, SelfComposedDpEvent

        return [SelfComposedDpEvent(GaussianDpEvent(self.whitening_multiplier), self.n_whitening),
                SelfComposedDpEvent(GaussianDpEvent(self.tensor_multiplier), self.n_tensor)]

    def to_dict(self) -> dict[str, Any]:
        return {"whitening_multiplier": self.whitening_multiplier, "tensor_multiplier": self.tensor_multiplier,
                "n_whitening_releases": self.n_whitening, "n_tensor_releases": self.n_tensor,
                "total_multiplier": self.total_multiplier}


def calibrate_topics(
    *, epsilon: float, delta: float, n_topics: int, n_restarts: int, n_iter: int, pca_iter: int, pca_share: float,
    alpha0: float,
) -> TopicsCalibration:
    """Split one exact Gaussian budget between whitening (``pca_share``) and the tensor power method."""
    from dppca_dask.accounting import calibrate_gaussian

    total = calibrate_gaussian(epsilon=epsilon, delta=delta, count=1)
    n_whitening = pca_iter + 1 + (1 if alpha0 > 0 else 0)
    n_tensor = n_topics * n_restarts * (n_iter + 1)
    # Σ count_i / m_i² = share/m² + (1 − share)/m² = 1/m²: the run is exactly one Gaussian of multiplier m.
    whitening = total * math.sqrt(n_whitening / pca_share) * (1 + 1e-12)
    tensor = total * math.sqrt(n_tensor / (1 - pca_share)) * (1 + 1e-12)
    return TopicsCalibration(whitening, tensor, n_whitening, n_tensor, total)


def project_simplex(v: np.ndarray) -> np.ndarray:
    """Euclidean projection of ``v`` onto the probability simplex (Duchi et al. 2008).

    Computed after shifting ``v`` so that its largest entry is 0 (the projection is invariant under shifts along
    the all-ones vector): entries far beyond 1 (noisy released values, e.g. at a small ε) lose no precision against
    the simplex's unit sum. ``+inf`` entries share the mass equally; NaN entries get none.
    """
    v = np.asarray(v, dtype=np.float64)
    top = np.isposinf(v)
    if top.any():
        return top / top.sum()
    v = np.where(np.isnan(v), -np.inf, v)
    if np.isneginf(v).all():
        return np.full(v.shape, 1.0 / v.size)
    v = v - v.max()
    u = np.sort(v)[::-1]
    css = np.cumsum(u) - 1.0
    ind = np.arange(1, len(v) + 1)
    rho = ind[u - css / ind > 0][-1]
    return np.maximum(v - css[rho - 1] / rho, 0.0)


@dataclass(frozen=True)
class TopicResult:
    """Released topics: each row of ``topics`` is a distribution over the columns (words)."""

    topics: np.ndarray
    """K × d, rows on the probability simplex."""
    weights: np.ndarray
    """K topic weights (sum 1): single-topic probabilities, or α_h/α₀ for LDA."""
    eigenvalues: np.ndarray
    """The released λ̂_h of the whitened tensor."""
    privacy: Any
    """:class:`~dppca_dask.accounting.PrivacyReport`, or None for the non-private method of moments."""
    provenance: dict[str, Any] = field(default_factory=dict)
    diagnostics: dict[str, Any] = field(default_factory=dict)
    """How far to trust the topics, from released values only (:func:`topic_diagnostics`): ``reliable``,
    ``noise_to_signal`` per topic, ``threshold``, ``rule`` (empty for the non-private method of moments)."""

    @property
    def private(self) -> bool:
        return self.privacy is not None and bool(self.privacy.private)

    @property
    def mechanism(self) -> str:
        """``"topics"`` (the registry's name, as jobs and the CLI report it)."""
        return "topics"

    def _repr_facts(self) -> dict[str, Any]:
        k, d = np.asarray(self.topics).shape
        return {"shape": f"{k} topics over {d} words"}

    def __repr__(self) -> str:
        from dppca_dask._repr import short_repr

        return short_repr(self, **self._repr_facts())

    def _repr_html_(self) -> str:
        from dppca_dask._repr import short_repr_html

        return short_repr_html(self, **self._repr_facts())

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: ``topics``, ``weights``, ``eigenvalues``, ``privacy`` {epsilon, delta, neighbouring, ...}."""
        if self.privacy is not None:
            privacy = self.privacy.to_dict()
        else:
            privacy = {"epsilon": None, "delta": None, "neighbouring": "none (not private)", "private": False}
        return {
            "mechanism": "topics",
            "topics": np.asarray(self.topics).tolist(),
            "weights": np.asarray(self.weights).tolist(),
            "eigenvalues": np.asarray(self.eigenvalues).tolist(),
            "privacy": privacy,
            "provenance": self.provenance,
            "diagnostics": dict(self.diagnostics),
        }

    def save(self, directory: str | os.PathLike[str]) -> None:
        """Write ``result.json`` (everything) and ``topics.npy`` (the K × d matrix) into ``directory``, owner-only
        (as :meth:`~dppca_dask.results.PCAResult.save`), each complete or absent."""
        from dppca_dask.results import write_result_json
        from dppca_dask.storage._files import private_replacement

        write_result_json(directory, self.to_dict(), indent=None)  # creates directory
        with private_replacement(os.path.join(os.fspath(directory), "topics.npy")) as path:
            np.save(path, np.asarray(self.topics))


def load_topics(directory: str | os.PathLike[str]) -> TopicResult:
    """Read a result written by :meth:`TopicResult.save` (its privacy report as read back from the JSON)."""
    from dppca_dask.results import LoadedReport, read_result_json

    directory = os.fspath(directory)
    meta = read_result_json(directory, writer="TopicResult.save")
    privacy = meta.get("privacy") or {}
    report = LoadedReport(privacy) if privacy.get("epsilon") is not None else None
    return TopicResult(np.load(os.path.join(directory, "topics.npy")), np.asarray(meta["weights"], dtype=np.float64),
                       np.asarray(meta["eigenvalues"], dtype=np.float64), report, dict(meta.get("provenance", {})),
                       dict(meta.get("diagnostics") or {}))


def _count_error(partition: int, row: int) -> InvalidInputError:
    return InvalidInputError(
        f"partition {partition}, row {row} holds a negative, fractional or too large count; the topic model needs "
        "word counts (whole numbers from 0 to 2^53): pass raw term counts, not weights",
        partition=partition, row=row,
    )


def check_corpus(data: Any) -> None:
    """Refuse a corpus whose counts are not whole numbers in [0, 2^53], reading one partition at a time in this
    process.

    A job calls it before reserving any budget (the run itself checks again before its first release). It returns
    nothing derived from the data: it succeeds, or raises naming the first bad partition and row.

    Raises
    ------
    InvalidInputError
        A negative, fractional or too large count.
    """
    from dppca_dask.coordinator import as_source
    from dppca_dask.kernels.tensor import count_violation

    source = as_source(data)
    for loader, args in source.loaders:  # one partition in memory at a time
        part = loader(*args)
        row = count_violation(part.block)
        if row >= 0:
            raise _count_error(part.index, row)


#: Upper limits of the iteration counts (each step is one pass over the data, and its noise share shrinks with the
#: count): far above what a release needs, low enough that a typo (10^9) is refused rather than run for days.
MAX_RESTARTS, MAX_TENSOR_ITER, MAX_PCA_ITER = 1000, 1000, 1000
#: Upper limit of the tensor power method's noisy queries, n_topics × n_restarts × (n_iter + 1).
MAX_TENSOR_QUERIES = 100_000


def _check_params(n_topics: Any, n_restarts: Any, n_iter: Any, pca_iter: Any, pca_share: Any, alpha0: Any,
                  dim: int) -> None:
    check_counts(n_topics, n_restarts, n_iter, dim)
    if isinstance(pca_iter, bool) or not isinstance(pca_iter, (int, np.integer)) or pca_iter < 1:
        raise InvalidParameterError(f"pca_iter must be an integer >= 1; got {pca_iter!r}")
    for name, value, high, default in (("n_restarts", n_restarts, MAX_RESTARTS, DEFAULT_RESTARTS),
                                       ("n_iter", n_iter, MAX_TENSOR_ITER, DEFAULT_TENSOR_ITER),
                                       ("pca_iter", pca_iter, MAX_PCA_ITER, DEFAULT_PCA_ITER)):
        if value > high:
            raise InvalidParameterError(f"{name} must be <= {high}; got {value!r}; the default is {default}")
    queries = int(n_topics) * int(n_restarts) * (int(n_iter) + 1)
    if queries > MAX_TENSOR_QUERIES:
        raise InvalidParameterError(
            f"n_topics × n_restarts × (n_iter + 1) must be <= {MAX_TENSOR_QUERIES} (noisy tensor queries, each a pass "
            f"over the data); got {n_topics} × {n_restarts} × {int(n_iter) + 1} = {queries}: lower n_restarts or n_iter"
        )
    if not (isinstance(pca_share, (int, float)) and 0 < float(pca_share) < 1):
        raise InvalidParameterError(f"pca_share must be in (0, 1); got {pca_share!r}; e.g. 0.5")
    if not (isinstance(alpha0, (int, float)) and math.isfinite(alpha0) and alpha0 >= 0):
        raise InvalidParameterError(
            f"alpha0 must be a finite number >= 0; got {alpha0!r}; 0 is the single-topic model, LDA's Σα otherwise"
        )


def clipping_bounds(pair_bound: Any, tensor_clip: Any, dim: int) -> tuple[Any, Any]:
    """A run's public clipping bounds on ``dim`` columns, checked to be in (0, 1]: ``pair_bound`` (when not given,
    ``min(1, DEFAULT_PAIR_BOUND_SCALE/√d)``) and ``tensor_clip``."""
    if pair_bound is None:
        pair_bound = min(1.0, DEFAULT_PAIR_BOUND_SCALE / math.sqrt(dim))
    if not (isinstance(pair_bound, (int, float)) and 0 < float(pair_bound) <= 1):
        raise InvalidParameterError(f"pair_bound must be in (0, 1]; got {pair_bound!r}; e.g. 0.2")
    if not (isinstance(tensor_clip, (int, float)) and 0 < float(tensor_clip) <= 1):
        raise InvalidParameterError(f"tensor_clip must be in (0, 1]; got {tensor_clip!r}; e.g. 0.25")
    return pair_bound, tensor_clip


def private_calibration(epsilon: Any, delta: Any, *, n_topics: int, n_restarts: int, n_iter: int, pca_iter: int,
                        pca_share: Any, alpha0: Any) -> TopicsCalibration:
    """A private run's calibration (:func:`calibrate_topics`), its budget checked first: ``epsilon`` finite and
    > 0, ``delta`` in (0, 1)."""
    if epsilon is None or delta is None:
        raise InvalidParameterError("a private run needs epsilon and delta; pass both (or private=False)")
    if not (math.isfinite(float(epsilon)) and float(epsilon) > 0):
        raise InvalidParameterError(f"epsilon must be finite and > 0; got {epsilon}")
    if not 0 < float(delta) < 1:
        raise InvalidParameterError(f"delta must be in (0, 1); got {delta}")
    return calibrate_topics(epsilon=float(epsilon), delta=float(delta), n_topics=n_topics, n_restarts=n_restarts,
                            n_iter=n_iter, pca_iter=pca_iter, pca_share=float(pca_share), alpha0=float(alpha0))


def _orthonormal(z: np.ndarray) -> np.ndarray:
    q, r = np.linalg.qr(z)
    return q * np.where(np.diag(r) < 0, -1.0, 1.0)


def _whitening(
    release: Callable[[str, np.ndarray, float, float], np.ndarray], *, dim: int, n_topics: int, pca_iter: int,
    alpha0: float, noise: Any, plan: TopicsCalibration | None, rng: np.random.Generator, pair_bound: float,
) -> Generator[Any, Any, tuple[float, np.ndarray, np.ndarray, np.ndarray, np.ndarray, float]]:
    """The topic run's private whitening (its first moment when α₀ > 0, then subspace iteration on S2 minus the α₀
    correction, applied to released values): yields requests, returns (scale, mean1, whiten, unwhiten, the
    released eigenvalues, the eigenvalue release's noise scale)."""
    from dppca_dask.mechanisms.secret import secret_gaussian

    m_a = plan.whitening_multiplier if plan is not None else 1.0
    clip = pair_bound if noise is not None else None  # the exact method of moments clips nothing
    sensitivity = min(pair_bound, 1.0)
    scale = 1.0  # documents counted: divides the sums when α₀ > 0 (moments as means)
    mean1 = np.zeros(dim)
    a = alpha0 / (alpha0 + 1.0)
    if alpha0 > 0:
        first = release("topics/first-moment", (yield FirstMoment()), math.sqrt(2.0), m_a)
        scale = max(float(first[-1]), 1.0)
        mean1 = np.maximum(first[:-1], 0.0) / scale
    start = secret_gaussian(noise, (dim, n_topics), release="topics/whitening-start") if noise is not None \
        else rng.standard_normal((dim, n_topics))
    y = _orthonormal(start)
    for t in range(pca_iter):
        z = release(f"topics/whitening/iter-{t}", (yield PairStep(y, clip)), sensitivity, m_a)
        y = _orthonormal(z / scale - a * np.outer(mean1, mean1 @ y))
    product = yield PairStep(y, clip)
    small = release("topics/whitening/eigenvalues", y.T @ product, sensitivity, m_a)
    small = (small + small.T) / 2 / scale - a * np.outer(y.T @ mean1, y.T @ mean1)
    sigma, q = np.linalg.eigh(small)
    sigma, q = sigma[::-1], q[:, ::-1]
    released_sigma = sigma.copy()
    # A public rule on released values: eigenvalues are floored at 1e-6 of the top one, and the top one at the
    # eigenvalue release's noise scale. Below that scale (few documents for the budget) the released second moment
    # is noise: its top eigenvalue may be zero or negative, and whitening by it would make every later
    # sensitivity infinite and stop the run after its first releases. The run goes on and releases noise instead.
    noise_scale = sensitivity * m_a / scale if noise is not None else 0.0
    floor = max(float(sigma[0]), noise_scale, 1e-300) * 1e-6
    sigma = np.maximum(sigma, floor)
    basis = y @ q
    whiten = basis / np.sqrt(sigma)  # d × k
    unwhiten = basis * np.sqrt(sigma)
    return scale, mean1, whiten, unwhiten, released_sigma, noise_scale


def _released_topics(found: Any, *, scale: float, unwhiten: np.ndarray, alpha0: float
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The topics and their weights from the tensor power run's released pairs (post-processing): (eigenvalues,
    eigenvectors, topics on the simplex, weights)."""
    lam = np.array(found.eigenvalues, dtype=np.float64) / scale
    vecs = np.array(found.components, dtype=np.float64)  # K × k
    sign = np.where(lam < 0, -1.0, 1.0)
    lam, vecs = lam * sign, vecs * sign[:, None]
    # μ_h = λ_h B v_h · (α₀ + 2)/2: M3's weights are 2α_h/((α₀+2)(α₀+1)α₀) against M2's α_h/((α₀+1)α₀) (1 for α₀ = 0)
    raw = (lam[:, None] * (alpha0 + 2.0) / 2.0 * (unwhiten @ vecs.T).T)
    topics_ = np.stack([project_simplex(row) for row in raw])
    positive = np.maximum(lam, 1e-300)
    weights = 1.0 / positive**2
    weights /= weights.sum()
    return lam, vecs, topics_, weights


def _topic_run(
    *, dim: int, n_topics: int, n_restarts: int, n_iter: int, pca_iter: int, alpha0: float,
    noise: Any, plan: TopicsCalibration | None, rng: np.random.Generator, pair_bound: float = 1.0,
    tensor_clip: float = 1.0,
) -> Generator[Any, Any, dict[str, Any]]:
    """The algorithm: yields requests, returns the released topics (``noise=None``: exact method of moments)."""
    from dppca_dask.mechanisms import gaussian_mechanism

    events: list[Any] = []
    bad = yield CountCheck()  # word counts must be whole and >= 0: fail before any release
    for partition in sorted(bad):
        if bad[partition] >= 0:
            raise _count_error(partition, bad[partition])

    def release(key: str, value: np.ndarray, sensitivity: float, multiplier: float) -> np.ndarray:
        if noise is None:
            return value
        noisy, event = gaussian_mechanism(value, l2_sensitivity=sensitivity, noise_multiplier=multiplier,
                                          noise=noise, release=key)
        events.append(event)
        return np.asarray(noisy)

    scale, mean1, whiten, unwhiten, released_sigma, noise_scale = yield from _whitening(
        release, dim=dim, n_topics=n_topics, pca_iter=pca_iter, alpha0=alpha0, noise=noise, plan=plan, rng=rng,
        pair_bound=pair_bound)
    row_norms = np.linalg.norm(whiten, axis=1)
    max_row = float(row_norms.max())
    wm1 = whiten.T @ mean1
    a = alpha0 / (alpha0 + 1.0)
    b = alpha0 / (alpha0 + 2.0)
    c = 2.0 * a * b  # 2α₀²/((α₀+1)(α₀+2)), without overflowing α₀² for a large α₀

    def worst_vector(u: np.ndarray) -> np.ndarray:
        proj = np.abs(whiten @ u)  # |r_jᵀu|
        big = proj.max(axis=0)
        m1v = np.abs(mean1 @ (whiten @ u))
        return max_row * big**2 + b * (2.0 * m1v * max_row * big + big**2 * np.linalg.norm(wm1))

    clip_tensor = noise is not None and tensor_clip < 1.0

    def vector_sensitivity(u: np.ndarray) -> np.ndarray:
        return tensor_clip * worst_vector(u) if clip_tensor else worst_vector(u)

    def scalar_sensitivity(u: np.ndarray) -> np.ndarray:
        big = np.abs(whiten @ u).max(axis=0)
        m1v = np.abs(mean1 @ (whiten @ u))
        return big**3 + 3.0 * b * m1v * big**2

    def query(u: np.ndarray, i: int, t: int) -> Any:
        if clip_tensor:  # each document's whitened contribution (LDA: with its correction) clipped
            lda = (b, mean1 @ (whiten @ u), wm1) if alpha0 > 0 else None
            return TopicStep(whiten @ u, whiten=whiten, clip=vector_sensitivity(u), lda=lda)
        return TopicStep(whiten @ u, with_pairs=alpha0 > 0)

    def answer(agg: Any, u: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if clip_tensor:  # already whitened and clipped per document
            return np.asarray(agg[0], dtype=np.float64), np.asarray(agg[1], dtype=np.float64)
        v = whiten @ u
        vector = whiten.T @ agg[0]
        scalar = np.asarray(agg[1], dtype=np.float64)
        if alpha0 > 0:  # data terms of the correction; the released M̂1 terms are added after the noise
            pairs_v = agg[2]
            m1v = mean1 @ v
            vector = vector - b * (2.0 * m1v * (whiten.T @ pairs_v) + np.einsum("il,il->l", v, pairs_v) * wm1[:, None])
            scalar = scalar - 3.0 * b * m1v * np.einsum("il,il->l", v, pairs_v)
        return vector, scalar

    class _Corrected(GaussianReleaser):
        """Releases the document sums, then adds the term of M̂1 alone (post-processing), in the sums' scale.

        The engine's deflation pairs (λ̂, v̂) are therefore in the scale of sums over documents too.
        """

        def vector(self, component: int, step: int, exact: np.ndarray, u: np.ndarray) -> np.ndarray:
            out = super().vector(component, step, exact, u) if noise is not None else exact
            m1v = mean1 @ (whiten @ u)
            return out + scale * c * m1v**2 * wm1[:, None]

        def scalar(self, component: int, exact: np.ndarray, u: np.ndarray) -> np.ndarray:
            out = super().scalar(component, exact, u) if noise is not None else exact
            m1v = mean1 @ (whiten @ u)
            return out + scale * c * m1v**3

        def start(self, component: int, dim_: int, n_restarts_: int) -> np.ndarray:
            if noise is not None:
                return super().start(component, dim_, n_restarts_)
            return rng.standard_normal((dim_, n_restarts_))

    releaser = _Corrected(noise, plan.tensor_multiplier if plan is not None else 1.0, vector_sensitivity,
                          scalar_sensitivity, prefix="topics/tensor")
    # The correction terms are exact only when the D-deflation acts on the corrected tensor: the engine deflates
    # after the releaser, on released values, so this holds.
    found = yield from power_run(query=query, answer=answer, dim=n_topics, n_components=n_topics,
                                 n_restarts=n_restarts, n_iter=n_iter, start=lambda i: np.zeros(0),
                                 releaser=releaser)
    events.extend(releaser.events)
    lam, vecs, topics_, weights = _released_topics(found, scale=scale, unwhiten=unwhiten, alpha0=alpha0)
    # what the diagnostics need, all released values or public functions of them
    scalar_std = (plan.tensor_multiplier * scalar_sensitivity(vecs.T) / scale if plan is not None and noise is not None
                  else np.zeros(lam.shape))
    whitening_scale = noise_scale * (math.sqrt(dim) + math.sqrt(n_topics))
    return {"topics": topics_, "weights": weights, "eigenvalues": lam, "events": events,
            "diagnostics": topic_diagnostics(released_sigma, whitening_scale, lam, scalar_std)}


#: The noise-to-signal level above which a topic run is reported unreliable.
TOPIC_NOISE_THRESHOLD = 0.5


def topic_diagnostics(whitening_eigenvalues: np.ndarray, whitening_scale: float, eigenvalues: np.ndarray,
                      eigenvalue_std: np.ndarray) -> dict[str, Any]:
    """How far to trust a topic run, from released values and public noise scales only.

    Per topic h (in the order found), ``noise_to_signal`` is the larger of two ratios: the whitening's, the spectral
    scale of its noise ``s·(√d + √K)`` (``s`` the standard deviation of each released entry, in the moments'
    scale) over the h-th released eigenvalue of the second moment (at or above 1 the whitening subspace is noise,
    and every later step with it); and the tensor's, the standard deviation of the released eigenvalue λ̂_h over
    ``|λ̂_h|``. A run is ``reliable`` when every topic's figure is at most :data:`TOPIC_NOISE_THRESHOLD`.
    """
    sigma = np.asarray(whitening_eigenvalues, dtype=np.float64)
    lam = np.abs(np.asarray(eigenvalues, dtype=np.float64))
    k = lam.size
    tiny = 1e-300
    whitening = np.where(sigma[:k] > 0, whitening_scale / np.maximum(sigma[:k], tiny), np.inf)
    tensor = np.asarray(eigenvalue_std, dtype=np.float64) / np.maximum(lam, tiny)
    ratio = np.minimum(np.maximum(whitening, tensor), 1e6)
    return {
        "reliable": bool(np.all(ratio <= TOPIC_NOISE_THRESHOLD)),
        "noise_to_signal": [float(r) for r in ratio],
        "threshold": TOPIC_NOISE_THRESHOLD,
        "rule": ("reliable when, for every topic, both the whitening noise's spectral scale over the released "
                 "second moment's eigenvalue and the released tensor eigenvalue's noise over its size are at most "
                 f"{TOPIC_NOISE_THRESHOLD:g}"),
        "whitening_noise_to_signal": [float(min(r, 1e6)) for r in whitening],
        "tensor_noise_to_signal": [float(min(r, 1e6)) for r in tensor],
    }
