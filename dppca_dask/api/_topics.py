"""The entry point :func:`topics`: differentially private topics of a document-word count matrix.

Open the corpus, plan from public values (the vocabulary's size, the budget split and the noise calibration of
every release), execute the method of moments with the private tensor power method (its steps in
:mod:`dppca_dask.methods.tensor.topics`), and report.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import warnings
from typing import Any, cast

import numpy as np

from dppca_dask.errors import InvalidParameterError
from dppca_dask.methods.tensor.topics import (
    DEFAULT_PCA_ITER,
    DEFAULT_PCA_SHARE,
    DEFAULT_RESTARTS,
    DEFAULT_TENSOR_CLIP,
    DEFAULT_TENSOR_ITER,
    DOCUMENT,
    TopicResult,
    _check_params,
    _topic_run,
    clipping_bounds,
    private_calibration,
)

__all__ = ["topics"]


def topics(
    data: Any,
    *,
    n_topics: int,
    epsilon: float | None,
    delta: float | None,
    alpha0: float = 0.0,
    n_restarts: int = DEFAULT_RESTARTS,
    n_iter: int = DEFAULT_TENSOR_ITER,
    pca_iter: int = DEFAULT_PCA_ITER,
    pca_share: float = DEFAULT_PCA_SHARE,
    pair_bound: float | None = None,
    tensor_clip: float = DEFAULT_TENSOR_CLIP,
    private: bool = True,
    client: Any = None,
    executor: str = "auto",
    persist: bool | None = None,
    seed: int | None = None,
    noise: Any = None,
    storage_options: Any = None,
    ledger: Any = None,
    dataset: str | None = None,
    job_id: str | None = None,
) -> TopicResult:
    """Differentially private topics of a document-word count matrix (rows: documents, columns: words).

    Parameters
    ----------
    data
        A store path, :class:`~dppca_dask.MatrixStore`, scipy sparse matrix or numpy array of word counts.
    n_topics
        K ≤ d.
    epsilon, delta
        Total budget of the run (both parts inside it). Ignored (may be None) with ``private=False``.
    alpha0
        0: single-topic model; > 0: LDA with Dirichlet concentration Σα = alpha0 (public).
    n_restarts, n_iter
        L and R of the tensor power method (K·L·(R+1) releases).
    pca_iter
        Subspace iterations of the private whitening.
    pca_share
        Share of the budget (in 1/m², i.e. zCDP ρ) spent on whitening.
    pair_bound
        Public clipping bound (in (0, 1]) of each document's second-moment product ``‖P2_doc Y‖_F`` in the private
        whitening; 1 clips nothing. A document of ℓ distinct words has ``‖P2_doc‖_F ≈ 1/ℓ``; clipping binds on
        short or repetitive documents (a bias, not a privacy cost), while the whitening noise grows with
        ``pair_bound·√d``. None: ``min(1, 3.5/√d)``, a public rule tuned on generated corpora of 50-word
        documents (``benchmarks/bench_tensor.py``): at d = 500, 0.05 left a bias of median TV ≈ 0.2 at any ε
        and 0.2 reached TV ≈ 0.05 at ε = 4; at d = 5,000 and ε = 2, 0.05 gave TV ≈ 0.25 and 0.1 or 0.2 failed
        (TV ≈ 1).
    tensor_clip
        Public fraction κ in (0, 1]: each document's whitened contribution ``‖Wᵀ P3_doc(I,v,v)‖`` (for LDA, with
        its α₀ correction ``− b(2·M̂1ᵀv·Wᵀ P2_doc v + (vᵀP2_doc v)·WᵀM̂1)``) is clipped to κ times its worst case
        (``max_i‖r_i‖·max_j (r_jᵀu)²``, plus the correction's bound for LDA; a function of released values),
        which is then the sensitivity; 1 clips nothing. On LDA corpora the clip is what lets the LDA path beat
        the single-topic path at moderate ε (``docs/guide/topics.md``).
    private
        False: the exact (non-private) method of moments, the reference of the benchmarks.
    client
        None (the active Dask client, else see ``executor``); ``"local"``: in this process, kernels called
        directly; or a scheduler address / Client.
    executor
        As in :func:`dppca_dask.pca`: ``"auto"`` (default) runs in this process when no client is given or active
        and the store is small by its public shape (``dppca_dask.executor.in-process-max-partitions`` partitions,
        ``in-process-max-columns`` declared columns), else on an embedded ``LocalCluster``; ``"local"`` or
        ``"cluster"`` force either. ``provenance["executor"]`` states where it ran.
    seed, noise
        A seed (result not private) or a noise source (tests); neither: OS entropy.
    storage_options
        For a store given by its URL (``s3://bucket/x.zarr``): fsspec options of its file system (``endpoint_url``,
        ``key``, ``secret``, ...); by default the environment and configuration files (``AWS_ENDPOINT_URL``,
        ``AWS_ACCESS_KEY_ID``, ...). A ``zarr.storage.FsspecStore`` is accepted as ``data`` too. Workers read the
        store themselves, with these options; they are never shown in results, logs or provenance.
    ledger, dataset, job_id
        Keep the release in a privacy-budget ledger, as :func:`dppca_dask.pca` does (given together).

    Returns
    -------
    TopicResult

    Raises
    ------
    InvalidParameterError
        For bad parameters (K > d, budget, shares), before any data is read.
    InvalidInputError
        For negative, fractional or too large counts (naming partition and row); before any noise is drawn.

    Notes
    -----
    Privacy contract: add/remove one document (row); Gaussian releases whose sensitivities are bounded because each
    document's moments are probability distributions (:mod:`dppca_dask.methods.tensor.topics`); the report is built
    by the accountant from the events emitted. Beyond seed 002, whose relation is one tensor entry. The number of documents is private
    under this relation and shapes nothing: a corpus with fewer documents than topics runs like any other (its
    releases are mostly noise).

    Examples
    --------
    Word counts of 300 generated documents over a vocabulary of 30 words:

    >>> import numpy as np
    >>> import scipy.sparse as sp
    >>> import dppca_dask
    >>> rng = np.random.default_rng(0)
    >>> counts = sp.random(300, 30, density=0.2, random_state=rng, data_rvs=lambda n: rng.integers(1, 4, n))
    >>> fitted = dppca_dask.topics(counts.tocsr(), n_topics=3, epsilon=2.0, delta=1e-6)
    >>> fitted.topics.shape  # each row a distribution over the 30 words
    (3, 30)
    >>> bool(np.allclose(fitted.topics.sum(axis=1), 1.0)), fitted.privacy.private
    (True, True)
    """
    from dppca_dask import accounting
    from dppca_dask._execution import executor_choice as _executor_choice
    from dppca_dask.coordinator import as_source
    from dppca_dask.coordinator.sources import schema_caveats
    from dppca_dask.ledger import budgeted_release
    from dppca_dask.mechanisms import NoiseSource
    from dppca_dask.methods.tensor.power import run_on_source

    started = _dt.datetime.now(_dt.timezone.utc)
    # -- open the input (its public width) and plan from public values ------------------------------------------
    source = as_source(data, storage_options)
    dim = source.n_cols
    _check_params(n_topics, n_restarts, n_iter, pca_iter, pca_share, alpha0, dim)
    choice = _executor_choice(source, client, executor)  # public values only: the width and partition count
    pair_bound, tensor_clip = clipping_bounds(pair_bound, tensor_clip, dim)
    plan = None
    if private:
        plan = private_calibration(epsilon, delta, n_topics=n_topics, n_restarts=n_restarts, n_iter=n_iter,
                                   pca_iter=pca_iter, pca_share=pca_share, alpha0=alpha0)
        if noise is not None and seed is not None:
            raise InvalidParameterError("give either seed or noise, not both")
        if noise is None:
            noise = NoiseSource.from_entropy() if seed is None else NoiseSource.from_seed(seed)
    else:
        noise = None
    # -- execute -------------------------------------------------------------------------------------------------
    rng = np.random.default_rng(seed)
    run = _topic_run(dim=dim, n_topics=n_topics, n_restarts=n_restarts, n_iter=n_iter, pca_iter=pca_iter,
                     alpha0=float(alpha0), noise=noise, plan=plan, rng=rng, pair_bound=float(pair_bound),
                     tensor_clip=float(tensor_clip))
    with budgeted_release(ledger, dataset, job_id, store=source.store, epsilon=float(epsilon or 0.0),
                          delta=float(delta or 0.0), events=plan.events() if plan is not None else None,
                          mechanism="topics", neighbouring=DOCUMENT, noise=noise):  # reserved before the data is read
        out = run_on_source(source, client, run, persist, choice)
    # -- report (released values and public parameters only) -----------------------------------------------------
    report = None
    if private:
        report = accounting.build_report(
            out["events"], target_epsilon=float(cast(float, epsilon)), target_delta=float(cast(float, delta)),
            neighbouring=DOCUMENT, private=bool(noise.private),
        )
        caveats = schema_caveats(source)  # a width inferred from the data: every topic's length reveals it
        if caveats:
            report = dataclasses.replace(report, caveats=tuple(report.caveats) + caveats)
    provenance = {
        "mechanism": "topics",
        "model": "single-topic" if alpha0 == 0 else f"LDA (alpha0={alpha0})",
        "method": "method of moments (Anandkumar et al. 2014) with the private tensor power method (Wang & "
                  "Anandkumar 2016, Alg. 3); one document as the privacy unit is an extension beyond the paper",
        "parameters": {"n_topics": n_topics, "n_restarts": n_restarts, "n_iter": n_iter, "pca_iter": pca_iter,
                       "pca_share": pca_share, "pair_bound": pair_bound, "tensor_clip": tensor_clip,
                       "alpha0": alpha0},
        "calibration": plan.to_dict() if plan is not None else None,
        "input": dict(source.description),
        "executor": choice.executor,
        "seeded": seed is not None or (noise is not None and not noise.private),
        "started": started.isoformat(timespec="seconds"),
    }
    diagnostics = out["diagnostics"] if private else {}
    if private and not diagnostics["reliable"]:
        worst = max(diagnostics["noise_to_signal"])
        warnings.warn(f"the topics are not reliable: the noise dominates the released moments (noise-to-signal up "
                      f"to {worst:.3g} > {diagnostics['threshold']:g}); use more documents or a larger epsilon",
                      UserWarning, stacklevel=2)
    return TopicResult(out["topics"], out["weights"], out["eigenvalues"], report, provenance, diagnostics)
