"""The robust tensor power method (Wang & Anandkumar 2016, Alg. 1) and its online version (Alg. 2).

One engine, :func:`power_run`, drives L restarts batched as the columns of a d×L matrix ``U``, R power
iterations and deflation, for any input that answers ``(T(I,u,u), T(u,u,u))`` for the columns of ``U``: an
explicit symmetric tensor (numpy), the implicit third moment of a store's rows (one Dask pass per iteration through
the coordinator, never d² or d³ numbers), or the whitened moment of the topic model. Deflation is implicit
(``T − D`` with ``D = Σ_j λ̂_j v̂_j^{⊗3}`` kept as its pairs, spec §0), which equals the explicit update exactly.
A release hook turns the engine into the private Alg. 3 (:mod:`~dppca_dask.methods.tensor.private`).
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from dppca_dask.errors import InvalidInputError, InvalidParameterError
from dppca_dask.kernels import tensor as K
from dppca_dask.storage.validate import safe_norm

__all__ = [
    "Releaser",
    "TensorPowerResult",
    "moment_power_method",
    "online_power_method",
    "power_run",
    "tensor_power_method",
]


@dataclass(frozen=True)
class TensorPowerResult:
    """Eigenpairs found by the tensor power method, in the order they were found."""

    eigenvalues: np.ndarray
    """λ̂_i (k), the released (noisy) values for a private run."""
    components: np.ndarray
    """v̂_i as rows (k × d), unit norm."""
    n_queries: int
    """Number of ``(T(I,u,u), T(u,u,u))`` batches asked (passes over the data for a store)."""
    events: tuple[Any, ...] = field(default=())
    """DpEvents of a private run (empty otherwise)."""
    trajectory: tuple[np.ndarray, ...] = field(default=(), repr=False)
    """Every iterate ``U`` (d×L) in order, when asked for (tests)."""

    def _repr_facts(self) -> dict[str, Any]:
        k, d = np.asarray(self.components).shape
        private = f"a private run's releases ({len(self.events)} events)" if self.events else "not private"
        return {"shape": f"{k} eigenpairs in dimension {d}", "extra": (f"{private}; {self.n_queries} query batches",)}

    def __repr__(self) -> str:
        from dppca_dask._repr import short_repr

        return short_repr(self, **self._repr_facts())

    def _repr_html_(self) -> str:
        from dppca_dask._repr import short_repr_html

        return short_repr_html(self, **self._repr_facts())


class Releaser(Protocol):
    """Privatizes the engine's queries (Alg. 3): each exact value is released once, with its noise."""

    def vector(self, component: int, step: int, exact: np.ndarray, u: np.ndarray) -> np.ndarray: ...

    def scalar(self, component: int, exact: np.ndarray, u: np.ndarray) -> np.ndarray: ...

    def start(self, component: int, dim: int, n_restarts: int) -> np.ndarray: ...


