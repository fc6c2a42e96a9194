"""``dppca-dask pca STORE``: private principal components of a store, printed and optionally written to disk."""

from __future__ import annotations

import argparse
from typing import Any, cast

import numpy as np

__all__ = ["format_result", "register"]

#: One line for ``dppca-dask --help`` (read without registering the command).
SUMMARY = "differentially private principal components of a store"


def register(subparsers: Any) -> None:
    from dppca_dask.methods._params import DEFAULT_N_ITER, DEFAULT_SVT_SHARE
    from dppca_dask.cli._cluster import add_cluster_arguments, add_executor_argument
    from dppca_dask.methods import mechanism_help, mechanism_names

    p = subparsers.add_parser(
        "pca",
        help=SUMMARY,
        description="Compute differentially private top principal directions of a matrix store on Dask.",
    )
    p.add_argument("store", help="a dppca_dask store, an AnnData zarr store or an AnnData .h5ad file (read in row "
                                 "blocks; its width is not declared: ingest it with --n-features to declare it)")
    p.add_argument("--layer", default=None, metavar="NAME",
                   help="analyse layers/NAME of the AnnData file or store instead of X")
    p.add_argument("--epsilon", type=float, required=True, help="total privacy budget epsilon")
    p.add_argument("--delta", type=float, required=True, help="total privacy budget delta")
    p.add_argument("--mechanism", default=None, choices=mechanism_names("pca"),
                   help=mechanism_help("pca") + " (default: auto)")
    p.add_argument("--n-components", type=int, default=1, help="number of components (default 1)")
    p.add_argument("--n-iter", type=int, default=None, help=f"iterations per component (default {DEFAULT_N_ITER})")
    p.add_argument("--row-norm-bound", type=_bound, default=1.0,
                   help="public L2 clipping bound of rows (default 1), or 'auto': the 90th percentile of the row norms, "
                        "released privately from 5%% of epsilon")
    p.add_argument("--center", choices=("none", "private"), default=None,
                   help="'private' (default for auto, adaptive-power and analyze-gauss): centre the rows at their "
                        "private mean (10%% of the budget) and release the explained variance (5%%); 'none': components of "
                        "the uncentred rows")
    p.add_argument("--plot", default=None, metavar="FILE.png",
                   help="write a scree plot of the released explained variance ratio (needs matplotlib)")
    p.add_argument("--svt-share", type=float, default=DEFAULT_SVT_SHARE,
                   help=f"share of the budget for the SVT steps (default {DEFAULT_SVT_SHARE})")
    p.add_argument("--calibration", choices=("standard", "paper"), default="standard",
                   help="'standard' (default): constants that meet the target (epsilon, delta); 'paper': the "
                        "paper's own constants, for comparison (where a paper's are wrong, the privacy report "
                        "states what they give)")
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
    add_executor_argument(p)
    add_cluster_arguments(p)
    p.add_argument("--persist", action=argparse.BooleanOptionalAction, default=None,
                   help="keep partitions in worker memory between steps (default: the dppca_dask.persist setting, "
                        "false: re-read every step)")
    p.add_argument("--seed", type=int, default=None, help="reproducible run; the result is then NOT private")
    p.add_argument("--out", default=None, help="directory to write components.zarr and result.json")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--timings", action="store_true",
                   help="include wall-clock timings in the output (NOT covered by the privacy guarantee: they "
                        "depend on the data)")
    from dppca_dask.cli._paths import add_storage_option

    add_storage_option(p)
    p.set_defaults(handler=run)


def feature_labels(store: Any, storage_options: Any = None) -> tuple[list[str] | None, str | None]:
    """Column labels from the store's ``var_ids`` when they are public, and a note when they are withheld.

    The ids are public only with a declared schema (``ingest --n-features`` or ``--column-ids``): ids found in the
    data (the columns a Parquet table happens to use, say) are not covered by the privacy guarantee, so they label
    nothing that is released.
    """
    import zarr

    from dppca_dask.storage import MatrixStore, open_matrix
    from dppca_dask.storage import _format

    if not isinstance(store, MatrixStore):
        try:
            store = open_matrix(store, storage_options=storage_options)
        except Exception:  # noqa: BLE001 - pca itself reported any problem with the store
            return None, None
    if store.format_version is None:
        return None, None
    group = store.open_group()
    key = _format.locate(group, _format.ID_MAPS["var_ids"])
    if key is None:
        return None, None
    if store.schema != "declared":
        return None, ("column labels (var_ids) withheld: the store's columns were inferred from the data; declare "
                      "them at ingest (--n-features, or --column-ids for Parquet) to label components")
    return [str(v) for v in np.asarray(cast(zarr.Array, group[key])[:]).tolist()], None


def _bound(text: str) -> float | str:
    if text == "auto":
        return "auto"
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number or 'auto'; got {text!r}") from None


def _center(args: argparse.Namespace) -> Any:
    """The ``center`` of :func:`pca`: ``--center``, or private by default for the mechanisms that centre."""
    from dppca_dask.methods.adaptive_power.centring import CENTRING_MECHANISMS

    if args.center is None:
        return "private" if args.mechanism in CENTRING_MECHANISMS else False
    return args.center == "private"


