"""``dppca-dask lowrank STORE``: a private low-rank approximation, written factored to a directory.

Prints the public parts of the result: the mechanism, the rank, the privacy report with its neighbouring relation,
and where the factors were written (never the factors themselves).
"""

from __future__ import annotations

import argparse
from typing import Any

__all__ = ["format_lowrank", "register"]

#: One line for ``dppca-dask --help`` (read without registering the command).
SUMMARY = "differentially private low-rank approximation of a store (factors written to --out)"


def register(subparsers: Any) -> None:
    from dppca_dask.cli._cluster import add_cluster_arguments, add_executor_argument
    from dppca_dask.methods import mechanism_help, mechanism_names

    p = subparsers.add_parser(
        "lowrank",
        help=SUMMARY,
        description="Compute a differentially private low-rank approximation B = left @ right of a matrix store "
                    "(in this process or on Dask, see --executor) and write the factors to a directory "
                    "(factors.zarr and result.json).",
    )
    p.add_argument("store", help="a dppca_dask store or an AnnData zarr store")
    p.add_argument("--mechanism", default="private-low-rank", choices=mechanism_names("lowrank"),
                   help=mechanism_help("lowrank"))
    p.add_argument("--rank", type=int, required=True, help="target rank r")
    p.add_argument("--epsilon", type=float, required=True, help="total privacy budget epsilon")
    p.add_argument("--delta", type=float, required=True, help="total privacy budget delta")
    p.add_argument("--out", required=True, help="directory to write factors.zarr and result.json")
    p.add_argument("--calibration", choices=("standard", "paper"), default="standard",
                   help="standard (corrected constants, default) or the paper's, for reproduction")
    rows = p.add_argument_group("private-low-rank and randomized-response")
    rows.add_argument("--row-norm-bound", type=float, default=None,
                      help="rows are clipped to this L2 norm (default 1; 'inf' for none, then give --row-change-bound)")
    rows.add_argument("--row-change-bound", type=float, default=None,
                      help="the L2 change of one row the guarantee covers (default: the row norm bound)")
    pfp = p.add_argument_group("private-low-rank")
    pfp.add_argument("--oversampling", type=int, default=None, help="oversampling p (default 2)")
    pfp.add_argument("--projection", choices=("paper", "tight"), default=None,
                     help="paper (Fig. 3, default) or tight (one Gaussian at the Frobenius sensitivity; extension)")
    pfp.add_argument("--prune-alpha", type=float, default=None, help="pruning threshold alpha (default 1: none)")
    pfp.add_argument("--left-factor", choices=("orthonormal", "pruned"), default=None)
    pfp.add_argument("--truncate", action="store_true", help="truncate the output to rank r (post-processing)")
    rr = p.add_argument_group("randomized-response")
    rr.add_argument("--max-dense-bytes", type=size, default=None, metavar="SIZE",
                    help="largest coordinator memory for the dense matrix: bytes or a size such as 512MiB "
                         "(default 2 GiB)")
    pp = p.add_argument_group("private-power")
    pp.add_argument("--entry-bound", type=float, default=None, help="one entry changes by at most this (default 1)")
    pp.add_argument("--coherence", type=float, default=None, help="public coherence bound C")
    pp.add_argument("--c-doubling", action="store_true", help="search C by doubling (budget split)")
    pp.add_argument("--n-iter", type=int, default=None, help="rounds per component (default 20)")
    pp.add_argument("--symmetric", action="store_true",
                    help="the store is a square (PSD) matrix A; runs on (A + A^T)/2, A itself when symmetric")
    pp.add_argument("--signed-values", action="store_true",
                    help="release Rayleigh quotients (private sign estimate; indefinite symmetric stores)")
    p.add_argument("--scheduler", default=None, help="Dask scheduler address or scheduler file (default: local)")
    add_executor_argument(p)
    add_cluster_arguments(p)
    p.add_argument("--persist", action=argparse.BooleanOptionalAction, default=None,
                   help="keep partitions in worker memory between steps (default: the dppca_dask.persist setting, false)")
    p.add_argument("--seed", type=int, default=None, help="reproducible run; the result is then NOT private")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--timings", action="store_true",
                   help="include wall-clock timings (they depend on the data: NOT covered by the privacy guarantee)")
    from dppca_dask.cli._paths import add_storage_option

    add_storage_option(p)
    p.set_defaults(handler=run)


