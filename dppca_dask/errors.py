"""Errors raised by dppca_dask.

Every error says what is wrong, the offending value, and how to fix it, in one sentence shape:
``row_norm_bound must be > 0; got -1.0.``. Each class also inherits the builtin exception that fits, so callers
that catch ``ValueError`` or ``OSError`` keep working. ``exit_code`` is what the command line returns for it.

Errors about the data (``InvalidInputError`` and ``StoreCorruptError``) name where the problem is: the file, the
partition and the row. They are raised while ingesting or validating, before any privacy budget is reserved; they
are meant for the data owner, never for the recipients of a release.
"""

from __future__ import annotations

__all__ = [
    "BudgetExceededError",
    "CalibrationError",
    "DppcaError",
    "InvalidInputError",
    "InvalidParameterError",
    "JobSpecError",
    "LedgerError",
    "MechanismFailedError",
    "MissingExtraError",
    "InferredSchemaWarning",
    "NotPrivateWarning",
    "UnreliableReleaseWarning",
    "ReleaseError",
    "StoreCorruptError",
    "StoreNotFoundError",
    "UnsupportedStoreVersionError",
    "format_location",
]


def format_location(
    *, source: object | None = None, partition: int | None = None, row: int | None = None
) -> str:
    """Return ``"row 17 (partition 0) of 'data.svm'"``-style text for the parts that are known."""
    parts: list[str] = []
    if row is not None:
        parts.append(f"row {row}")
    if partition is not None:
        parts.append(f"(partition {partition})" if parts else f"partition {partition}")
    if source is not None:
        parts.append(f"of '{source}'" if parts else f"'{source}'")
    return " ".join(parts)


class DppcaError(Exception):
    """Base class of every error raised by dppca_dask."""

    exit_code: int = 1


class InvalidParameterError(DppcaError, ValueError):
    """A parameter is out of range or inconsistent: ``epsilon must be > 0; got 0.``"""

    exit_code = 2


class _LocatedError(DppcaError):
    """An error about the data, located by the attributes ``source``, ``partition`` and ``row`` when they are
    known (see :func:`format_location`)."""

    def __init__(
        self,
        message: str,
        *,
        source: object | None = None,
        partition: int | None = None,
        row: int | None = None,
    ) -> None:
        super().__init__(message)
        self.source = None if source is None else str(source)
        self.partition = partition
        self.row = row


class InvalidInputError(_LocatedError, ValueError):
    """The data is invalid: NaN or infinite values, bad indices, wrong shape, duplicate entries.

    Attributes ``source``, ``partition`` and ``row`` locate the problem when they are known.
    """

    exit_code = 2


class StoreNotFoundError(DppcaError, FileNotFoundError):
    """No matrix store (or input file) exists at the given path."""

    exit_code = 2


class StoreCorruptError(_LocatedError, OSError):
    """A store is damaged: a missing or undecodable chunk, inconsistent metadata.

    Attributes ``source``, ``partition`` and ``row`` locate the problem when they are known.
    """

    exit_code = 2


class UnsupportedStoreVersionError(DppcaError, ValueError):
    """The store was written in a format version this release cannot read."""

    exit_code = 2


class CalibrationError(DppcaError, ValueError):
    """The privacy target cannot be met with the requested parameters (e.g. the SVT share alone exceeds it)."""

    exit_code = 2


class BudgetExceededError(DppcaError):
    """A job asks for more privacy budget than its dataset has left in the ledger."""

    exit_code = 3


class LedgerError(DppcaError):
    """The budget ledger cannot be used as asked (totals differ from the recorded ones, a job id reused with other
    parameters, an unreadable database). Nothing is reserved or charged when it is raised."""

    exit_code = 2


class JobSpecError(DppcaError, ValueError):
    """A job specification file is invalid: unknown keys, missing tables, values of the wrong type."""

    exit_code = 2


class MechanismFailedError(DppcaError, RuntimeError):
    """A mechanism stopped with a public failure (e.g. the coherence check of private power iteration).

    The failure itself is part of the mechanism's output and is covered by its privacy guarantee; the message
    contains only public values (parameters and iteration numbers), never data-dependent ones.
    """

    exit_code = 4


class ReleaseError(DppcaError, RuntimeError):
    """A release broke the one-draw-per-release discipline (a key drawn twice, a draw outside a release).

    This is a programming or resumption error, never a public mechanism failure: nothing is drawn when it is raised.
    """

    exit_code = 1


class MissingExtraError(DppcaError, ImportError):
    """An optional dependency is not installed (``pip install 'dppca-dask[extra]'``)."""

    exit_code = 2


class NotPrivateWarning(UserWarning):
    """The result is not differentially private (a fixed seed, or a non-private baseline mechanism)."""


class InferredSchemaWarning(UserWarning):
    """The input's shape was read off the data, so releasing it (every output's length does) is not covered."""


class UnreliableReleaseWarning(UserWarning):
    """A release's diagnostics say its privacy noise dominates (``diagnostics.reliable`` is false)."""


class ClippingWarning(UserWarning):
    """A released share of the rows exceeds the public row-norm bound: clipping may have distorted the components
    (the released fraction is ``result.extras["clipped_fraction"]``; see the clipping guide)."""


class SearchSpendsBudgetWarning(UserWarning):
    """A fit inside a model search (``GridSearchCV``, ``cross_validate``): each fit is a release that spends its
    budget, so a search of N fits spends N budgets on the same people."""


__all__ += ["ClippingWarning", "ClusterLostError", "SearchSpendsBudgetWarning", "TaskFailedError"]


class ClusterLostError(DppcaError, ConnectionError):
    """The Dask scheduler (or the connection to it) went away while a run was using it.

    No result of the run was released. Running again once the cluster is back may succeed; what happened to the
    privacy budget is decided by whoever reserved it (a job's ledger entry says).
    """

    exit_code = 5


class TaskFailedError(DppcaError, RuntimeError):
    """A task of a run failed on a Dask worker with an unexpected error.

    The worker's message and the values in its traceback are withheld (they may quote the data); ``error_type``
    names the exception class and ``frames`` lists the code locations (``file:line in function``) of its traceback.
    """

    exit_code = 1

    def __init__(self, message: str, *, error_type: str = "", frames: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.error_type = error_type
        self.frames = tuple(frames)


class LocalCacheError(DppcaError, OSError):
    """A partition fetched from object storage could not be written to the worker's local disk cache
    (``dppca_dask.storage.object-cache-partitions``, a full disk or a directory that cannot hold files). The run
    stops rather than keep fewer partitions, which would let their sizes choose which ones are kept."""

    exit_code = 1


__all__ += ["LocalCacheError"]


class StorageConnectionError(DppcaError, ConnectionError):
    """The connection to object storage failed during a transfer (a response cut short, a read that timed out), after
    the client's retries. Nothing is wrong with the store or the parameters: running again may succeed."""

    exit_code = 1


__all__ += ["StorageConnectionError"]
