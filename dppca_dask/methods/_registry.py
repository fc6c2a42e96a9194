"""The mechanism registry: every release :func:`dppca_dask.pca`, :func:`dppca_dask.lowrank`, the CLI, jobs and
benchmarks offer is a :class:`Mechanism` registered here (see :mod:`dppca_dask.methods`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from dppca_dask.errors import InvalidParameterError

__all__ = ["Mechanism", "MechanismPlan", "get_mechanism", "mechanism_help", "mechanism_names", "register"]


@dataclass
class MechanismPlan:
    """A calibrated mechanism ready to run: the algorithm generator factory and how to report it."""

    make_run: Callable[[Any, Callable[..., None] | None, Any], Any]
    """``make_run(noise, on_release, resume)`` returns the algorithm generator."""
    neighbouring: str
    """The neighbouring relation the guarantee is stated for."""
    calibration: Mapping[str, Any]
    """Public calibrated constants (for provenance)."""
    paper_figure: Mapping[str, Any] | None
    """The paper's own privacy figure, for reference in the report."""
    total_steps: int
    """Releases of the run (for progress)."""
    resumed_keys: Callable[[Any], list[str]] = lambda resume: []
    """Release keys already drawn by the interrupted run a ``resume`` state comes from."""
    private: bool = True
    planned_events: tuple[Any, ...] | None = None
    """The DpEvents a complete run emits, when they are known before the run (a ledger reserves them)."""
    replace_one: tuple[Callable[[tuple[Any, ...]], list[Any]], str] | None = None
    """For add/remove mechanisms with their own replace-one analysis: a map from the emitted events to the
    replace-one events, and one sentence saying how (the report's ``group_privacy``); None: group privacy."""


@dataclass(frozen=True)
class Mechanism:
    """One mechanism of one entry point, with its validation and planning from public parameters only."""

    name: str
    entry: str
    """The API that runs it: ``"pca"``, ``"lowrank"`` (new families add their own)."""
    summary: str
    """What it releases, in one line (CLI help)."""
    neighbouring: str
    """The neighbouring relation the guarantee is stated for (at default parameters; the plan carries the exact one)."""
    private: bool
    validate: Callable[[Mapping[str, Any]], Any]
    """``validate(params) -> normalized params``: every public parameter checked, before any data is read."""
    plan: Callable[..., Any]
    """``plan(params, *, n_rows, n_cols) -> plan``: calibration, planned events and the run factory
    (``n_rows`` may be None when the entry point does not know it before the run)."""
    default_n_iter: int | None = None
    load_state: Callable[[Mapping[str, Any]], Any] | None = None
    """Reads the released state a run passed to ``on_release`` back from its JSON form (``state.to_json()``), for
    mechanisms whose interrupted runs resume (a job's checkpoint); None: an interrupted run does not resume."""


_REGISTRY: dict[tuple[str, str], Mechanism] = {}


def register(mechanism: Mechanism) -> Mechanism:
    """Make ``mechanism`` available to its entry point (a later registration under the same name replaces it)."""
    _REGISTRY[(mechanism.entry, mechanism.name)] = mechanism
    return mechanism


def mechanism_names(entry: str | None = None) -> tuple[str, ...]:
    """Names of the registered mechanisms of ``entry`` (all entries when None), in registration order."""
    names = [name for (kind, name) in _REGISTRY if entry is None or kind == entry]
    return tuple(dict.fromkeys(names))


def get_mechanism(name: str, entry: str | None = None) -> Mechanism:
    """The mechanism called ``name`` (of ``entry``; without it, the first registered under that name)."""
    for (kind, known), mechanism in _REGISTRY.items():
        if known == name and (entry is None or kind == entry):
            return mechanism
    where = "" if entry is None else f" for {entry}"
    raise InvalidParameterError(
        f"mechanism must be one of {', '.join(mechanism_names(entry))}{where}; got {name!r}"
    )


def mechanism_help(entry: str) -> str:
    """One CLI help text for ``--mechanism`` of ``entry``: each name with its summary, ``%`` escaped for argparse
    (which formats help texts with ``%``: a summary's "10% of the budget" made ``--help`` fail)."""
    text = "; ".join(f"{name}: {get_mechanism(name, entry).summary}" for name in mechanism_names(entry))
    return text.replace("%", "%%")
