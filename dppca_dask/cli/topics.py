"""``dppca-dask topics STORE``: differentially private topics of a document-word count store."""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np

__all__ = ["format_topics", "register", "top_words"]

SUMMARY = "differentially private topic model of a document-word count store"


def register(subparsers: Any) -> None:
    from dppca_dask.cli._cluster import add_cluster_arguments, add_executor_argument
    from dppca_dask.methods.tensor.topics import (
        DEFAULT_PCA_ITER,
        DEFAULT_PCA_SHARE,
        DEFAULT_RESTARTS,
        DEFAULT_TENSOR_CLIP,
        DEFAULT_TENSOR_ITER,
    )

    p = subparsers.add_parser(
        "topics",
        help=SUMMARY,
        description="Fit topics by the method of moments with the private tensor power method (one document is the "
                    "privacy unit: add/remove one row).",
    )
    p.add_argument("store", help="a dppca_dask store (or AnnData zarr) of word counts, one document per row")
    p.add_argument("--n-topics", type=int, required=True, help="number of topics K (at most the number of columns)")
    p.add_argument("--epsilon", type=float, required=True, help="total privacy budget epsilon")
    p.add_argument("--delta", type=float, required=True, help="total privacy budget delta")
    p.add_argument("--alpha0", type=float, default=0.0,
                   help="LDA's Dirichlet concentration sum(alpha); 0 (default): the single-topic model")
    p.add_argument("--n-restarts", type=int, default=DEFAULT_RESTARTS,
                   help=f"restarts L of the tensor power method (default {DEFAULT_RESTARTS})")
    p.add_argument("--n-iter", type=int, default=DEFAULT_TENSOR_ITER,
                   help=f"power iterations R per restart (default {DEFAULT_TENSOR_ITER})")
    p.add_argument("--pca-iter", type=int, default=DEFAULT_PCA_ITER,
                   help=f"subspace iterations of the private whitening (default {DEFAULT_PCA_ITER})")
    p.add_argument("--pca-share", type=float, default=DEFAULT_PCA_SHARE,
                   help=f"share of the budget for whitening (default {DEFAULT_PCA_SHARE})")
    p.add_argument("--pair-bound", type=float, default=None,
                   help="public clipping bound of each document's second-moment product (default: min(1, 3.5/sqrt(d)))")
    p.add_argument("--tensor-clip", type=float, default=DEFAULT_TENSOR_CLIP,
                   help="clip each document's whitened third-moment contribution (for LDA, with its alpha0 "
                        f"correction) to this fraction of its worst case, in (0, 1]; 1 clips nothing (default "
                        f"{DEFAULT_TENSOR_CLIP})")
    p.add_argument("--scheduler", default=None, help="Dask scheduler address or scheduler file (default: local)")
    add_executor_argument(p)
    add_cluster_arguments(p)
    p.add_argument("--persist", action=argparse.BooleanOptionalAction, default=None,
                   help="keep partitions in worker memory between steps (default: the dppca_dask.persist setting, false)")
    p.add_argument("--seed", type=int, default=None, help="reproducible run; the result is then NOT private")
    p.add_argument("--out", default=None, help="directory to write result.json and topics.npy")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    from dppca_dask.cli._paths import add_storage_option

    add_storage_option(p)
    p.set_defaults(handler=run)


def top_words(result: Any, labels: list[str] | None, *, top: int = 8) -> list[list[dict[str, Any]]]:
    """Each topic's ``top`` most probable columns, most probable first: ``{"column", "word", "probability"}``
    (``word``: the store's column id from ``var_ids``, or the column index as text without one)."""
    out = []
    for row in np.asarray(result.topics):
        order = [int(j) for j in np.argsort(-row, kind="stable")[:top] if row[j] > 0] or [int(np.argmax(row))]
        out.append([{"column": j, "word": labels[j] if labels is not None else str(j),
                     "probability": float(row[j])} for j in order])
    return out


def format_topics(result: Any, *, top: int = 8, labels: list[str] | None = None) -> str:
    """The privacy statement, then each topic's weight and its most probable words (the store's column ids when
    it has them, else ``[column]``)."""
    report = result.privacy
    lines = ["mechanism: topics"]
    if result.private:
        lines.append(f"privacy: ({report.epsilon:.4g}, {report.delta:.3g})-differentially private for neighbours "
                     f"differing by {report.neighbouring} (accountant: {report.accountant})")
    else:
        lines.append("privacy: NOT differentially private (seeded run)")
    diag = getattr(result, "diagnostics", None) or {}
    if diag:
        ratios = ", ".join(f"{r:.3g}" for r in diag["noise_to_signal"])
        lines.append(f"diagnostics: {'reliable' if diag['reliable'] else 'NOT reliable'} (noise-to-signal per topic "
                     f"{ratios}; threshold {diag['threshold']:g})")
    for h, (weight, words) in enumerate(zip(result.weights, top_words(result, labels, top=top))):
        text = ", ".join((f"{w['word']}" if labels is not None else f"[{w['column']}]") + f" {w['probability']:.4f}"
                         for w in words)
        lines.append(f"topic {h} (weight {weight:.3f}): {text}")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from dppca_dask.cli._paths import check_result_dir, check_store, storage_options
    from dppca_dask.cli.pca import feature_labels
    from dppca_dask.api._topics import topics

    options = storage_options(args)
    check_store(args.store, options=options)
    check_result_dir(args.out, stores=(args.store,))
    result = topics(
        args.store, n_topics=args.n_topics, epsilon=args.epsilon, delta=args.delta, alpha0=args.alpha0,
        n_restarts=args.n_restarts, n_iter=args.n_iter, pca_iter=args.pca_iter, pca_share=args.pca_share,
        pair_bound=args.pair_bound, tensor_clip=args.tensor_clip,
        client=args.scheduler, executor=args.executor, persist=args.persist, seed=args.seed,
        storage_options=options,
    )
    labels, note = feature_labels(args.store, options)
    if args.out:
        result.save(args.out)
    if args.json:
        out = result.to_dict()
        out["top_words"] = top_words(result, labels)
        if note:
            out["note"] = note
        if args.out:
            out["output"] = args.out
        from dppca_dask.cli import _json

        _json.dump(out)  # strict JSON: a non-finite number is null
    else:
        print(format_topics(result, labels=labels))
        if note:
            print(note)
        if args.out:
            print(f"written to {args.out}")
    return 0
