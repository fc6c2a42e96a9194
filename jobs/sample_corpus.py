"""Write a generated document-word count matrix with planted topics, for the topic model example.

    python jobs/sample_corpus.py build/corpus [--documents 20000] [--words 2000] [--topics 10] [--seed 0]

Writes ``OUT_DIR/corpus.npz`` (scipy sparse, documents × words, whole counts) and ``OUT_DIR/planted_topics.npy``
(the topics it was drawn from, to compare a release against). See ``jobs/topics-nightly.toml``.
"""

from __future__ import annotations

import argparse
import os

import numpy as np
import scipy.sparse as sp


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", help="directory for corpus.npz and planted_topics.npy")
    parser.add_argument("--documents", type=int, default=20_000)
    parser.add_argument("--words", type=int, default=2_000)
    parser.add_argument("--topics", type=int, default=10)
    parser.add_argument("--doc-length", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    from dppca_dask.methods.tensor.corpora import lda_corpus

    corpus = lda_corpus(args.documents, args.words, args.topics, doc_length=args.doc_length,
                        topic_concentration=0.02, seed=args.seed)
    os.makedirs(args.out, exist_ok=True)
    sp.save_npz(os.path.join(args.out, "corpus.npz"), sp.csr_matrix(corpus.counts))
    np.save(os.path.join(args.out, "planted_topics.npy"), corpus.topics)
    print(os.path.join(args.out, "corpus.npz"))


if __name__ == "__main__":
    main()
