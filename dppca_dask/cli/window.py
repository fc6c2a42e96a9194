"""``dppca-dask window STORE --last 30D | --last-rows W [--last 7D]``: one private release of a sliding window's
covariance (``--tree --horizon H``: from the experimental binary tree; ``--ledger --dataset --job-id``: a
partition-scoped budget)."""

from __future__ import annotations

import argparse
from typing import Any, cast

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
                   help="exact window Gram (default) or a spectral histogram kept beside the store (reads only new "
                        "partitions; its checkpoints follow the partition table, and the release reports every "
                        "partition it covers, possibly some before the window)")
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
    _add_task_arguments(p)
    p.add_argument("--row-norm-bound", type=float, default=1.0, help="public L2 clipping bound of rows (default 1)")
    p.add_argument("--tau-rule", choices=TAU_RULES, default=None,
                   help="--release wishart: degrees of freedom rule (default thm11)")
    p.add_argument("--sketch-rows", type=int, default=None, help="--release jl: rows m of the sketch (default d)")
    p.add_argument("--rank-bound", type=int, default=None,
                   help="--release jl: the rank bound r of the sketch's sigma (Alg. 3; default 1)")
    p.add_argument("--eta", type=float, default=None,
                   help="--structure spectral-histogram: pruning threshold in (0, 1) (default 0.2; fixed for the "
                        "saved structure's life)")
    p.add_argument("--regularizer", type=float, default=None,
                   help="--structure spectral-histogram: the public floor lambda > 0 (default: the release's noise "
                        "level along the identity; fixed for the saved structure's life: a release with another "
                        "--release or --epsilon passes the saved structure's value)")
    p.add_argument("--scheduler", default=None, help="Dask scheduler address or scheduler file (default: local)")
    add_executor_argument(p, text=EXECUTOR_HELP.replace("stores of few partitions", "windows of few partitions"))
    add_cluster_arguments(p)
    p.add_argument("--seed", type=int, default=None, help="reproducible run; the result is then NOT private")
    p.add_argument("--out", default=None, help="directory to write release.json (the released matrix)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    from dppca_dask.cli._paths import add_storage_option

    add_storage_option(p)
    p.set_defaults(handler=run)


#: The tasks of ``--task``: all are post-processing of the one release.
TASKS = ("covariance", "pca", "regression", "sparse-pca", "nonnegative-pca", "directional-variance")

#: The tasks that print components (and take ``--n-components``).
COMPONENT_TASKS = ("pca", "sparse-pca", "nonnegative-pca")


def _add_task_arguments(p: Any) -> None:
    p.add_argument("--task", choices=TASKS, default="covariance",
                   help="what to print, all post-processing of the one release (default: covariance): the "
                        "covariance, principal components, a regression of the label on the features (needs labels), "
                        "sparse components (--nonzeros), non-negative components with disjoint supports, or the "
                        "variance along given directions (--direction)")
    p.add_argument("--n-components", type=int, default=None,
                   help="components for --task pca, sparse-pca or nonnegative-pca (default 1)")
    p.add_argument("--nonzeros", type=int, default=None, metavar="S",
                   help="--task sparse-pca: non-zero entries of each component (required)")
    p.add_argument("--direction", default=None, metavar="VECTORS",
                   help="--task directional-variance: one direction as comma-separated numbers (one per column), or "
                        "a file of directions (.npy, or text with one direction per line); required")
    p.add_argument("--ridge", type=_ridge, default=None, metavar="RIDGE",
                   help="--task regression: the ridge added to the released feature covariance, a number >= 0 or "
                        "'auto' (default: the release's noise scale; Wishart: its noise mean, Thm 8)")


def _ridge(text: str) -> float | str:
    """``--ridge``: ``auto`` or a number (checked to be finite and >= 0 with the other options)."""
    if text == "auto":
        return text
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be 'auto' or a number >= 0; got {text!r}") from None


def window_json(result: Any, task: str, *, n_components: int = 1, ridge: float | str = "auto",
                nonzeros: int | None = None, directions: Any = None) -> dict[str, Any]:
    """The JSON of a window release for one task: window, privacy, calibration and the task's output."""
    report = result.privacy.to_dict()
    out: dict[str, Any] = {
        "task": task,
        "release": result.release,
        "private": result.private,
        "guarantee": result.guarantee,
        "window": {"start": result.window.start, "end": result.window.end,
                   "n_partitions": result.window.n_partitions, "kind": result.window.kind,
                   **({"last_rows": result.window.last_rows} if result.window.last_rows is not None else {}),
                   **({"requested_start": result.window.requested_start}
                      if result.window.requested_start is not None else {})},
        "privacy": {"epsilon": report["epsilon"], "delta": report["delta"], "neighbouring": report["neighbouring"],
                    "report": report},
        "calibration": dict(result.calibration),
        "executor": result.provenance.get("executor"),
    }
    diagnostics: Any = None
    if task == "pca":
        out["components"] = np.asarray(result.pca(n_components)).tolist()
        diagnostics = result.diagnostics_for(n_components)
    elif task == "sparse-pca":
        out["components"] = np.asarray(result.sparse_pca(n_components, cast(int, nonzeros))).tolist()
        diagnostics = result.diagnostics_for(n_components)
    elif task == "nonnegative-pca":
        out["components"] = np.asarray(result.nonnegative_pca(n_components)).tolist()
        diagnostics = result.diagnostics_for(n_components)
    elif task == "directional-variance":
        out["directional_variance"] = np.atleast_1d(result.directional_variance(directions)).tolist()
        diagnostics = result.diagnostics
    elif task == "regression":
        out["coefficients"] = np.asarray(result.regression(ridge=ridge)).tolist()
        out["diagnostics"] = result.regression_diagnostics(ridge=ridge)
        out["ridge"] = out["diagnostics"]["ridge"]
    else:
        out["covariance"] = np.asarray(result.covariance).tolist()
        diagnostics = result.diagnostics  # the leading direction: is there signal above the noise at all?
    if diagnostics is not None:
        out["diagnostics"] = diagnostics.to_dict()
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
        ("--tau-rule", args.tau_rule is not None), ("--sketch-rows", args.sketch_rows is not None),
        ("--rank-bound", args.rank_bound is not None),
    ) if on]
    if given:
        raise InvalidParameterError(
            f"--tree releases a time window (--last) ending at the newest partition with gaussian noise, from the "
            f"tree's nodes; {', '.join(given)} do not apply: drop them, or drop --tree"
        )
    if args.last is None:
        raise InvalidParameterError("--tree needs --last DURATION (the window ending at the newest partition)")


