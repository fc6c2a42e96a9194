"""Tensor decomposition (seed 002): topic recovery against ε, the row-level moment mechanism with and without
adaptive filtering, Alg. 3's utility against λ₁, and the time of one moment step against plain Dask.

1. Topics: a generated single-topic corpus (LDA in the α₀ → 0 limit, ``lda_corpus``); median total-variation
   distance of the matched topics for the non-private method of moments, scikit-learn's
   LatentDirichletAllocation (online, non-private) and the private topic model across ε (δ = 1e-6).
2. Row-level private TPM on Σ x^{⊗3} (beyond the paper): |v̂ᵀv| against ε, fixed worst-case c³√L calibration
   against adaptive filtering (SVT-chosen θ), on the spec §3.3 generator (rows clipped to c = 1).
3. Alg. 3 on explicit tensors (entry-orbit relation), d = 32, k = 1: |v̂ᵀv| against λ₁ for an incoherent
   (Hadamard) and a coherent (e₁) component, ε = 1, δ = 1e-5, L = R = 10.
4. Seconds per moment step (Xᵀ((XU)∘²), L = 8) through the coordinator (in-process executor) against the same
   contraction as a plain ``dask.array`` expression on the same rows (threaded scheduler).

Seeded noise everywhere (results are not private; irrelevant for measuring error). Plots go to
``benchmarks/results/tensor_*.png``.

    python benchmarks/bench_tensor.py --quick          # < 2 minutes
    python benchmarks/bench_tensor.py                   # 200,000 × 5,000, 10 topics (tens of minutes)
"""

from __future__ import annotations

import _common  # noqa: F401  (thread environment first)

import argparse
import math
import os
import time
import warnings

import numpy as np

from dppca_dask.mechanisms.testing import AuditingNoiseSource
from dppca_dask.methods.tensor.corpora import lda_corpus, total_variation
from dppca_dask.methods.tensor.private import private_tensor_power_method
from dppca_dask.methods.tensor.rows import private_moment_power_method
from dppca_dask.methods.tensor.topics import topics

RESULTS = os.path.join(os.path.dirname(__file__), "results")


def topic_table(n_docs: int, n_words: int, n_topics: int, epsilons: list[float], seed: int = 1) -> list[dict]:
    from sklearn.decomposition import LatentDirichletAllocation

    corpus = lda_corpus(n_docs, n_words, n_topics, doc_length=50, topic_concentration=0.02, seed=seed)
    rows = []
    t = time.perf_counter()
    exact = topics(corpus.counts, n_topics=n_topics, epsilon=None, delta=None, private=False, client="local",
                   seed=seed)
    rows.append({"method": "method of moments (non-private)", "epsilon": math.inf,
                 "median_tv": float(np.median(total_variation(exact.topics, corpus.topics))),
                 "seconds": time.perf_counter() - t})
    t = time.perf_counter()
    lda = LatentDirichletAllocation(n_components=n_topics, learning_method="online", max_iter=5, random_state=seed,
                                    batch_size=4096)
    lda.fit(corpus.counts)
    found = lda.components_ / lda.components_.sum(axis=1, keepdims=True)
    rows.append({"method": "scikit-learn LDA (non-private)", "epsilon": math.inf,
                 "median_tv": float(np.median(total_variation(found, corpus.topics))),
                 "seconds": time.perf_counter() - t})
    for eps in epsilons:
        t = time.perf_counter()
        r = topics(corpus.counts, n_topics=n_topics, epsilon=eps, delta=1e-6, client="local",
                   noise=AuditingNoiseSource(seed))
        rows.append({"method": "private topic model", "epsilon": eps,
                     "median_tv": float(np.median(total_variation(r.topics, corpus.topics))),
                     "seconds": time.perf_counter() - t})
    return rows


def row_table(epsilons: list[float], repeats: int) -> list[dict]:
    rng = np.random.default_rng(0)
    d, n, p = 16, 20000, 0.1
    v, _ = np.linalg.qr(rng.standard_normal((d, 1)))
    a = (1.0 / (p * (1 - p) * (1 - 2 * p))) ** (1 / 3) * ((rng.random((n, 1)) < p) - p)
    x = a @ v.T + 0.3 * rng.choice([-1.0, 1.0], size=(n, d))
    x /= np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1.0)
    rows = []
    for filtering in ("fixed", "adaptive"):
        for eps in epsilons:
            corr = [abs(float(private_moment_power_method(x, n_components=1, epsilon=eps, delta=1e-6,
                                                          filtering=filtering, n_iter=4,
                                                          noise=AuditingNoiseSource(s)).components[0] @ v[:, 0]))
                    for s in range(repeats)]
            rows.append({"filtering": filtering, "epsilon": eps, "median_corr": float(np.median(corr))})
    return rows