def _check_plot(path: str | None) -> None:
    """Fail before any budget is spent: matplotlib is importable and the file's directory exists."""
    import os

    from dppca_dask.errors import InvalidParameterError

    if path is None:
        return
    if not path.lower().endswith(".png"):
        raise InvalidParameterError(f"--plot must name a .png file; got {path!r}")
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise InvalidParameterError(f"--plot: the directory {directory!r} does not exist; create it first")
    if os.path.isdir(path):
        raise InvalidParameterError(f"--plot: {path!r} is a directory; name the .png file to write")
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise InvalidParameterError("--plot needs matplotlib; install it (pip install matplotlib)") from None


def write_scree_plot(result: Any, path: str) -> None:
    """A scree plot of the released explained variance ratio (and its cumulative sum), written to ``path``: owner-only
    (0600) unless ``DPPCA_DASK_FILE_MODE=umask``, as results are, complete or absent; a file of that name is
    replaced. The directory of ``path`` must exist."""
    import os

    import matplotlib

    from dppca_dask.errors import InvalidParameterError
    from dppca_dask.storage._files import private_replacement

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ratio = np.asarray(result.explained_variance_ratio, dtype=np.float64)
    index = np.arange(1, ratio.shape[0] + 1)
    fig, ax = plt.subplots(figsize=(5, 3.5))
    ax.bar(index, ratio, label="explained variance ratio")
    ax.plot(index, np.cumsum(ratio), marker="o", color="black", label="cumulative")
    ax.set_xlabel("component")
    ax.set_ylabel("share of the total variance")
    ax.set_xticks(index)
    ax.set_title(f"{result.mechanism} (private release)" if result.private else f"{result.mechanism} (not private)")
    ax.legend()
    fig.tight_layout()
    try:
        if os.path.isdir(path):  # a directory is never replaced by a picture
            raise InvalidParameterError(f"--plot: {path!r} is a directory; name the .png file to write")
        with private_replacement(path) as partial:
            fig.savefig(partial, dpi=100, format="png")
    finally:
        plt.close(fig)


def format_result(result: Any, *, top: int = 8, labels: list[str] | None = None) -> str:
    """Human-readable summary: the privacy statement, each component's largest coordinates (labelled with the
    store's public column ids when given), the thresholds."""
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
        coords = ", ".join(f"[{j if labels is None else labels[j]}] {comp[j]:+.4f}" for j in order)
        lines.append(f"component {i}: largest coordinates {coords}")
    if result.thresholds is not None and np.asarray(result.thresholds).size:
        label = "block" if np.asarray(result.thresholds).shape[0] == 1 and result.n_components > 1 else "component"
        for i, row in enumerate(np.asarray(result.thresholds)):
            name = "block" if label == "block" else f"component {i}"
            lines.append(f"{name}: released thresholds " + " ".join(f"{t:.4g}" for t in row))
    if getattr(result, "explained_variance_ratio", None) is not None:
        lines.append("explained variance ratio (released): " + " ".join(
            f"{v:.4g}" for v in result.explained_variance_ratio))
        lines.append("explained variance (released): " + " ".join(f"{v:.4g}" for v in result.explained_variance))
    if getattr(result, "mean", None) is not None:
        lines.append(f"centred at the {'released' if result.private else 'computed'} mean (in the JSON output)")
    if "row_norm_bound" in (result.extras or {}):
        lines.append(f"row norm bound (released): {result.extras['row_norm_bound']:.4g}")
    if "clipped_fraction" in (result.extras or {}):
        lines.append(f"rows clipped by the row norm bound (released): {result.extras['clipped_fraction']:.1%}")
    if getattr(result, "diagnostics", None) is not None:
        lines.append("diagnostics: " + result.diagnostics.summary())
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
    from dppca_dask.api._pca import pca
    from dppca_dask.cli._paths import check_result_dir, check_store, storage_options

    options = storage_options(args)
    check_store(args.store, anndata_ok=True, options=options)
    check_result_dir(args.out, stores=(args.store,))

    from dppca_dask.methods.adaptive_power.block_plan import BLOCK_POWER
    from dppca_dask.errors import InvalidParameterError

    if args.mechanism is None:
        from dppca_dask.methods._params import default_mechanism

        args.mechanism = default_mechanism(args.n_components)
    _check_plot(args.plot)
    center = _center(args)
    if args.plot and not (center or args.row_norm_bound == "auto" or args.mechanism == BLOCK_POWER):
        raise InvalidParameterError(
            f"--plot needs a released explained variance, which mechanism {args.mechanism!r} without centring does "
            "not release: use --center private (adaptive-power, analyze-gauss) or drop --plot")
    result = pca(
        args.store,
        storage_options=options,
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
        center=center,
        executor=args.executor,
        layer=args.layer,
        **_private_power_options(args),
    )
    from dppca_dask.diagnostics import print_cli_warning

    print_cli_warning(result.diagnostics, f"the {result.mechanism} release")
    if args.plot:
        write_scree_plot(result, args.plot)
    if args.out:
        result.save(args.out)
    labels, note = feature_labels(args.store, options) if args.layer is None and not args.store.lower().endswith(".h5ad") \
        else (None, None)
    if args.json:
        out = result.to_dict()
        if labels is not None:
            out["feature_names"] = labels  # column j of every component is feature_names[j]
        if args.out:
            out["output"] = args.out
        from dppca_dask.cli import _json

        _json.dump(out)
    else:
        print(format_result(result, labels=labels))
        if note:
            print(note)
        if args.timings and result.timings:
            print(f"timings (not covered by the privacy guarantee): total {result.timings['total']:.2f} s")
        if args.out:
            print(f"written to {args.out}")
        if args.plot:
            print(f"scree plot written to {args.plot}")
    return 0
