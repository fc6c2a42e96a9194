"""Synthetic document-word corpora with planted topics, for tests and benchmarks of the topic model."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from dppca_dask.errors import InvalidParameterError

__all__ = ["PlantedCorpus", "lda_corpus", "total_variation"]


@dataclass(frozen=True)
class PlantedCorpus:
    """A generated corpus and the topics it was drawn from."""

    counts: sp.csr_array
    """Documents × words, whole counts."""
    topics: np.ndarray
    """K × d topic-word distributions."""
    weights: np.ndarray
    """K: Dirichlet parameters α_h / α₀ (LDA) or topic probabilities (single-topic)."""


def lda_corpus(
    n_docs: int,
    n_words: int,
    n_topics: int,
    *,
    doc_length: int = 50,
    alpha0: float = 0.0,
    topic_concentration: float = 0.02,
    seed: int = 0,
) -> PlantedCorpus:
    """Draw an LDA corpus: topics ``μ_h ~ Dir(topic_concentration·1_d)``, per document ``θ ~ Dir(α)`` with
    ``α = alpha0 · w`` (``alpha0 = 0``: one topic per document, drawn with probabilities w), its length
    ``1 + Poisson(doc_length − 1)``, then each word's topic from θ and the word from that topic.

    Tokens are drawn in bulk (inverse CDF per topic), so 200,000 documents of 50 words take seconds.
    """
    for name, value in (("n_docs", n_docs), ("n_words", n_words), ("n_topics", n_topics), ("doc_length", doc_length)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise InvalidParameterError(f"{name} must be an integer >= 1; got {value!r}")
    if n_topics > n_words:
        raise InvalidParameterError(f"n_topics={n_topics} exceeds n_words={n_words}; ask for at most n_words topics")
    if not alpha0 >= 0 or not topic_concentration > 0:
        raise InvalidParameterError(
            f"alpha0 must be >= 0 and topic_concentration > 0; got {alpha0!r} and {topic_concentration!r}"
        )
    rng = np.random.default_rng(seed)
    topics = rng.dirichlet(np.full(n_words, topic_concentration), size=n_topics)
    weights = rng.dirichlet(np.full(n_topics, 5.0))
    lengths = 1 + rng.poisson(doc_length - 1, size=n_docs)
    doc_of_token = np.repeat(np.arange(n_docs), lengths)
    if alpha0 == 0:
        topic_of_doc = rng.choice(n_topics, size=n_docs, p=weights)
        topic_of_token = topic_of_doc[doc_of_token]
    else:
        theta = rng.dirichlet(alpha0 * weights, size=n_docs)
        cdf = np.cumsum(theta, axis=1)
        draws = rng.random(doc_of_token.size)
        topic_of_token = np.minimum((draws[:, None] > cdf[doc_of_token]).sum(axis=1), n_topics - 1)
    words = np.empty(doc_of_token.size, dtype=np.int64)
    cdfs = np.cumsum(topics, axis=1)
    for h in range(n_topics):
        mask = topic_of_token == h
        words[mask] = np.minimum(np.searchsorted(cdfs[h], rng.random(int(mask.sum())) * cdfs[h, -1]), n_words - 1)
    counts = sp.coo_array((np.ones(words.size), (doc_of_token, words)), shape=(n_docs, n_words)).tocsr()
    counts.sum_duplicates()
    return PlantedCorpus(sp.csr_array(counts), topics, weights)


def total_variation(found: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """For each true topic, the total-variation distance to its best match among ``found`` (matched one to one
    by the Hungarian algorithm on the TV distances)."""
    from scipy.optimize import linear_sum_assignment

    distance = 0.5 * np.abs(found[:, None, :] - truth[None, :, :]).sum(axis=2)
    rows, cols = linear_sum_assignment(distance)
    out = np.full(truth.shape[0], 1.0)
    out[cols] = distance[rows, cols]
    return out