def _check_options_apply(args: argparse.Namespace) -> None:
    """Refuse an option that does not apply to the task, release or structure chosen (it would be ignored)."""
    from dppca_dask.errors import InvalidParameterError

    for name, given, applies, where in (
        ("--n-components", args.n_components is not None, args.task in COMPONENT_TASKS,
         "--task pca, sparse-pca or nonnegative-pca"),
        ("--nonzeros", args.nonzeros is not None, args.task == "sparse-pca", "--task sparse-pca"),
        ("--direction", args.direction is not None, args.task == "directional-variance",
         "--task directional-variance"),
        ("--ridge", args.ridge is not None, args.task == "regression", "--task regression"),
        ("--tau-rule", args.tau_rule is not None, args.release == "wishart", "--release wishart"),
        ("--sketch-rows", args.sketch_rows is not None, args.release == "jl", "--release jl"),
        ("--rank-bound", args.rank_bound is not None, args.release == "jl", "--release jl"),
        ("--eta", args.eta is not None, args.structure == "spectral-histogram", "--structure spectral-histogram"),
        ("--regularizer", args.regularizer is not None, args.structure == "spectral-histogram",
         "--structure spectral-histogram"),
    ):
        if given and not applies:
            raise InvalidParameterError(f"{name} applies to {where} only (here: --task {args.task}, --release "
                                        f"{args.release}, --structure {args.structure}); drop it")
    if args.task == "sparse-pca" and args.nonzeros is None:
        raise InvalidParameterError("--task sparse-pca needs --nonzeros S: the non-zero entries of each component")
    if args.task == "directional-variance" and args.direction is None:
        raise InvalidParameterError("--task directional-variance needs --direction: comma-separated numbers (one per "
                                    "column) or a file of directions")


