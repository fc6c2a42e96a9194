"""``dppca-dask window STORE --last 30D | --last-rows W [--last 7D]``: one private release of a sliding window's
covariance (``--tree --horizon H``: from the experimental binary tree; ``--ledger --dataset --job-id``: a
partition-scoped budget)."""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np

__all__ = ["register", "run", "window_json"]

SUMMARY = "private covariance, PCA or regression of a sliding window of partitions"


def register(subparsers: Any) -> None:
    from dppca_dask.cli._cluster import EXECUTOR_HELP, add_cluster_arguments, add_executor_argument
    from dppca_dask.mechanisms.wishart import TAU_RULES
    from dppca_dask.methods import mechanism_help, mechanism_names

    p = subparsers.add_parser(
        "window",
        help=SUMMARY,
        description="Release a sliding window (the last days of stamped partitions, or the last W rows) of a store "
        "once, with (epsilon, delta)-DP for adding or removing one row (event-level), and derive covariance, "
        "principal components or a regression fit from that one release.",
    )
    p.add_argument("store", help="a dppca_dask store with stamped partitions (ingest/append --timestamp)")
    p.add_argument("--last", default=None, metavar="DURATION",
                   help="time window: partitions stamped in the last DURATION (30D, 12H, 2W) before --end; with "
                   "--last-rows, the horizon the row window's rows are taken from")
    p.add_argument("--last-rows", type=int, default=None, metavar="W",
                   help="row window: the last W rows (it reads and is charged to every partition up to --end; with "
                   "--last, only to the partitions of that time window)")
    p.add_argument("--end", default=None, metavar="DATE",
                   help="end of the window (inclusive; default: the newest partition's timestamp)")
    p.add_argument("--epsilon", type=float, required=True, help="privacy budget epsilon of the release")
    p.add_argument("--delta", type=float, required=True, help="privacy budget delta of the release")
    p.add_argument("--release", choices=mechanism_names("window"), default="gaussian",
                   help="release mechanism (default: gaussian): " + mechanism_help("window"))
    p.add_argument("--structure", choices=("exact", "spectral-histogram"), default="exact",
                   help="exact window Gram (default; unconditional guarantee) or the paper's spectral histogram kept "
                        "beside the store (guarantee conditional on its released checkpoint)")
    p.add_argument("--cache", action="store_true",
                   help="keep each partition's exact Gram beside the store (owner-only) so that later releases "
                        "read only new partitions")
    p.add_argument("--tree", action="store_true",
                   help="experimental: release the window ending at the newest partition (--last) from the binary "
                        "tree kept beside the store, a continual release over --horizon partitions whose report "
                        "covers every release of the tree (gaussian release; no --end, --last-rows, --structure, "
                        "--cache or regression)")
    p.add_argument("--horizon", type=int, default=None, metavar="H",
                   help="with --tree: the tree's public horizon in partitions (fixed for the tree's life)")
    p.add_argument("--new-tree", action="store_true",
                   help="with --tree: start a new tree deliberately where this store's earlier tree cannot be "
                        "found (its state moved away); the rows' privacy is then both trees' reports together")
    p.add_argument("--ledger", default=None,
                   help="partition-scoped budget: charge each partition read (with --tree: each node drawn, to "
                        "the partitions it holds) under --dataset's total in this ledger (with --dataset, --job-id)")
    p.add_argument("--dataset", default=None, help="the ledger's dataset key (dppca-dask budget init)")
    p.add_argument("--job-id", default=None, help="the release's job id (one per release)")
    p.add_argument("--task", choices=("covariance", "pca", "regression"), default="covariance",
                   help="what to print (all are post-processing of the one release; default: covariance)")
    p.add_argument("--n-components", type=int, default=1, help="components for --task pca (default 1)")
    p.add_argument("--ridge", type=float, default=0.0, help="ridge added for --task regression (default 0)")
    p.add_argument("--row-norm-bound", type=float, default=1.0, help="public L2 clipping bound of rows (default 1)")
    p.add_argument("--tau-rule", choices=TAU_RULES, default="thm11", help="Wishart degrees of freedom rule")
    p.add_argument("--sketch-rows", type=int, default=None, help="JL release: rows of the sketch (default d)")
    p.add_argument("--scheduler", default=None, help="Dask scheduler address or scheduler file (default: local)")
    add_executor_argument(p, text=EXECUTOR_HELP.replace("stores of few partitions", "windows of few partitions"))
    add_cluster_arguments(p)
    p.add_argument("--seed", type=int, default=None, help="reproducible run; the result is then NOT private")
    p.add_argument("--out", default=None, help="directory to write release.json (the released matrix)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(handler=run)


def window_json(result: Any, task: str, *, n_components: int = 1, ridge: float = 0.0) -> dict[str, Any]:
    """The JSON of a window release for one task: window, privacy, calibration and the task's output."""
    report = result.privacy.to_dict()
    out: dict[str, Any] = {
        "task": task,
        "release": result.release,
        "private": result.private,
        "window": {"start": result.window.start, "end": result.window.end,
                   "n_partitions": result.window.n_partitions, "kind": result.window.kind,
                   **({"last_rows": result.window.last_rows} if result.window.last_rows is not None else {})},
        "privacy": {"epsilon": report["epsilon"], "delta": report["delta"], "neighbouring": report["neighbouring"],
                    "report": report},
        "calibration": dict(result.calibration),
        "executor": result.provenance.get("executor"),
    }
    if task == "pca":
        out["components"] = np.asarray(result.pca(n_components)).tolist()
    elif task == "regression":
        out["coefficients"] = np.asarray(result.regression(ridge=ridge)).tolist()
    else:
        out["covariance"] = np.asarray(result.covariance).tolist()
    return out


def _check_tree_arguments(args: argparse.Namespace) -> None:
    """Refuse options the binary tree does not take (or tree options without ``--tree``), before anything is read."""
    from dppca_dask.errors import InvalidParameterError

    if not args.tree:
        for name, given in (("--horizon", args.horizon is not None), ("--new-tree", args.new_tree)):
            if given:
                raise InvalidParameterError(f"{name} applies to --tree only; add --tree (binary-tree release)")
        return
    if args.horizon is None:
        raise InvalidParameterError("--tree needs --horizon H: the tree's public horizon in partitions")
    given = [name for name, on in (
        ("--last-rows", args.last_rows is not None), ("--end", args.end is not None),
        ("--release", args.release != "gaussian"), ("--structure", args.structure != "exact"),
        ("--cache", args.cache), ("--task regression", args.task == "regression"),
        ("--tau-rule", args.tau_rule != "thm11"), ("--sketch-rows", args.sketch_rows is not None),
    ) if on]
    if given:
        raise InvalidParameterError(
            f"--tree releases a time window (--last) ending at the newest partition with gaussian noise, from the "
            f"tree's nodes; {', '.join(given)} do not apply: drop them, or drop --tree"
        )
    if args.last is None:
        raise InvalidParameterError("--tree needs --last DURATION (the window ending at the newest partition)")


def _check_task_arguments(args: argparse.Namespace) -> None:
    """Refuse what the task cannot print (``--n-components``, ``--ridge``) or where it cannot write (``--out``)
    before anything is read: after the noise, the error would spend the budget and lose the release."""
    import math
    import os

    from dppca_dask.errors import InvalidParameterError
    from dppca_dask.storage import open_matrix

    if args.task == "pca":
        dim = open_matrix(args.store).n_cols  # metadata only: the released covariance's width
        k = args.n_components
        if not 1 <= k <= dim:
            raise InvalidParameterError(f"n_components must be an integer in [1, {dim}]; got {k!r}")
    elif args.task == "regression" and not (math.isfinite(args.ridge) and args.ridge >= 0):
        raise InvalidParameterError(f"ridge must be finite and >= 0; got {args.ridge!r}")
    if args.out is not None and os.path.lexists(args.out) and not os.path.isdir(args.out):
        raise InvalidParameterError(f"--out must be a directory (release.json is written into it); '{args.out}' "
                                    "is a file: give another path")


def run(args: argparse.Namespace) -> int:
    from dppca_dask.methods.window import tree_window, window

    from dppca_dask.cli._paths import check_result_dir

    _check_tree_arguments(args)
    _check_task_arguments(args)
    check_result_dir(args.out, stores=(args.store,))  # before any data is read
    if args.tree:
        result = tree_window(
            args.store, last=args.last, epsilon=args.epsilon, delta=args.delta, horizon=args.horizon,
            row_norm_bound=args.row_norm_bound, client=args.scheduler, executor=args.executor, seed=args.seed,
            ledger=args.ledger, dataset=args.dataset, job_id=args.job_id, new_tree=args.new_tree,
        )
    else:
        result = window(
            args.store, last=args.last, last_rows=args.last_rows, end=args.end, epsilon=args.epsilon,
            delta=args.delta, release=args.release, structure=args.structure, cache=args.cache,
            labels=args.task == "regression",
            row_norm_bound=args.row_norm_bound, tau_rule=args.tau_rule, sketch_rows=args.sketch_rows,
            client=args.scheduler, executor=args.executor, seed=args.seed,
            ledger=args.ledger, dataset=args.dataset, job_id=args.job_id,
        )
    out = window_json(result, args.task, n_components=args.n_components, ridge=args.ridge)
    if args.out:
        out["output"] = result.save(args.out)
    if args.json:
        from dppca_dask.cli import _json

        _json.dump(out)  # strict JSON: a non-finite number is null
        return 0
    w = out["window"]
    print(f"window ({w['start']}, {w['end']}]: {w['n_partitions']} partitions; release {result.release}")
    if args.tree:
        cal = out["calibration"]
        print(f"binary tree: horizon {cal['horizon']} partitions, {cal['levels']} levels; {cal['nodes']} nodes summed")
    print(result.privacy.summary())
    if args.task == "pca":
        for i, comp in enumerate(out["components"]):
            comp = np.asarray(comp)
            order = np.argsort(-np.abs(comp))[:8]
            print(f"component {i}: largest coordinates " + ", ".join(f"[{j}] {comp[j]:+.4f}" for j in order))
    elif args.task == "regression":
        print("coefficients: " + " ".join(f"{c:+.4g}" for c in out["coefficients"]))
    else:
        cov = np.asarray(out["covariance"])
        print(f"covariance: {cov.shape[0]}x{cov.shape[1]}, trace {np.trace(cov):.4g}")
    if args.out:
        print(f"written to {out['output']}")
    return 0
