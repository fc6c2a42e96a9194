"""The ``dppca-dask`` command line: a thin layer over the library.

Each subcommand lives in its own module with a ``register(subparsers)`` function that adds its parser and sets
``handler``. Errors of the library end the process with their ``exit_code`` (2 for invalid input or parameters,
3 for an exhausted privacy budget, 4 for a public mechanism failure, 5 when the Dask cluster was lost during the run)
and a one-line message on standard error; any other exception with exit code 1 and one line naming its class and
where it was raised, never its message (it may quote the data); ``--debug`` adds the traceback; Ctrl-C exits 130.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from dppca_dask._version import __version__
from dppca_dask.errors import DppcaError

__all__ = ["main", "build_parser"]

_SUBCOMMANDS = ("ingest", "append", "info", "pca", "lowrank", "window", "topics", "run", "releases", "budget", "demo")


def build_parser(command: str | None = "") -> argparse.ArgumentParser:
    """The full parser (every subcommand registered); with ``command`` (a subcommand's name, or ``None`` for none)
    only that one is registered in full and the others are listed by their ``SUMMARY``, without importing what
    their options need (``dppca-dask --help`` and ``--version`` start in a fraction of a second)."""
    parser = argparse.ArgumentParser(
        prog="dppca-dask",
        description="Differentially private PCA and low-rank analysis of large sparse matrices, on Dask.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument(
        "-v", "--verbose", action="count", default=0, help="more log output (-v: info, -vv: debug)"
    )
    parser.add_argument("-q", "--quiet", action="store_true",
                        help="no log output: only errors and warnings (a run that is not private, a caveat of the "
                             "privacy guarantee) on standard error")
    parser.add_argument("--log-format", choices=("text", "json"), default="text",
                        help="log lines on standard error as text (default) or one JSON object per line (time, "
                             "level, logger, message) for a log collector")
    parser.add_argument(
        "--debug", action="store_true",
        help="print the traceback of an error (it may show values of the data: not for private runs)",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    import importlib

    for name in _SUBCOMMANDS:
        try:
            module = importlib.import_module(f"dppca_dask.cli.{name}")
        except ModuleNotFoundError as exc:  # a subcommand not built into this release
            if exc.name != f"dppca_dask.cli.{name}":
                raise
            continue
        summary = getattr(module, "SUMMARY", None)
        if command == "" or command == name or summary is None:
            module.register(subparsers)
        else:
            subparsers.add_parser(name, help=summary)
    return parser


def _command_of(argv: Sequence[str]) -> str | None:
    """The subcommand named in ``argv`` (the first word that is not an option or the value of ``--log-format``,
    the one top-level option that takes one), or ``None``."""
    skip = False
    for word in argv:
        if skip:
            skip = False
            continue
        if word == "--":
            return None
        if word == "--log-format":
            skip = True
            continue
        if not word.startswith("-"):
            return word
    return None



def __getattr__(name: str) -> object:
    if name == "_OneLine":  # imported on use: the coordinator loads dask.distributed
        from dppca_dask.coordinator.guard import OneLineLogFilter

        return OneLineLogFilter
    raise AttributeError(f"module 'dppca_dask.cli' has no attribute '{name}'")

#: Loggers of the libraries under us: silent under ``-q``, warnings otherwise, everything with ``-vvv``.
_LIBRARY_LOGGERS = ("distributed", "dask", "tornado", "asyncio", "bokeh")


class JsonLogFormatter(logging.Formatter):
    """One JSON object per log line: ``time`` (UTC, ISO 8601), ``level``, ``logger``, ``message``; with
    ``--debug`` an exception's traceback under ``traceback``. The message is the same text a text log shows."""

    def format(self, record: logging.LogRecord) -> str:
        import datetime as _dt
        import json

        out = {"time": _dt.datetime.fromtimestamp(record.created, tz=_dt.timezone.utc).isoformat(
                   timespec="milliseconds"),
               "level": record.levelname, "logger": record.name, "message": record.getMessage()}
        if record.exc_info:
            out["traceback"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


def _configure_logging(verbose: int, quiet: bool, debug: bool = False, log_format: str = "text") -> None:
    level = logging.ERROR if quiet else (logging.WARNING, logging.INFO, logging.DEBUG)[min(verbose, 2)]
    logging.basicConfig(level=level, format="%(asctime)s %(name)s %(levelname)s: %(message)s")
    if log_format == "json":
        for handler in logging.root.handlers:
            handler.setFormatter(JsonLogFormatter())
    library_level = logging.CRITICAL + 1 if quiet else (logging.DEBUG if verbose >= 3 else logging.WARNING)
    _configure_library_logging(library_level, debug)
    # distributed is imported only when a run needs a cluster (an in-process run does not): it sets up its own
    # loggers then, so the settings are applied again right after.
    from dppca_dask.coordinator.client import when_distributed_imported

    when_distributed_imported(lambda: _configure_library_logging(library_level, debug))


def _configure_library_logging(library_level: int, debug: bool) -> None:
    # distributed configures some of its child loggers (distributed.client, ...) with levels of their own: set
    # every logger of these libraries that exists now; those made later inherit from their parent.
    for name in list(logging.root.manager.loggerDict):
        if name.split(".", 1)[0] in _LIBRARY_LOGGERS:
            logging.getLogger(name).setLevel(library_level)
    for name in _LIBRARY_LOGGERS:
        logging.getLogger(name).setLevel(library_level)
    if debug:
        return
    # Without --debug no handler prints a traceback: the root's and those distributed installs on its loggers.
    from dppca_dask.coordinator.guard import one_line_logs

    one_line_logs(_LIBRARY_LOGGERS)


def _format_warning(message: object, category: type, filename: str, lineno: int, line: str | None = None) -> str:
    return f"dppca-dask: warning: {message}\n"


def _innermost_location(exc: BaseException) -> str:
    import os
    import traceback

    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return ""
    last = frames[-1]
    return f" at {os.path.basename(last.filename)}:{last.lineno} in {last.name}"


def _unexpected(exc: BaseException) -> str:
    """One line for an exception that is not one of the package's: its class and where, never its message (which
    may quote the data); an OSError's reason and file name are kept (they name the user's own paths)."""
    what = type(exc).__name__
    if isinstance(exc, OSError) and exc.strerror:
        what += f" ({exc.strerror}{f': {exc.filename!r}' if exc.filename else ''})"
    return f"unexpected {what}{_innermost_location(exc)}; run with --debug for the traceback"


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit code (0 success, 1 unexpected error, 2 invalid input or parameters,
    3 budget exhausted, 4 public mechanism failure, 5 the Dask cluster was lost during the run, 130 interrupted)."""
    if argv is None:
        argv = sys.argv[1:]
    parser = build_parser(_command_of(argv))
    args = parser.parse_args(argv)
    debug = bool(getattr(args, "debug", False))
    _configure_logging(args.verbose, args.quiet, debug, args.log_format)
    import traceback
    import warnings

    warnings.formatwarning = _format_warning  # type: ignore[assignment]
    prefix = f"dppca-dask {args.command}"
    try:
        from dppca_dask.cli._cluster import apply_cluster_arguments

        with apply_cluster_arguments(args):
            return int(args.handler(args) or 0)
    except DppcaError as exc:
        if debug:
            traceback.print_exc()
        print(f"{prefix}: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print(f"{prefix}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader went away (`dppca-dask ... | head`): stop writing, quietly
        import os

        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
    except (SystemExit, GeneratorExit):
        raise
    except BaseException as exc:  # noqa: BLE001 - the top level: one line, never a traceback unless --debug
        from dppca_dask.coordinator.client import cluster_lost_error, is_cluster_loss

        if debug:
            traceback.print_exc()
        if is_cluster_loss(exc):
            lost = cluster_lost_error(exc, "during the run")
            print(f"{prefix}: error: {lost}", file=sys.stderr)
            return lost.exit_code
        print(f"{prefix}: error: {_unexpected(exc)}", file=sys.stderr)
        return 1


if __name__ == "__main__":  # pragma: no cover - python -m dppca_dask.cli
    sys.exit(main())