def _directions(text: str, dim: int) -> np.ndarray:
    """``--direction``: a file (``.npy``, or text with one direction per line) or comma-separated numbers."""
    import os

    from dppca_dask.errors import InvalidParameterError

    try:
        if os.path.isfile(text) and text.endswith(".npy"):
            values = np.load(text, allow_pickle=False)
        elif os.path.isfile(text):
            import io

            with open(text, encoding="utf-8") as fh:
                values = np.loadtxt(io.StringIO(fh.read().replace(",", " ")), ndmin=2)
        else:
            values = np.array([float(v) for v in text.split(",")])
    except (OSError, ValueError) as exc:
        raise InvalidParameterError(f"--direction must be comma-separated numbers or a file of directions; got "
                                    f"{text!r} ({exc})") from None
    values = np.atleast_2d(np.asarray(values, dtype=np.float64))
    if values.ndim != 2 or values.shape[1] != dim or not np.isfinite(values).all():
        raise InvalidParameterError(f"--direction must hold finite directions of {dim} numbers (one per column of the "
                                    f"store); got shape {tuple(values.shape)}")
    return values


def _check_task_arguments(args: argparse.Namespace) -> np.ndarray | None:
    """Refuse what the task cannot print (options that do not apply, ``--n-components``, ``--nonzeros``,
    ``--direction``, ``--ridge``) or where it cannot write (``--out``) before anything is read: after the noise,
    the error would spend the budget and lose the release. Returns the directions of ``directional-variance``."""
    import math
    import os

    from dppca_dask.cli._paths import storage_options
    from dppca_dask.errors import InvalidParameterError
    from dppca_dask.storage import open_matrix

    _check_options_apply(args)
    directions = None
    if args.task in COMPONENT_TASKS or args.task == "directional-variance":
        # metadata only: the released covariance's width
        dim = open_matrix(args.store, storage_options=storage_options(args)).n_cols
        k = 1 if args.n_components is None else args.n_components
        if not 1 <= k <= dim:
            raise InvalidParameterError(f"n_components must be an integer in [1, {dim}]; got {k!r}")
        if args.task == "sparse-pca" and not 1 <= args.nonzeros <= dim:
            raise InvalidParameterError(f"nonzeros must be an integer in [1, {dim}]; got {args.nonzeros!r}")
        if args.task == "directional-variance":
            directions = _directions(args.direction, dim)
    elif args.task == "regression" and isinstance(args.ridge, float) and not (math.isfinite(args.ridge)
                                                                              and args.ridge >= 0):
        raise InvalidParameterError(f"ridge must be finite and >= 0 (or 'auto'); got {args.ridge!r}")
    if args.out is not None and os.path.lexists(args.out) and not os.path.isdir(args.out):
        raise InvalidParameterError(f"--out must be a directory (release.json is written into it); '{args.out}' "
                                    "is a file: give another path")
    return directions


def _warn_unreliable(out: dict[str, Any]) -> None:
    """One warning line on stderr when the task's diagnostics say the noise dominates its output."""
    diag = out.get("diagnostics")
    if diag is None or diag["reliable"]:
        return
    import sys

    if out["task"] == "regression":
        from dppca_dask.methods.window.tasks import REGRESSION_ERROR_THRESHOLD

        what = (f"the fit is not reliable: the noise dominates the directions that carry it (estimated relative "
                f"coefficient error {diag['estimated_relative_error']:.2f} > {REGRESSION_ERROR_THRESHOLD:g}); its "
                "coefficients are shrunk towards zero")
        print(f"dppca-dask: warning: {what}; use a longer window or a larger epsilon", file=sys.stderr)
        return
    from dppca_dask.diagnostics import Diagnostics, print_cli_warning

    print_cli_warning(Diagnostics.from_dict(diag), f"the {out['release']} window release ({out['task']})")


