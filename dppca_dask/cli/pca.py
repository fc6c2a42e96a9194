"""``dppca-dask pca STORE``: private principal components of a store, printed and optionally written to disk."""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np

__all__ = ["format_result", "register"]

#: One line for ``dppca-dask --help`` (read without registering the command).
SUMMARY = "differentially private principal components of a store"


def register(subparsers: Any) -> None:
    from dppca_dask.api import DEFAULT_N_ITER, DEFAULT_SVT_SHARE
    from dppca_dask.cli._cluster import add_cluster_arguments
    from dppca_dask.methods import mechanism_help, mechanism_names

    p = subparsers.add_parser(
        "pca",
        help=SUMMARY,
        description="Compute differentially private top principal directions of a matrix store on Dask.",
    )
    p.add_argument("store", help="a dppca_dask store or an AnnData zarr store")
    p.add_argument("--epsilon", type=float, required=True, help="total privacy budget epsilon")
    p.add_argument("--delta", type=float, required=True, help="total privacy budget delta")
    p.add_argument("--mechanism", default="adaptive-power", choices=mechanism_names("pca"),
                   help=mechanism_help("pca"))
    p.add_argument("--n-components", type=int, default=1, help="number of components (default 1)")
    p.add_argument("--n-iter", type=int, default=None, help=f"iterations per component (default {DEFAULT_N_ITER})")
    p.add_argument("--row-norm-bound", type=float, default=1.0, help="public L2 clipping bound of rows (default 1)")
    p.add_argument("--svt-share", type=float, default=DEFAULT_SVT_SHARE,
                   help=f"share of the budget for the SVT steps (default {DEFAULT_SVT_SHARE})")
    p.add_argument("--calibration", choices=("standard", "paper"), default="standard")
    p.add_argument("--coherence", type=float, default=None,
                   help="private-power: public coherence bound C (default: N, the worst case; with --c-doubling the "
                        "first C tried)")
    p.add_argument("--entry-bound", type=float, default=1.0,
                   help="private-power: neighbours differ in one entry by at most this (default 1)")
    p.add_argument("--c-doubling", action="store_true",
                   help="private-power: try C, 2C, 4C, ..., N and keep the first run that passes (budget split)")
    p.add_argument("--symmetric", action="store_true",
                   help="private-power: the store is a square matrix A (PSD for more than one component); runs on "
                        "(A + A^T)/2, A itself when symmetric")
    p.add_argument("--scheduler", default=None, help="Dask scheduler address or scheduler file (default: local)")
    add_cluster_arguments(p)
    p.add_argument("--persist", action=argparse.BooleanOptionalAction, default=None,
                   help="keep partitions in worker memory (default: when they fit)")
    p.add_argument("--seed", type=int, default=None, help="reproducible run; the result is then NOT private")
    p.add_argument("--out", default=None, help="directory to write components.zarr and result.json")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--timings", action="store_true",
                   help="include wall-clock timings in the output (NOT covered by the privacy guarantee: they "
                        "depend on the data)")
    p.set_defaults(handler=run)


def format_result(result: Any, *, top: int = 8) -> str:
    """Human-readable summary: the privacy statement, each component's largest coordinates, the thresholds."""
    report = result.privacy
    lines = [f"mechanism: {result.mechanism}"]
    if result.private:
        lines.append(
            f"privacy: ({report.epsilon:.4g}, {report.delta:.3g})-differentially private for "
            f"neighbours differing by {report.neighbouring} (accountant: {report.accountant})"
        )
        figures = getattr(report, "figures", {}) or {}
        extra = ", ".join(
            f"{name} eps={value['epsilon']:.4g}" if isinstance(value, dict) and "epsilon" in value
            else f"{name} eps={value:.4g}"
            for name, value in figures.items()
            if isinstance(value, (int, float, dict))
        )
        if extra:
            lines.append(f"  other figures at the same delta: {extra}")
    else:
        lines.append("privacy: NOT differentially private (baseline or seeded run)")
    for i, comp in enumerate(np.asarray(result.components)):
        order = np.argsort(-np.abs(comp))[:top]
        coords = ", ".join(f"[{j}] {comp[j]:+.4f}" for j in order)
        lines.append(f"component {i}: largest coordinates {coords}")
    if result.thresholds is not None:
        for i, row in enumerate(np.asarray(result.thresholds)):
            lines.append(f"component {i}: released thresholds " + " ".join(f"{t:.4g}" for t in row))
    return "\n".join(lines)


def _private_power_options(args: argparse.Namespace) -> dict[str, Any]:
    """The private-power options that were given (other mechanisms refuse them)."""
    out: dict[str, Any] = {}
    if args.coherence is not None:
        out["coherence"] = args.coherence
    if args.entry_bound != 1.0:
        out["entry_bound"] = args.entry_bound
    if args.c_doubling:
        out["c_doubling"] = True
    if args.symmetric:
        out["symmetric"] = True
    return out


def run(args: argparse.Namespace) -> int:
    from dppca_dask.api import pca
    from dppca_dask.cli._paths import check_store

    check_store(args.store)

    result = pca(
        args.store,
        epsilon=args.epsilon,
        delta=args.delta,
        n_components=args.n_components,
        n_iter=args.n_iter,
        row_norm_bound=args.row_norm_bound,
        mechanism=args.mechanism,
        client=args.scheduler,
        seed=args.seed,
        persist=args.persist,
        svt_share=args.svt_share,
        calibration=args.calibration,
        timings=args.timings,
        **_private_power_options(args),
    )
    if args.out:
        result.save(args.out)
    if args.json:
        out = result.to_dict()
        if args.out:
            out["output"] = args.out
        from dppca_dask.cli import _json

        _json.dump(out)
    else:
        print(format_result(result))
        if args.timings and result.timings:
            print(f"timings (not covered by the privacy guarantee): total {result.timings['total']:.2f} s")
        if args.out:
            print(f"written to {args.out}")
    return 0
