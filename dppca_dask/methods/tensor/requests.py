"""What the tensor power method asks of a store, and how the coordinator executes it (one pass per request).

Each request carries only public or released values (the iterates, the released whitening), never aggregates.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from dppca_dask.coordinator.driver import StepPlan, load_partition, register_request
from dppca_dask.kernels import tensor as K

__all__ = ["CountCheck", "FirstMoment", "MomentStep", "PairStep", "TopicStep"]


@dataclass(frozen=True)
class MomentStep:
    """``(Σ (xᵀu)² x, Σ (xᵀu)³, rows)`` for each column of ``u`` (d×L) over the rows of ``partitions`` (None: all)."""

    u: np.ndarray
    row_norm_bound: float = float("inf")
    partitions: Sequence[int] | None = None


@dataclass(frozen=True)
class TopicStep:
    """Distinct-triples moment of word counts contracted with ``(I, v, v)`` and ``(v, v, v)``, ``v`` d×L.

    With ``with_pairs``, also the distinct-pairs moment times ``v`` (for LDA's α₀ correction), same documents.
    """

    v: np.ndarray
    with_pairs: bool = False
    whiten: np.ndarray | None = None
    """With ``clip``: return ``Σ f·Wᵀ P3_doc(I,v,v)`` (k×L), each document clipped per column to ``clip``."""
    clip: np.ndarray | None = None
    lda: tuple[float, np.ndarray, np.ndarray] | None = None
    """With ``clip``: LDA's correction ``(b, M̂1ᵀv, WᵀM̂1)`` applied to each document before it is clipped."""


@dataclass(frozen=True)
class PairStep:
    """Distinct-pairs moment of word counts times ``y`` (d×k), over documents of at least three words, each
    document's product clipped to Frobenius norm ``clip`` (None: no clipping)."""

    y: np.ndarray
    clip: float | None = None


@dataclass(frozen=True)
class FirstMoment:
    """``(Σ c/ℓ, number of documents)`` over documents of at least three words (d + 1 numbers)."""


@dataclass(frozen=True)
class CountCheck:
    """For each partition, the first row whose counts are negative or not whole (-1: none)."""


def _moment_task(item: Any, u: np.ndarray, *, row_norm_bound: float) -> tuple[np.ndarray, np.ndarray, np.float64]:
    part = load_partition(item)
    vector, scalar = K.moment_partial(part.block, part.norms, u, row_norm_bound=row_norm_bound)
    return vector, scalar, np.float64(part.block.shape[0])  # the partition's rows: public store metadata


def _topic_task(item: Any, payload: tuple[Any, ...], *, with_pairs: bool) -> tuple[np.ndarray, ...]:
    block = load_partition(item).block
    v, whiten, clip, lda = payload
    if clip is not None:
        return K.whitened_topic_partial(block, v, whiten, clip, lda)
    vector, scalar = K.topic_partial(block, v)
    if with_pairs:
        return vector, scalar, K.pair_partial(block, v, min_length=3)
    return vector, scalar


def _pair_task(item: Any, y: np.ndarray, *, clip: float | None) -> np.ndarray:
    return K.pair_partial(load_partition(item).block, y, min_length=3, clip=clip)


def _first_task(item: Any) -> np.ndarray:
    return K.first_partial(load_partition(item).block, min_length=3)


def _check_task(item: Any) -> dict[int, int]:
    part = load_partition(item)
    return {part.index: K.count_violation(part.block)}


def _sum_pairs(*parts: tuple[np.ndarray, ...]) -> tuple[np.ndarray, ...]:
    out = [np.array(x, dtype=np.float64, copy=True) for x in parts[0]]
    for part in parts[1:]:
        for acc, x in zip(out, part, strict=True):
            acc += x
    return tuple(out)


def _sum(*parts: np.ndarray) -> np.ndarray:
    out = np.array(parts[0], dtype=np.float64, copy=True)
    for p in parts[1:]:
        out += p
    return out


def _merge_dicts(*parts: dict[int, int]) -> dict[int, int]:
    out: dict[int, int] = {}
    for p in parts:
        out.update(p)
    return out


register_request(
    MomentStep,
    lambda r: StepPlan(_moment_task, {"row_norm_bound": r.row_norm_bound}, r.u, _sum_pairs,
                       partitions=None if r.partitions is None else list(r.partitions),
                       empty=lambda d: (np.zeros((d, r.u.shape[1])), np.zeros(r.u.shape[1]), np.float64(0))),
)
register_request(
    TopicStep,
    lambda r: StepPlan(_topic_task, {"with_pairs": r.with_pairs}, (r.v, r.whiten, r.clip, r.lda), _sum_pairs,
                       empty=lambda d: (np.zeros((d if r.clip is None else r.whiten.shape[1], r.v.shape[1])),
                                        np.zeros(r.v.shape[1]))
                       + ((np.zeros((d, r.v.shape[1])),) if r.with_pairs else ())),
)
register_request(FirstMoment, lambda r: StepPlan(_first_task, {}, None, _sum, empty=lambda d: np.zeros(d + 1)))
register_request(PairStep, lambda r: StepPlan(_pair_task, {"clip": r.clip}, r.y, _sum,
                                              empty=lambda d: np.zeros((d, r.y.shape[1]))))
register_request(CountCheck, lambda r: StepPlan(_check_task, {}, None, _merge_dicts, empty=lambda d: {}))
