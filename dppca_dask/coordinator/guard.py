"""Task errors that leave the workers without data in them.

When a task raises on a Dask worker, distributed logs ``Compute Failed`` with the repr of the task and its
arguments (a store, a partition) and the exception text, keeps the traceback with its local values for the client,
and the scheduler shows those logs on its ``/info/logs`` page. In a private run any of these may quote the data.

:func:`guarded` wraps a task function so that it never raises on the worker: an exception becomes a
:class:`TaskFailure` value that holds only what is safe to show, which flows through the reduction tasks (a guarded
merge passes the first failure of its inputs on) and is raised again at the client by :func:`unwrap`:

- an error of this package (a :class:`~dppca_dask.errors.DppcaError`) keeps its class and message, whose texts
  are written to name only public values, locations and fixes; its cause and traceback are dropped;
- any other exception becomes a :class:`~dppca_dask.errors.TaskFailedError` naming the exception's class and the
  code locations of its traceback (``file:line in function``), never its message or any value.

The driver wraps each task function it submits with :func:`guarded` and passes the gathered value through
:func:`unwrap`.
"""

from __future__ import annotations

import logging
import os
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from dppca_dask.errors import DppcaError, TaskFailedError

__all__ = ["OneLineLogFilter", "TaskFailure", "guarded", "one_line_logs", "unwrap"]

#: At most this many code locations of a worker traceback are kept (the innermost ones).
MAX_FRAMES = 12


@dataclass(frozen=True, slots=True)
class TaskFailure:
    """The safe description of an exception raised by a task on a worker (a value, not an exception)."""

    #: What the task function was (``power_partial``); public code, never data.
    task: str
    #: ``module.ClassName`` of the exception.
    error_type: str
    #: Code locations of the traceback, innermost last.
    frames: tuple[str, ...]
    #: For errors of this package: the class, ``args`` and attributes to rebuild it from; else ``None``.
    package_error: tuple[type[DppcaError], tuple[Any, ...], dict[str, Any]] | None = None

    @classmethod
    def from_exception(cls, exc: BaseException, task: str) -> TaskFailure:
        frames = tuple(
            f"{os.path.basename(fs.filename)}:{fs.lineno} in {fs.name}"
            for fs in traceback.extract_tb(exc.__traceback__)
        )[-MAX_FRAMES:]
        kind = type(exc)
        package_error: tuple[type[DppcaError], tuple[Any, ...], dict[str, Any]] | None = None
        if isinstance(exc, DppcaError):
            attrs = {k: v for k, v in vars(exc).items() if isinstance(v, (str, int, float, bool, type(None)))}
            package_error = (type(exc), tuple(str(a) for a in exc.args[:1]), attrs)
        return cls(task=task, error_type=f"{kind.__module__}.{kind.__qualname__}", frames=frames,
                   package_error=package_error)

    def to_exception(self) -> DppcaError:
        """The exception to raise at the client."""
        if self.package_error is not None:
            kind, args, attrs = self.package_error
            exc = kind.__new__(kind)
            exc.args = args
            exc.__dict__.update(attrs)
            return exc
        short = self.error_type.rsplit(".", 1)[-1]
        where = f" at {self.frames[-1]}" if self.frames else ""
        return TaskFailedError(
            f"a task ({self.task}) failed on a Dask worker with {short}{where}; its message is withheld because it "
            "may quote the data: reproduce the failure on data you may inspect, or run the same computation without "
            "Dask (client='local' in the API) to see it",
            error_type=self.error_type,
            frames=self.frames,
        )


class _Guarded:
    """A picklable wrapper of ``fn`` that returns a :class:`TaskFailure` instead of raising."""

    __slots__ = ("fn", "name")

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn
        self.name = getattr(fn, "__name__", type(fn).__name__).lstrip("_")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        for arg in args:
            if isinstance(arg, TaskFailure):  # an input task failed: pass its failure on, do not compute
                return arg
        try:
            return self.fn(*args, **kwargs)
        except Exception as exc:  # every error, so that distributed never logs the task and its arguments
            return TaskFailure.from_exception(exc, self.name)

    def __repr__(self) -> str:  # what distributed shows for the task: the function's name only
        return f"guarded({self.name})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (_Guarded, (self.fn,))


def guarded(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap a task function so that its exceptions come back as :class:`TaskFailure` values (see the module)."""
    return fn if isinstance(fn, _Guarded) else _Guarded(fn)


def unwrap(value: Any) -> Any:
    """Return ``value``; raise the safe exception when it is a :class:`TaskFailure`."""
    if isinstance(value, TaskFailure):
        raise value.to_exception() from None
    return value


class OneLineLogFilter(logging.Filter):
    """Log records of one line: no traceback (it may show values of the data), first line of the message only;
    a record with nothing left (distributed logs bare tracebacks) is dropped."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info is None and record.exc_text is None and record.stack_info is None:
            message = record.getMessage()
            if "\n" not in message:
                return True
        else:
            message = record.getMessage()
        first = message.strip().split("\n", 1)[0].rstrip()
        if not first:
            return False
        record.msg, record.args = first, ()
        record.exc_info = record.exc_text = record.stack_info = None
        return True


def one_line_logs(prefixes: tuple[str, ...] = ("distributed", "dask", "tornado", "asyncio", "bokeh")) -> None:
    """Add :class:`OneLineLogFilter` to every handler of the root logger and of the loggers under ``prefixes`` in
    this process (the command line's process, or a worker's or nanny's through :func:`one_line_log_plugins`)."""
    loggers = [logging.getLogger()] + [
        logging.getLogger(name) for name in list(logging.root.manager.loggerDict)
        if name.split(".", 1)[0] in prefixes
    ]
    for logger in loggers:
        for handler in getattr(logger, "handlers", []):
            if not any(isinstance(f, OneLineLogFilter) for f in handler.filters):
                handler.addFilter(OneLineLogFilter())


def one_line_log_plugins() -> tuple[object, ...]:
    """Worker and nanny plugins that make the logs of a cluster's own processes one line each (no traceback):
    the embedded LocalCluster's workers share the terminal, and a worker's traceback may show data values."""
    from distributed.diagnostics.plugin import NannyPlugin, WorkerPlugin

    class OneLineWorkerLogs(WorkerPlugin):
        name = "dppca-one-line-logs"

        def setup(self, worker: object) -> None:
            one_line_logs()

    class OneLineNannyLogs(NannyPlugin):
        name = "dppca-one-line-logs-nanny"

        def setup(self, nanny: object) -> None:
            one_line_logs()

    return OneLineWorkerLogs(), OneLineNannyLogs()
