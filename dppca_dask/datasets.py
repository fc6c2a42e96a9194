"""Generated test matrices (public, synthetic data for examples, tests and benchmarks).

``low_coherence_blocks`` reproduces the data of seed 004 spec §5: each row is ``nnz_per_row`` random sparse noise
entries plus a planted direction supported on ``support`` coordinates that carries ``signal_share`` of the row's
energy; rows have unit norm. The top direction then carries a small share of every row and the matrix is
incoherent, the regime where adaptive power iteration beats Analyze Gauss. With a large ``signal_share``
(``≳ 0.1``) the same generator gives the high-coherence-of-energy regime where it loses.

Blocks are generated independently from ``(seed, block index)``, so arbitrarily large matrices are produced in
bounded memory and in parallel, reproducibly.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

from dppca_dask.errors import InvalidParameterError

__all__ = ["PlantedSpec", "low_coherence_blocks", "low_coherence_matrix", "planted_direction", "write_low_coherence"]


@dataclass(frozen=True)
class PlantedSpec:
    """Parameters of the planted-direction generator."""

    n_rows: int
    n_cols: int
    nnz_per_row: int = 30
    support: int = 200
    signal_share: float = 0.003
    seed: int = 0

    def __post_init__(self) -> None:
        if self.n_rows < 0 or self.n_cols < 1:
            raise InvalidParameterError(f"shape must be non-negative with n_cols >= 1; got ({self.n_rows}, {self.n_cols})")
        if not 1 <= self.support <= self.n_cols:
            raise InvalidParameterError(f"support must be in [1, {self.n_cols}]; got {self.support}")
        if self.nnz_per_row < 1:
            raise InvalidParameterError(f"nnz_per_row must be >= 1; got {self.nnz_per_row}")
        if not 0.0 <= self.signal_share <= 1.0:
            raise InvalidParameterError(f"signal_share must be in [0, 1]; got {self.signal_share}")


def planted_direction(spec: PlantedSpec) -> np.ndarray:
    """The planted unit vector (dense, length d, supported on ``spec.support`` coordinates)."""
    rng = np.random.default_rng([spec.seed, 0x5EED])
    v = np.zeros(spec.n_cols)
    coords = rng.choice(spec.n_cols, size=spec.support, replace=False)
    v[coords] = rng.standard_normal(spec.support)
    return v / np.linalg.norm(v)


def _block(spec: PlantedSpec, v: np.ndarray, index: int, start: int, stop: int) -> sp.csr_array:
    rng = np.random.default_rng([spec.seed, 1, index])
    rows = stop - start
    k = spec.nnz_per_row
    cols = rng.integers(0, spec.n_cols, size=(rows, k))
    vals = rng.standard_normal((rows, k))
    vals /= np.linalg.norm(vals, axis=1, keepdims=True)
    noise = sp.csr_array(
        (vals.ravel(), (np.repeat(np.arange(rows), k), cols.ravel())), shape=(rows, spec.n_cols)
    )
    noise.sum_duplicates()
    norms = np.sqrt(np.asarray(noise.multiply(noise).sum(axis=1)).ravel())
    noise = sp.csr_array(sp.diags(1.0 / np.where(norms > 0, norms, 1.0)) @ noise)
    signs = rng.choice(np.array([-1.0, 1.0]), size=rows)
    support = np.flatnonzero(v)
    signal = sp.csr_array(
        (np.outer(signs, v[support]).ravel(), (np.repeat(np.arange(rows), support.size), np.tile(support, rows))),
        shape=(rows, spec.n_cols),
    )
    block = math.sqrt(1.0 - spec.signal_share) * noise + math.sqrt(spec.signal_share) * signal
    block = sp.csr_array(block)
    block.sum_duplicates()
    row_norms = np.sqrt(np.asarray(block.multiply(block).sum(axis=1)).ravel())
    return sp.csr_array(sp.diags(1.0 / np.where(row_norms > 0, row_norms, 1.0)) @ block)


def low_coherence_blocks(spec: PlantedSpec, *, rows_per_block: int = 50_000) -> Iterator[sp.csr_array]:
    """Yield the matrix in row blocks (each a ``csr_array`` of unit-norm rows)."""
    if rows_per_block < 1:
        raise InvalidParameterError(f"rows_per_block must be >= 1; got {rows_per_block}")
    v = planted_direction(spec)
    for index, start in enumerate(range(0, spec.n_rows, rows_per_block)):
        yield _block(spec, v, index, start, min(start + rows_per_block, spec.n_rows))


def low_coherence_matrix(spec: PlantedSpec) -> sp.csr_array:
    """The whole generated matrix in memory."""
    blocks = list(low_coherence_blocks(spec))
    if not blocks:
        return sp.csr_array((0, spec.n_cols))
    return sp.csr_array(sp.vstack(blocks, format="csr"))


def write_low_coherence(
    path: str | os.PathLike[str],
    spec: PlantedSpec,
    *,
    rows_per_partition: int | None = None,
    dtype: Any = np.float64,
    overwrite: bool = False,
    progress: bool | None = None,
) -> Any:
    """Generate the matrix straight into a store (bounded memory) and return the opened store."""
    from dppca_dask._progress import progress_bar
    from dppca_dask.storage import StoreWriter

    bar = progress_bar(total=spec.n_rows, desc="generating", unit="row", enabled=progress)
    try:
        with StoreWriter(
            path,
            n_cols=spec.n_cols,
            dtype=dtype,
            rows_per_partition=rows_per_partition,
            overwrite=overwrite,
            source={"kind": "generated", "generator": "low_coherence", **spec.__dict__},
        ) as writer:
            for block in low_coherence_blocks(spec, rows_per_block=min(rows_per_partition or 50_000, 50_000)):
                writer.append(block)
                bar.update(block.shape[0])
            return writer.commit()
    finally:
        bar.close()