def run(args: argparse.Namespace) -> int:
    from dppca_dask.api._window import window
    from dppca_dask.methods.window import tree_window

    from dppca_dask.cli._paths import check_result_dir, check_store, storage_options
    from dppca_dask.storage import open_matrix

    _check_tree_arguments(args)
    directions = _check_task_arguments(args)
    check_result_dir(args.out, stores=(args.store,))  # before any data is read
    options = storage_options(args)
    check_store(args.store, options=options)
    store = open_matrix(args.store, storage_options=options) if options else args.store
    if args.tree:
        result = tree_window(
            store, last=args.last, epsilon=args.epsilon, delta=args.delta, horizon=args.horizon,
            row_norm_bound=args.row_norm_bound, client=args.scheduler, executor=args.executor, seed=args.seed,
            ledger=args.ledger, dataset=args.dataset, job_id=args.job_id, new_tree=args.new_tree,
        )
    else:
        extra = {name: value for name, value in (("eta", args.eta), ("regularizer", args.regularizer),
                                                 ("tau_rule", args.tau_rule), ("rank_bound", args.rank_bound))
                 if value is not None}
        result = window(
            store, last=args.last, last_rows=args.last_rows, end=args.end, epsilon=args.epsilon,
            delta=args.delta, release=args.release, structure=args.structure, cache=args.cache,
            labels=args.task == "regression", row_norm_bound=args.row_norm_bound, sketch_rows=args.sketch_rows,
            client=args.scheduler, executor=args.executor, seed=args.seed,
            ledger=args.ledger, dataset=args.dataset, job_id=args.job_id, **extra,
        )
    out = window_json(result, args.task, n_components=1 if args.n_components is None else args.n_components,
                      ridge="auto" if args.ridge is None else args.ridge, nonzeros=args.nonzeros,
                      directions=directions)
    labels = None
    if args.task in COMPONENT_TASKS or args.task == "regression":
        from dppca_dask.cli.pca import feature_labels

        labels, _ = feature_labels(args.store, options)
        if labels is not None:
            out["feature_names"] = labels  # column j of every component (coefficient j) is feature_names[j]
    if args.out:
        out["output"] = result.save(args.out)
    _warn_unreliable(out)
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
    if args.task in COMPONENT_TASKS:
        for i, comp in enumerate(out["components"]):
            comp = np.asarray(comp)
            order = np.argsort(-np.abs(comp))[:8]
            print(f"component {i}: largest coordinates "
                  + ", ".join(f"[{j if labels is None else labels[j]}] {comp[j]:+.4f}" for j in order))
    elif args.task == "directional-variance":
        print("directional variance: " + " ".join(f"{v:.6g}" for v in out["directional_variance"]))
    elif args.task == "regression":
        print("coefficients: " + " ".join(f"{c:+.4g}" for c in out["coefficients"]))
        diag = out["diagnostics"]
        print(f"ridge {diag['ridge']:.4g}; estimated relative coefficient error {diag['estimated_relative_error']:.2f}")
    else:
        cov = np.asarray(out["covariance"])
        print(f"covariance: {cov.shape[0]}x{cov.shape[1]}, trace {np.trace(cov):.4g}")
    if "diagnostics" in out and args.task != "regression":  # the regression's own line is above
        from dppca_dask.diagnostics import Diagnostics

        print("diagnostics: " + Diagnostics.from_dict(out["diagnostics"]).summary())
    if args.out:
        print(f"written to {out['output']}")
    return 0
