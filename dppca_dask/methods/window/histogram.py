"""The spectral histogram (seed 001, spec §5 "recommended core"), one checkpoint per partition.

State: checkpoints ``(t_i, K_i)`` with ``t_1 < … < t_ℓ`` partition indices and ``K_i`` the exact Gram of the
clipped rows of partitions ``t_i..T``. Appending partition T (its Gram ``G_T``):

1. expiry: while ``ℓ ≥ 2`` and ``t_2 ≤ s`` (s: the first partition of the current window), drop checkpoint 1 —
   this keeps ``t_1 ≤ s``, and ``s < t_2`` whenever ``ℓ ≥ 2`` (the window sandwich ``K_2 ⪯ A_WᵀA_W ⪯ K_1``,
   erratum E6's corrected order);
2. ``K_i += G_T`` for every checkpoint, checkpoint 1 included (erratum E7), and ``(T, G_T)`` is appended;
3. Update (Alg. 6): for i = 1, 2, …: among ``p ∈ (i, ℓ−1]`` that are (1−η)-close to i take the largest j and
   delete ``i+1..j−1``. Two rules say what close is:

   - ``pruning="partitions"`` (the default of a release): ``(1−η)·n_i ≤ n_p`` with ``n_i = T − t_i + 1`` the
     number of partitions checkpoint i holds. The rule reads the partition table only, so which checkpoints are
     kept — and which partitions a release covers — is a function of public values (partition indices and
     timestamps), never of the data: a release of ``K_1`` is the mechanism run on a public set of rows and its
     guarantee is unconditional. It keeps ``O(log W / η)`` checkpoints and covers at most ``W/(1−η)`` partitions
     for a window of W partitions (consecutive checkpoints are close or adjacent: if ``t_2 = t_1 + 1`` then
     ``t_1 = s``; else ``n_1 ≤ n_2/(1−η) < W/(1−η)``).
   - ``pruning="spectral"`` (the paper's): ``(1−η)(K_i + λI) ⪯ K_p + λI``. The Loewner order of exact Grams is
     exact, so closeness once reached persists and the count obeys the log-det bound
     ``ℓ ≤ 3 + 2·[ln det(K_1+λI) − ln det(K_ℓ+λI)]/(−ln(1−η))`` (§9 check 6), but the checkpoints kept follow the
     data: one row added to a partition changes which partitions a release covers (erratum E8: the paper's proofs
     treat that choice as post-processing, and it is not). A release from it holds its guarantee only
     **conditional on the released checkpoint** ``t_1``; it is offered to reproduce the paper, labelled so, and
     is never charged to a budget as an (ε, δ) release.

The state is ``ℓ·d²`` numbers instead of the window's rows; it is as sensitive as the data and is stored
owner-only beside the store.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dppca_dask.errors import InvalidParameterError, StoreCorruptError

__all__ = ["PRUNINGS", "SpectralHistogram", "histogram_path", "loewner_leq", "partition_checkpoints"]

#: Relative tolerance of the PSD test.
PSD_TOL = 1e-10

#: Pruning rules: ``"partitions"`` (public partition counts; unconditional) and ``"spectral"`` (the paper's
#: Loewner test on the data; conditional guarantee).
PRUNINGS: tuple[str, ...] = ("partitions", "spectral")


def _close_by_count(starts: list[int], last: int, eta: float, i: int) -> int | None:
    """The largest p in ``(i, ℓ−1)`` (0-based, the newest exempt) with ``(1−η)·n_i ≤ n_p``, or ``None``."""
    n_i = last - starts[i] + 1
    found = None
    for p in range(i + 1, len(starts) - 1):
        if (1.0 - eta) * n_i <= last - starts[p] + 1:
            found = p
        else:  # n_p decreases in p: no later p is close
            break
    return found


def partition_checkpoints(starts: list[int], added: list[tuple[int, int]], eta: float) -> list[int]:
    """The checkpoints ``pruning="partitions"`` keeps after adding the partitions ``added``, given as
    ``(index, window_start)`` pairs in order, to a structure with checkpoints ``starts``: the expiry and the
    count rule of the module docstring, on partition indices only (public), so a release's coverage is known before
    any partition is read."""
    out = list(starts)
    for index, window_start in added:
        while len(out) >= 2 and out[1] <= window_start:
            del out[0]
        out.append(int(index))
        _prune_by_count(out, int(index), eta)
    return out


def _prune_by_count(starts: list[int], last: int, eta: float) -> None:
    """Alg. 6's deletions with the count rule, in place."""
    i = 0
    while i <= len(starts) - 3:
        j = _close_by_count(starts, last, eta, i)
        if j is not None and j > i + 1:
            del starts[i + 1 : j]
        i += 1


