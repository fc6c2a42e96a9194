"""The ``dppca-dask`` command line: a thin layer over the library.

Each subcommand lives in its own module with a ``register(subparsers)`` function that adds its parser and sets
``handler``. Errors of the library end the process with their ``exit_code`` (2 for invalid input or parameters,
3 for an exhausted privacy budget) and a one-line message on standard error.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from dppca_dask import __version__
from dppca_dask.errors import DppcaError

__all__ = ["main", "build_parser"]

_SUBCOMMANDS = ("ingest", "info", "pca", "lowrank", "run", "budget", "demo")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dppca-dask",
        description="Differentially private PCA and low-rank analysis of large sparse matrices, on Dask.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument(
        "-v", "--verbose", action="count", default=0, help="more log output (-v: info, -vv: debug)"
    )
    parser.add_argument("-q", "--quiet", action="store_true", help="only errors on standard error")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    import importlib

    for name in _SUBCOMMANDS:
        try:
            module = importlib.import_module(f"dppca_dask.cli.{name}")
        except ModuleNotFoundError as exc:  # a subcommand not built into this release
            if exc.name != f"dppca_dask.cli.{name}":
                raise
            continue
        module.register(subparsers)
    return parser


def _configure_logging(verbose: int, quiet: bool) -> None:
    level = logging.ERROR if quiet else (logging.WARNING, logging.INFO, logging.DEBUG)[min(verbose, 2)]
    logging.basicConfig(level=level, format="%(asctime)s %(name)s %(levelname)s: %(message)s")
    # Dask's own chatter stays at warnings unless debugging.
    for name in ("distributed", "dask"):
        logging.getLogger(name).setLevel(logging.DEBUG if verbose >= 3 else logging.WARNING)


def _format_warning(message: object, category: type, filename: str, lineno: int, line: str | None = None) -> str:
    return f"dppca-dask: warning: {message}\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    _configure_logging(args.verbose, args.quiet)
    import warnings

    warnings.formatwarning = _format_warning  # type: ignore[assignment]
    try:
        return int(args.handler(args) or 0)
    except DppcaError as exc:
        print(f"dppca-dask {args.command}: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print(f"dppca-dask {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader went away (`dppca-dask ... | head`): stop writing, quietly
        import os

        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1


if __name__ == "__main__":  # pragma: no cover - python -m dppca_dask.cli
    sys.exit(main())
