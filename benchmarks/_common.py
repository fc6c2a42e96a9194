"""Helpers shared by the benchmark scripts (not part of the package)."""

from __future__ import annotations

import os

# One BLAS thread per process before numpy loads: Dask workers provide the parallelism.
for _name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_name, "1")

import resource  # noqa: E402
import statistics  # noqa: E402
from collections.abc import Sequence  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402


def sin2(u: np.ndarray, v: np.ndarray) -> float:
    """Squared sine of the angle between two vectors (sign-invariant)."""
    u = u / np.linalg.norm(u)
    v = v / np.linalg.norm(v)
    return float(max(0.0, 1.0 - float(u @ v) ** 2))


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values))


def peak_rss_mib() -> float:
    """Peak resident memory of this process (MiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def worker_peak_rss_mib(client: Any) -> dict[str, float]:
    """Peak resident memory of each worker process (MiB)."""

    def peak() -> float:
        import resource as r

        return r.getrusage(r.RUSAGE_SELF).ru_maxrss / 1024.0

    return client.run(peak)


def table(rows: list[dict[str, Any]], columns: Sequence[str]) -> str:
    widths = {c: max(len(c), *(len(_fmt(r.get(c))) for r in rows)) for c in columns}
    lines = ["  ".join(c.rjust(widths[c]) for c in columns)]
    for r in rows:
        lines.append("  ".join(_fmt(r.get(c)).rjust(widths[c]) for c in columns))
    return "\n".join(lines)


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def local_cluster(**kwargs: Any) -> Any:
    """A ``LocalCluster`` whose workers start as the package's embedded cluster starts them (with
    ``dppca_dask.cluster.worker-environ`` and ``dppca_dask.cluster.dask-config``), so the figures are those of ``pca``
    and the other entry points."""
    from distributed import LocalCluster

    from dppca_dask.coordinator.client import embedded_cluster_settings

    with embedded_cluster_settings():
        return LocalCluster(**kwargs)