def loewner_leq(x: np.ndarray, y: np.ndarray, c: float) -> bool:
    """``c·X ⪯ Y``: the least eigenvalue of ``Y − cX`` is ≥ −tol·max(1, tr X) (spec A0; ``tr X ≥ λ_max(X)`` for
    the PSD checkpoints, a cheaper scale)."""
    diff = y - c * x
    lowest = float(np.linalg.eigvalsh((diff + diff.T) / 2.0)[0])
    return lowest >= -PSD_TOL * max(1.0, float(np.trace(x)))


@dataclass
class SpectralHistogram:
    """Exact-Gram checkpoints with the paper's pruning (η) and expiry; see the module docstring."""

    dim: int
    eta: float
    """Pruning threshold η in (0, 1): checkpoints between i and j go once ``(1−η)K_i ⪯ K_j`` (plus λI)."""
    regularizer: float
    """Public λ > 0 added to every checkpoint before the PSD tests (the floor of the log-det bound)."""
    starts: list[int] = field(default_factory=list)
    grams: list[np.ndarray] = field(default_factory=list)
    last: int = -1
    """Index of the last partition added (−1: none)."""
    pruning: str = "spectral"
    """``"partitions"`` (public counts; unconditional) or ``"spectral"`` (the paper's; conditional)."""

    def __post_init__(self) -> None:
        if self.pruning not in PRUNINGS:
            raise InvalidParameterError(f"pruning must be one of {', '.join(PRUNINGS)}; got {self.pruning!r}")
        if not (isinstance(self.eta, (int, float)) and 0 < self.eta < 1):
            raise InvalidParameterError(f"eta must be in (0, 1); got {self.eta!r}")
        if not (isinstance(self.regularizer, (int, float)) and math.isfinite(self.regularizer)
                and self.regularizer > 0):
            raise InvalidParameterError(f"regularizer must be finite and > 0; got {self.regularizer!r}")

    @property
    def n_checkpoints(self) -> int:
        return len(self.starts)

    @property
    def nbytes(self) -> int:
        """Bytes of the checkpoints (8·ℓ·d²)."""
        return 8 * self.n_checkpoints * self.dim * self.dim

    def add(self, index: int, gram: np.ndarray, *, window_start: int) -> None:
        """Append partition ``index`` (its exact Gram) when the window then starts at partition ``window_start``."""
        if index <= self.last:
            raise InvalidParameterError(f"partition {index} was already added (last {self.last}); add in order")
        gram = (np.asarray(gram, dtype=np.float64) + np.asarray(gram, dtype=np.float64).T) / 2.0
        while len(self.starts) >= 2 and self.starts[1] <= window_start:  # expiry (Alg. 7, lines 3–5)
            del self.starts[0], self.grams[0]
        for k in self.grams:  # every checkpoint, the first included (E7)
            k += gram
        self.starts.append(int(index))
        self.grams.append(gram.copy())
        self.last = int(index)
        self._update()

    @property
    def conditional(self) -> bool:
        """Whether a release from it holds its guarantee only conditional on the released checkpoint (the
        paper's spectral pruning chose it from the data)."""
        return self.pruning == "spectral"

    def _update(self) -> None:
        """Alg. 6 (Update): delete checkpoints strictly between i and the farthest j that is (1−η)-close."""
        if self.pruning == "partitions":
            kept = list(self.starts)
            _prune_by_count(kept, self.last, self.eta)
            by_start = dict(zip(self.starts, self.grams))
            self.starts[:] = kept
            self.grams[:] = [by_start[t] for t in kept]
            return
        lam = self.regularizer * np.eye(self.dim)
        c = 1.0 - self.eta
        i = 0
        while i <= len(self.starts) - 3:
            base = self.grams[i] + lam
            candidates = np.stack(self.grams[i + 1 : len(self.starts) - 1]) + lam  # p = i+1..ℓ−1 (newest exempt)
            diff = candidates - c * base
            lowest = np.linalg.eigvalsh((diff + np.swapaxes(diff, 1, 2)) / 2.0)[:, 0]
            close = np.flatnonzero(lowest >= -PSD_TOL * max(1.0, float(np.trace(base))))
            if close.size:
                j = i + 1 + int(close[-1])  # the largest close p
                if j > i + 1:
                    del self.starts[i + 1 : j], self.grams[i + 1 : j]
            i += 1

    def covering(self, window_start: int) -> tuple[int, np.ndarray]:
        """``(t_1, K_1)``: the first checkpoint, which starts at or before the window (``t_1 ≤ s``)."""
        if not self.starts:
            raise InvalidParameterError("the spectral histogram holds no partition yet")
        if self.starts[0] > window_start:
            raise InvalidParameterError(
                f"the spectral histogram starts at partition {self.starts[0]}, after the window's first partition "
                f"{window_start}; it was built for a shorter window: rebuild it (delete its directory)"
            )
        return self.starts[0], self.grams[0].copy()

    # -- persistence -----------------------------------------------------------------------------------------
    def save(self, directory: str, *, meta: Mapping[str, Any], options: Mapping[str, Any] | None = None) -> None:
        """Write ``state.npz`` and ``state.json`` (each replaced atomically) into the owner-only ``directory``
        (:func:`~dppca_dask.methods.window.gram.check_private_directory`).

        In object storage (``directory`` a URL beside the store, written with its storage ``options``) the arrays
        go to an object of a new name (``state-<random>.npz``) and ``state.json``, which names it, is written
        last: a reader sees the old state or the new one whole (the arrays the old one names are removed after)."""
        from dppca_dask._urls import is_url
        from dppca_dask.methods.window.gram import check_private_directory, join_state, write_private_file

        check_private_directory(directory, create=True)
        arrays = np.stack(self.grams) if self.grams else np.zeros((0, self.dim, self.dim))
        info = {"dim": self.dim, "eta": self.eta, "regularizer": self.regularizer, "last": self.last,
                "pruning": self.pruning, **meta}
        older = None
        if is_url(directory):
            import uuid

            older = _arrays_name(directory, options)
            info["arrays"] = f"state-{uuid.uuid4().hex}.npz"
        write_private_file(join_state(directory, info.get("arrays", "state.npz")),
                           lambda fh: np.savez(fh, grams=arrays, starts=np.asarray(self.starts, dtype=np.int64)),
                           options)
        write_private_file(join_state(directory, "state.json"), lambda fh: fh.write(json.dumps(info).encode()),
                           options)
        if older is not None:
            from dppca_dask.storage._remote import remove_object

            try:
                remove_object(join_state(directory, older), options)
            except Exception:  # noqa: BLE001 - the new state stands; an object left over is only space
                pass

    @classmethod
    def load(cls, directory: str, *, expect: Mapping[str, Any],
             options: Mapping[str, Any] | None = None) -> SpectralHistogram | None:
        """The saved state, or ``None`` when there is none; refuses a state built with other parameters (read with
        the store's storage ``options`` when ``directory`` is in object storage)."""
        import io

        from dppca_dask.methods.window.gram import check_private_directory, join_state, read_state, state_exists

        check_private_directory(directory)  # the release saves its exact Grams there
        path = join_state(directory, "state.json")
        if not state_exists(path, options):
            return None
        try:
            info = json.loads(read_state(path, options))
            arrays = read_state(join_state(directory, str(info.get("arrays", "state.npz"))), options)
            with np.load(io.BytesIO(arrays)) as data:
                grams, starts = data["grams"], data["starts"]
        except (OSError, ValueError, KeyError) as exc:
            raise StoreCorruptError(f"the spectral histogram in '{directory}' cannot be read ({type(exc).__name__}); "
                                    "delete the directory to rebuild it", source=directory) from None
        kept_rule = info.get("pruning", "spectral")  # states written before the rule was recorded: the paper's
        if "pruning" in expect and kept_rule != expect["pruning"]:
            raise InvalidParameterError(
                f"the spectral histogram in '{directory}' was built with pruning={kept_rule!r}, which chose its "
                f"checkpoints {'from the data' if kept_rule == 'spectral' else 'from the partition table'}; this "
                f"release asks for pruning={expect['pruning']!r}: delete the directory to start a structure with it "
                "(its next release starts at the window)"
            )
        for key, value in expect.items():
            if key != "pruning" and info.get(key) != value:
                raise InvalidParameterError(
                    f"the spectral histogram in '{directory}' was built with {key}={info.get(key)!r}, not {value!r}; "
                    "use its parameters, or delete the directory to rebuild it"
                )
        return cls(int(info["dim"]), float(info["eta"]), float(info["regularizer"]),
                   [int(s) for s in starts], [g.copy() for g in grams], int(info["last"]),
                   str(info.get("pruning", "spectral")))


def histogram_path(store_path: str, name: str) -> str:
    """Directory of a store's spectral histogram ``name``, beside the store (owner-only, like the store; in object
    storage, a prefix beside it in its bucket); named from the store's real path (links resolved), so that every
    path to one store finds one histogram."""
    from dppca_dask.methods.window.gram import beside_store

    return beside_store(store_path, f"window-{name}")


def _arrays_name(directory: str, options: Mapping[str, Any] | None) -> str | None:
    """The arrays object the saved state in object storage names (``None``: no state, or an unreadable one)."""
    from dppca_dask.methods.window.gram import join_state, read_state

    try:
        name = json.loads(read_state(join_state(directory, "state.json"), options)).get("arrays")
    except (OSError, ValueError, AttributeError):
        return None
    return str(name) if isinstance(name, str) and "/" not in name else None
