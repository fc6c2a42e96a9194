"""The paper-literal sliding-window structures of seed 001, for reproduction only (``variant="paper"``).

- :class:`PaperWishartHistogram` (F2, Alg. 6–8): each checkpoint gets its own Wishart noise when it is created,
  rows are added exactly afterwards, pruning runs on the noisy matrices with threshold ``1 − η``, and the optional
  ORDER-FIX (Alg. 7, lines 12–14) deletes every checkpoint not above the new one. Erratum E5: with ORDER-FIX the
  window is not covered whenever noise dominates (``order_fix=False`` by default).
- :class:`PaperJLHistogram` (F1, Alg. 1–3): checkpoints ``Ã_i = σΦ + Σ g_s a_s`` with m = ⌈4r/η⌉ sketch rows and
  pruning with threshold ``1 − η/2``. Erratum E1: with m < d the checkpoints' row spaces differ and it never
  prunes (Θ(W) space).

Both draw their noise here, once per checkpoint (each a release of its own key), and allow **one** release: the
noise of a checkpoint is reused while exact rows keep being added, so two releases with the same first
checkpoint differ by exactly the rows in between (erratum E8). The library's structure is
:mod:`dppca_dask.methods.window.histogram` (exact Grams, noise at release time).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from dppca_dask.errors import InvalidParameterError, ReleaseError
from dppca_dask.mechanisms.noise import NoiseSource
from dppca_dask.mechanisms.wishart import jl_sigma, wishart_mechanism, wishart_tau

__all__ = ["PaperJLHistogram", "PaperWishartHistogram"]


def _psd_leq(x: np.ndarray, y: np.ndarray, c: float) -> bool:
    diff = y - c * x
    return float(np.linalg.eigvalsh((diff + diff.T) / 2.0)[0]) >= -1e-10 * max(1.0, float(np.trace(x)))


def _prune(starts: list[int], mats: list[np.ndarray], gram: Callable[[np.ndarray], np.ndarray], c: float) -> None:
    """Alg. 1 / Alg. 6: for each i, delete i+1..j−1 for the largest p = j ≤ ℓ−1 with ``c·K̃(i) ⪯ K̃(p)``."""
    i = 0
    while i <= len(starts) - 3:
        base = gram(mats[i])
        for p in range(len(starts) - 2, i, -1):
            if _psd_leq(base, gram(mats[p]), c):
                if p > i + 1:
                    del starts[i + 1 : p], mats[i + 1 : p]
                break
        i += 1


class PaperWishartHistogram:
    """Alg. 8 (Sliding-Priv) with Alg. 7 (Priv-Initialize, ``for i = 1..ℓ``, E7) and Alg. 6 (Update)."""

    def __init__(self, dim: int, *, window: int, eta: float, epsilon: float, delta: float, noise: NoiseSource,
                 tau_rule: str = "alg7", order_fix: bool = False) -> None:
        if not 0 < eta < 1:
            raise InvalidParameterError(f"eta must be in (0, 1); got {eta!r}")
        if window < 1:
            raise InvalidParameterError(f"window must be >= 1; got {window!r}")
        self.dim, self.window, self.eta = int(dim), int(window), float(eta)
        self.epsilon, self.delta, self.noise = epsilon, delta, noise
        self.tau_rule, self.order_fix = tau_rule, bool(order_fix)
        self.tau = wishart_tau(self.dim, epsilon=epsilon, delta=delta, rule=tau_rule)
        self.starts: list[int] = []
        self.mats: list[np.ndarray] = []
        self.t = 0
        self._released = False

    def add(self, row: np.ndarray) -> None:
        """Priv-Initialize then Update for the next row (``‖row‖ ≤ 1``)."""
        self.t += 1
        t = self.t
        if len(self.starts) >= 2 and self.starts[1] < t - self.window + 1:  # expiry
            del self.starts[0], self.mats[0]
        outer = np.outer(row, row)
        fresh, _, _ = wishart_mechanism(outer, row_norm_bound=1.0, epsilon=self.epsilon, delta=self.delta,
                                        noise=self.noise, release=f"paper-f2/checkpoint-{t}", tau_rule=self.tau_rule)
        for m in self.mats:
            m += outer
        if self.order_fix:  # Alg. 7, lines 12–14: the first p with K̃(p) not ⪰ K̃_new, and everything after it
            for p, m in enumerate(self.mats):
                if not _psd_leq(fresh, m, 1.0):
                    del self.starts[p:], self.mats[p:]
                    break
        self.starts.append(t)
        self.mats.append(fresh)
        _prune(self.starts, self.mats, lambda m: m, 1.0 - self.eta)

    def release(self) -> tuple[int, np.ndarray]:
        """``(t_1, K̃(1))``, once (E8)."""
        if self._released:
            raise ReleaseError("the paper-literal structure releases once: its checkpoints' noise is fixed, and a "
                               "second release would reveal the rows added in between (seed 001, erratum E8)")
        self._released = True
        return self.starts[0], self.mats[0].copy()


class PaperJLHistogram:
    """Alg. 3 (Sliding-Priv-Approx) with Alg. 2 (Priv-Initialize-Approx) and Alg. 1 (Update-Approx)."""

    def __init__(self, dim: int, *, window: int, eta: float, rank_bound: int, epsilon: float, delta: float,
                 noise: NoiseSource) -> None:
        if not 0 < eta < 1:
            raise InvalidParameterError(f"eta must be in (0, 1); got {eta!r}")
        self.dim, self.window, self.eta = int(dim), int(window), float(eta)
        self.m = int(math.ceil(4 * rank_bound / eta))
        self.sigma = jl_sigma(sketch_rows=1, rank_bound=rank_bound, epsilon=epsilon, delta=delta)  # Alg. 3's σ
        self.noise = noise
        std = math.sqrt(eta / (4 * rank_bound))  # E9: g has Φ's variance η/(4r) = 1/m
        with noise.release("paper-f1/phi", data_independent=True):
            self.phi = np.asarray(noise.gaussian(std, size=(self.m, self.dim)))
        self.std = std
        self.starts: list[int] = []
        self.mats: list[np.ndarray] = []
        self.t = 0

    def add(self, row: np.ndarray) -> None:
        self.t += 1
        t = self.t
        if len(self.starts) >= 2 and self.starts[1] < t - self.window + 1:
            del self.starts[0], self.mats[0]
        with self.noise.release(f"paper-f1/g-{t}", data_independent=True):
            g = np.asarray(self.noise.gaussian(self.std, size=(self.m,)))
        update = np.outer(g, row)
        for m in self.mats:  # every checkpoint, the first included (E7)
            m += update
        self.starts.append(t)
        self.mats.append(self.sigma * self.phi + update)
        _prune(self.starts, self.mats, lambda a: a.T @ a, 1.0 - self.eta / 2.0)