def check_counts(n_components: int, n_restarts: int, n_iter: int, dim: int) -> None:
    """Validate k, L, R against the dimension d (k ≤ d)."""
    for name, value in (("n_components", n_components), ("n_restarts", n_restarts), ("n_iter", n_iter)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise InvalidParameterError(f"{name} must be an integer >= 1; got {value!r}")
    if n_components > dim:
        raise InvalidParameterError(
            f"n_components={n_components} exceeds the dimension d={dim}: an orthogonal decomposition has at most d "
            "components; ask for at most d"
        )


def _unit_columns(u: np.ndarray, previous: np.ndarray | None = None) -> np.ndarray:
    norms = np.linalg.norm(u, axis=0)
    out = np.array(u, dtype=np.float64, copy=True)
    ok = norms > 0
    out[:, ok] /= norms[ok]
    if previous is not None:  # a zero direction (everything deflated away): keep the previous iterate
        out[:, ~ok] = previous[:, ~ok]
    return out


def power_run(
    *,
    query: Callable[[np.ndarray, int, int], Any],
    answer: Callable[[Any, np.ndarray], tuple[np.ndarray, np.ndarray]],
    dim: int,
    n_components: int,
    n_restarts: int,
    n_iter: int,
    start: Callable[[int], np.ndarray],
    releaser: Releaser | None = None,
    online: bool = False,
    keep_trajectory: bool = False,
    deflate: Callable[[float, np.ndarray], None] | None = None,
) -> Generator[Any, Any, TensorPowerResult]:
    """The engine: yields ``query(U, component, step)``, receives its aggregate, returns the eigenpairs.

    Parameters
    ----------
    query
        Builds the request for the iterate ``U`` (dim×L) at ``(component, step)``.
    answer
        Turns the request's aggregate into the exact ``(T(I,u,u) dim×L, T(u,u,u) L)`` before deflation.
    start
        ``start(component)``: the L start vectors (dim×L, not yet normalised); data-independent.
    releaser
        For Alg. 3: releases each vector and scalar query with noise. None: exact (Alg. 1 / Alg. 2).
    online
        Alg. 2 (faithful): R queries per component, each on fresh data, λ̂ evaluated on the last batch at the
        pre-update iterate ``u_{R−1}``. Otherwise Alg. 1: R vector queries, then a scalar query at ``u_R``.
    deflate
        Called with each pair found when the input deflates itself explicitly (``T ← T − λ̂ v̂^{⊗3}``); the engine
        then does not subtract ``D``. None: implicit deflation.
    """
    weights = np.zeros(0)
    vectors = np.zeros((dim, 0))
    found_weights = np.zeros(0)
    found_vectors = np.zeros((dim, 0))
    trajectory: list[np.ndarray] = []
    n_queries = 0
    for i in range(n_components):
        u = _unit_columns(releaser.start(i, dim, n_restarts) if releaser is not None else start(i))  # Alg. 1, line 3
        if keep_trajectory:
            trajectory.append(u)
        n_steps = n_iter if online else n_iter + 1
        lam = np.zeros(n_restarts)
        for t in range(n_steps):
            aggregate = yield query(u, i, t)
            n_queries += 1
            vec, sca = answer(aggregate, u)
            final = t == n_iter and not online
            if online and t == n_iter - 1:  # Alg. 2, line 10: λ̃ on the last batch at u_{R−1}
                lam = np.asarray(sca - K.deflation_scalar(weights, vectors, u), dtype=np.float64)
            if final:  # Alg. 1, line 5 / Alg. 3, line 10
                exact = np.asarray(sca - K.deflation_scalar(weights, vectors, u), dtype=np.float64)
                lam = releaser.scalar(i, exact, u) if releaser is not None else exact
                continue
            exact_vec = vec - K.deflation_vector(weights, vectors, u)  # Alg. 2, line 7 / Alg. 3, line 6
            released = releaser.vector(i, t, exact_vec, u) if releaser is not None else exact_vec
            u = _unit_columns(released, u)  # line 4 / Alg. 3, line 8
            if keep_trajectory:
                trajectory.append(u)
        best = int(np.argmax(lam))
        if deflate is not None:
            deflate(float(lam[best]), u[:, best].copy())
            found_weights = np.append(found_weights, lam[best])
            found_vectors = np.column_stack([found_vectors, u[:, best]])
        else:
            weights = np.append(weights, lam[best])
            vectors = np.column_stack([vectors, u[:, best]])  # deflation (line 6), kept implicit
    if deflate is not None:
        weights, vectors = found_weights, found_vectors
    return TensorPowerResult(
        eigenvalues=weights,
        components=vectors.T.copy(),
        n_queries=n_queries,
        events=tuple(getattr(releaser, "events", ())),
        trajectory=tuple(trajectory),
    )


def drive(run: Generator[Any, Any, TensorPowerResult], execute: Callable[[Any], Any]) -> TensorPowerResult:
    """Run the engine in this process, answering each request with ``execute``."""
    try:
        request = next(run)
        while True:
            request = run.send(execute(request))
    except StopIteration as stop:
        return stop.value


def gaussian_starts(rng: np.random.Generator, dim: int, n_restarts: int) -> Callable[[int], np.ndarray]:
    """Start vectors uniform on the sphere (normalised later): a standard Gaussian d×L per component."""
    return lambda component: rng.standard_normal((dim, n_restarts))


#: The largest Frobenius norm of an explicit tensor: ``T(I,u,u)`` and ``T(u,u,u)`` are at most ‖T‖_F for a unit u,
#: and the iterates' squared norms must stay far from float64's overflow (about 1.8e308).
MAX_TENSOR_NORM = 1e150


def check_tensor(tensor: Any) -> np.ndarray:
    """A finite symmetric d×d×d float64 array of Frobenius norm at most :data:`MAX_TENSOR_NORM`, or an error saying
    what is wrong."""
    t = np.asarray(tensor, dtype=np.float64)
    if t.ndim != 3 or not (t.shape[0] == t.shape[1] == t.shape[2]) or t.shape[0] < 1:
        raise InvalidInputError(f"expected a symmetric d×d×d tensor; got shape {t.shape}; pass a cubic array")
    if not np.isfinite(t).all():
        raise InvalidInputError("the tensor holds a NaN or infinite value; remove it before the decomposition")
    if safe_norm(t) > MAX_TENSOR_NORM:  # ‖T(I,u,u)‖ ≤ ‖T‖_F for unit u
        raise InvalidInputError(
            "the tensor's Frobenius norm exceeds 1e150: the squared norms of its power iterates would overflow "
            "float64; divide it by a constant before the decomposition (its eigenvalues scale by the same constant)"
        )
    scale = max(float(np.abs(t).max()), 1e-300)
    for axes in ((1, 0, 2), (0, 2, 1), (2, 1, 0)):
        if not np.allclose(t, t.transpose(axes), rtol=0.0, atol=1e-12 * scale):
            raise InvalidInputError(
                f"the tensor is not symmetric (it changes under the axis permutation {axes}); symmetrize it, e.g. "
                "the mean over the six permutations"
            )
    return t


def tensor_power_method(
    tensor: Any,
    *,
    n_components: int,
    n_restarts: int = 10,
    n_iter: int = 20,
    seed: int | None = None,
    deflation: str = "implicit",
    keep_trajectory: bool = False,
) -> TensorPowerResult:
    """Alg. 1 on an explicit symmetric tensor (non-private).

    Parameters
    ----------
    tensor
        Symmetric d×d×d array.
    n_components, n_restarts, n_iter
        k, L and R of the paper.
    seed
        Seed of the start vectors.
    deflation
        ``"implicit"`` (subtract ``Σ λ̂_j (v̂_jᵀu)² v̂_j``) or ``"explicit"`` (``T ← T − λ̂ v̂^{⊗3}``, Alg. 1 line 6);
        they give the same iterates.
    """
    t = check_tensor(tensor)
    dim = t.shape[0]
    check_counts(n_components, n_restarts, n_iter, dim)
    if deflation not in ("implicit", "explicit"):
        raise InvalidParameterError(f"deflation must be 'implicit' or 'explicit'; got {deflation!r}")
    rng = np.random.default_rng(seed)
    current = {"tensor": t.copy()}

    def explicit(weight: float, vector: np.ndarray) -> None:  # Alg. 1, line 6, literally
        current["tensor"] = current["tensor"] - weight * np.einsum("i,j,k->ijk", vector, vector, vector)

    run = power_run(query=lambda u, i, s: u, answer=lambda agg, u: agg, dim=dim, n_components=n_components,
                    n_restarts=n_restarts, n_iter=n_iter, start=gaussian_starts(rng, dim, n_restarts),
                    keep_trajectory=keep_trajectory, deflate=explicit if deflation == "explicit" else None)
    return drive(run, lambda u: (K.dense_vector(current["tensor"], u), K.dense_scalar(current["tensor"], u)))


def run_on_source(source: Any, client: Any, run: Generator[Any, Any, Any], persist: bool | None = None,
                  choice: Any = None) -> Any:
    """Drive ``run`` over ``source`` (one pass per request): in this process (``client="local"``, or ``choice``
    from :func:`dppca_dask.pca`'s executor choice saying so) or on Dask."""
    from dppca_dask._execution import execute as _execute

    return _execute(source, client, persist, run, choice)


def moment_power_method(
    data: Any,
    *,
    n_components: int,
    n_restarts: int = 10,
    n_iter: int = 20,
    seed: int | None = None,
    client: Any = "local",
    persist: bool | None = None,
) -> TensorPowerResult:
    """Alg. 1 on the implicit empirical third moment ``T̂ = (1/n) Σ x^{⊗3}`` of a store's rows (non-private).

    Each iteration is one pass over the data: ``P = XU``, ``T̂(I,U,U) = Xᵀ(P∘P)/n``, ``T̂(u,u,u) = mean(P∘³)``,
    all L restarts together (the paper's "reuse data" mode; see :func:`online_power_method` for Alg. 2).
    """
    from dppca_dask.coordinator import as_source
    from dppca_dask.methods.tensor.requests import MomentStep

    source = as_source(data)
    dim, n = source.n_cols, source.n_rows
    check_counts(n_components, n_restarts, n_iter, dim)
    if n < 1:
        raise InvalidInputError("the store has no rows; the moment tensor needs at least one")
    rng = np.random.default_rng(seed)
    run = power_run(
        query=lambda u, i, t: MomentStep(u),
        answer=lambda agg, u: (agg[0] / n, agg[1] / n),
        dim=dim, n_components=n_components, n_restarts=n_restarts, n_iter=n_iter,
        start=gaussian_starts(rng, dim, n_restarts),
    )
    return run_on_source(source, client, run, persist)


def online_power_method(
    data: Any,
    *,
    n_components: int,
    n_restarts: int = 10,
    n_iter: int = 10,
    partitions_per_step: int = 1,
    seed: int | None = None,
    client: Any = "local",
    persist: bool | None = None,
) -> TensorPowerResult:
    """Alg. 2, the online tensor power method: each iteration reads fresh partitions, each row used once.

    Iteration t of component i reads the next ``partitions_per_step`` partitions of the store (the paper's batch of
    n rows, here n = the rows of those partitions); ``n_components · n_iter · partitions_per_step`` partitions are
    needed. The state is the L iterates and the k pairs found, O(d(k + L)) numbers (Prop. 3.1); λ̂ is evaluated
    on the last batch at the pre-update iterate ``u_{R−1}``, as the paper prints it.

    Raises
    ------
    InvalidParameterError
        If the store has fewer partitions than ``n_components · n_iter · partitions_per_step`` (too few rows for
        the paper's n·k·R).
    """
    from dppca_dask.coordinator import as_source
    from dppca_dask.methods.tensor.requests import MomentStep

    source = as_source(data)
    dim = source.n_cols
    check_counts(n_components, n_restarts, n_iter, dim)
    if isinstance(partitions_per_step, bool) or not isinstance(partitions_per_step, (int, np.integer)) \
            or partitions_per_step < 1:
        raise InvalidParameterError(f"partitions_per_step must be an integer >= 1; got {partitions_per_step!r}")
    needed = n_components * n_iter * partitions_per_step
    if source.n_partitions < needed:
        raise InvalidParameterError(
            f"the online method reads fresh rows at every step: n_components·n_iter·partitions_per_step = {needed} "
            f"partitions are needed, the input has {source.n_partitions}; use fewer iterations or components, or "
            "more (smaller) partitions, or the reuse-data mode (moment_power_method)"
        )
    rng = np.random.default_rng(seed)

    def batch(i: int, t: int) -> list[int]:
        first = (i * n_iter + t) * partitions_per_step
        return list(range(first, first + partitions_per_step))

    def query(u: np.ndarray, i: int, t: int) -> Any:
        return MomentStep(u, partitions=batch(i, t))

    def answer(agg: Any, u: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        n = max(float(agg[2]), 1.0)  # the batch's rows (public partition sizes)
        return agg[0] / n, agg[1] / n

    run = power_run(query=query, answer=answer, dim=dim, n_components=n_components, n_restarts=n_restarts,
                    n_iter=n_iter, start=gaussian_starts(rng, dim, n_restarts), online=True)
    return run_on_source(source, client, run, persist)