_OPTIONAL = (
    "row_norm_bound", "row_change_bound", "oversampling", "projection", "prune_alpha", "left_factor",
    "max_dense_bytes", "entry_bound", "coherence", "n_iter",
)
_FLAGS = ("truncate", "c_doubling", "symmetric", "signed_values")


def _rank_line(result: Any, requested: int | None) -> str:
    line = f"rank: {result.rank} (factors {result.shape[0]}x{result.rank} and {result.rank}x{result.shape[1]})"
    if requested is None or requested == result.rank:
        return line
    if result.rank > requested:
        return (f"{line}: the requested rank {requested} + oversampling {result.rank - requested} (the range "
                f"finder's sketch width; --truncate keeps the best rank-{requested} part, --oversampling sets it)")
    return f"{line}: the requested rank {requested}, capped by the matrix's shape"


def size(text: str) -> int:
    """Bytes from ``123`` or ``512MiB`` (as ``--memory-limit`` and ingest's limits take them)."""
    from dppca_dask.ingest._limits import parse_size

    return parse_size(text)


def format_lowrank(result: Any, out: str, *, requested_rank: int | None = None) -> str:
    """Human-readable public summary of a :class:`~dppca_dask.results.LowRankResult`; with ``requested_rank``, the
    rank line says how the output rank follows from it."""
    report = result.privacy
    lines = [f"mechanism: {result.mechanism}", _rank_line(result, requested_rank)]
    if result.private:
        lines.append(
            f"privacy: ({report.epsilon:.4g}, {report.delta:.3g})-differentially private; neighbouring: "
            f"{report.neighbouring} (accountant: {report.accountant}; target epsilon {report.target_epsilon:g})"
        )
        within = ("it stays at most the target" if report.meets_target else
                  f"it exceeds the target {report.target_epsilon:g} (the warning above says why)")
        lines.append(
            f"  epsilon {report.epsilon:.4g} is the whole run's: the accountant composes every noisy step "
            f"(for private-low-rank, the range finder and the projection) and {within}"
        )
        group = getattr(report, "group_privacy", None)
        if group:
            lines.append(f"  {group['neighbouring']}: epsilon={group['epsilon']:.4g} ({group['method']})")
    else:
        lines.append(f"privacy: NOT differentially private (seeded run); neighbouring: {report.neighbouring}")
    if getattr(result, "diagnostics", None) is not None:
        lines.append("diagnostics: " + result.diagnostics.summary())
    lines.append(f"factors written to {out} (factors.zarr: left, right; result.json)")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from dppca_dask.cli._paths import check_result_dir, check_store, storage_options
    from dppca_dask.api._lowrank import lowrank

    storage = storage_options(args)
    check_store(args.store, options=storage)
    check_result_dir(args.out, stores=(args.store,))

    options: dict[str, Any] = {name: getattr(args, name) for name in _OPTIONAL if getattr(args, name) is not None}
    options.update({name: True for name in _FLAGS if getattr(args, name)})
    result = lowrank(
        args.store,
        rank=args.rank,
        epsilon=args.epsilon,
        delta=args.delta,
        mechanism=args.mechanism,
        calibration=args.calibration,
        client=args.scheduler,
        executor=args.executor,
        seed=args.seed,
        persist=args.persist,
        timings=args.timings,
        storage_options=storage,
        **options,
    )
    result.save(args.out)
    from dppca_dask.diagnostics import print_cli_warning

    print_cli_warning(result.diagnostics, f"the {result.mechanism} release")
    if args.json:
        out = result.to_dict()
        out["output"] = args.out
        from dppca_dask.cli import _json

        _json.dump(out)
    else:
        print(format_lowrank(result, args.out, requested_rank=args.rank))
        if args.timings and result.timings:
            print(f"timings (not covered by the privacy guarantee): total {result.timings['total']:.2f} s")
    return 0