def alg3_table(lambdas: list[float], repeats: int) -> list[dict]:
    d = 32
    hadamard = np.array([[1.0]])
    while hadamard.shape[0] < d:
        hadamard = np.block([[hadamard, hadamard], [hadamard, -hadamard]])
    vectors = {"incoherent": hadamard[:, 3] / math.sqrt(d), "coherent": np.eye(d)[0]}
    rows = []
    for name, v in vectors.items():
        for lam in lambdas:
            t = lam * np.einsum("i,j,k->ijk", v, v, v)
            corr = [abs(float(private_tensor_power_method(t, n_components=1, epsilon=1.0, delta=1e-5, n_restarts=10,
                                                          n_iter=10, noise=AuditingNoiseSource(s)).components[0] @ v))
                    for s in range(repeats)]
            rows.append({"component": name, "lambda1": lam, "median_corr": float(np.median(corr))})
    return rows


def step_timing(n: int, d: int) -> dict:
    import dask
    import dask.array as da
    import scipy.sparse as sp

    from dppca_dask.coordinator import LocalExecutor, as_source
    from dppca_dask.methods.tensor.requests import MomentStep

    rng = np.random.default_rng(0)
    x = sp.random_array((n, d), density=0.01, rng=rng, format="csr")
    u = rng.standard_normal((d, 8))
    executor = LocalExecutor(as_source(x))
    executor.execute(MomentStep(u))
    t = time.perf_counter()
    for _ in range(3):
        executor.execute(MomentStep(u))
    ours = (time.perf_counter() - t) / 3
    dx = da.from_array(x.toarray(), chunks=(max(n // 8, 1), d))
    with dask.config.set(scheduler="threads"):
        (dx.T @ ((dx @ u) ** 2)).compute()
        t = time.perf_counter()
        for _ in range(3):
            (dx.T @ ((dx @ u) ** 2)).compute()
    plain = (time.perf_counter() - t) / 3
    return {"rows": n, "cols": d, "coordinator_s": ours, "plain_dask_dense_s": plain}


def plot(topic_rows: list[dict], row_rows: list[dict], alg3_rows: list[dict]) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:  # pragma: no cover
        return
    os.makedirs(RESULTS, exist_ok=True)
    fig, ax = plt.subplots(1, 3, figsize=(15, 4))
    private = [r for r in topic_rows if r["method"] == "private topic model"]
    ax[0].plot([r["epsilon"] for r in private], [r["median_tv"] for r in private], "o-", label="private MoM")
    for r in topic_rows:
        if r["epsilon"] == math.inf:
            ax[0].axhline(r["median_tv"], ls="--", label=r["method"], color="C1" if "moments" in r["method"] else "C2")
    ax[0].set_xscale("log"), ax[0].set_xlabel("epsilon"), ax[0].set_ylabel("median TV"), ax[0].legend()
    ax[0].set_title("topic recovery")
    for filtering in ("fixed", "adaptive"):
        sel = [r for r in row_rows if r["filtering"] == filtering]
        ax[1].plot([r["epsilon"] for r in sel], [r["median_corr"] for r in sel], "o-", label=filtering)
    ax[1].set_xscale("log"), ax[1].set_xlabel("epsilon"), ax[1].set_ylabel("median |v^T v_hat|"), ax[1].legend()
    ax[1].set_title("row-level moment TPM")
    for name in ("incoherent", "coherent"):
        sel = [r for r in alg3_rows if r["component"] == name]
        ax[2].plot([r["lambda1"] for r in sel], [r["median_corr"] for r in sel], "o-", label=name)
    ax[2].set_xscale("log"), ax[2].set_xlabel("lambda_1"), ax[2].legend(), ax[2].set_title("Alg. 3, eps=1")
    fig.tight_layout()
    fig.savefig(os.path.join(RESULTS, "tensor_benchmarks.png"), dpi=100)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (< 2 minutes)")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    from _common import table

    if args.quick:
        topic_rows = topic_table(20_000, 500, 5, [1.0, 4.0, 16.0, 64.0])
        row_rows = row_table([1.0, 4.0, 16.0], repeats=2)
        alg3_rows = alg3_table([1e2, 1e3, 1e4, 1e5], repeats=2)
        timing = step_timing(20_000, 2_000)
    else:
        topic_rows = topic_table(200_000, 5_000, 10, [0.5, 2.0, 8.0, 32.0])
        row_rows = row_table([0.5, 1.0, 2.0, 4.0, 8.0, 16.0], repeats=5)
        alg3_rows = alg3_table([1e2, 3e2, 1e3, 3e3, 1e4, 1e5], repeats=10)
        timing = step_timing(200_000, 5_000)
    print(table(topic_rows, ["method", "epsilon", "median_tv", "seconds"]))
    print()
    print(table(row_rows, ["filtering", "epsilon", "median_corr"]))
    print()
    print(table(alg3_rows, ["component", "lambda1", "median_corr"]))
    print()
    print(table([timing], ["rows", "cols", "coordinator_s", "plain_dask_dense_s"]))
    plot(topic_rows, row_rows, alg3_rows)


if __name__ == "__main__":
    main()
