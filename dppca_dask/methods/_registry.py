"""The mechanism registry: every release :func:`dppca_dask.pca`, :func:`dppca_dask.lowrank`, the CLI, jobs and
benchmarks offer is a :class:`Mechanism` registered here (see :mod:`dppca_dask.methods`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from dppca_dask.errors import InvalidParameterError

__all__ = ["Entry", "Mechanism", "MechanismPlan", "entry_for", "entry_names", "get_entry", "get_mechanism",
           "job_mechanisms", "mechanism_help", "mechanism_names", "register", "register_entry", "resolve"]


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


# ------------------------------------------------------------------------------------------------ entry kinds


def resolve(name: str) -> Any:
    """The object a public dotted name stands for (``"dppca_dask.pca"``, ``"dppca_dask.api.plan_release"``),
    imported when it is needed: an entry names the entry point it runs, and the registry, which the entry points
    import, never imports them."""
    import importlib

    module, _, attribute = name.rpartition(".")
    return getattr(importlib.import_module(module), attribute)


@dataclass(frozen=True)
class Entry:
    """One entry kind (``pca``, ``lowrank``, ``window``, ``topics``, ...): what a job spec naming one of its
    mechanisms runs, checks, plans and loads. ``dppca_dask.jobs`` reads it and nothing else about a family.

    What runs above the registry (the entry point, the loader of its result, an own job runner) is given by its
    dotted name and imported when a job needs it (:func:`resolve`); the checks and the planner, which need
    only the layers below, are functions."""

    name: str
    function: str
    """The public dotted name of the function a job runs (``"dppca_dask.lowrank"``), called with the store,
    ``epsilon``, ``delta``, ``client``, ``executor``, ``noise``, the job's ``[mechanism]`` parameters and those
    of :attr:`run_arguments` (see :func:`resolve`)."""
    load_result: str
    """The dotted name of the function that reads a finished job's result back from its output directory
    (``"dppca_dask.load_result"``; see :func:`resolve`)."""
    plan: Callable[..., Any] | None = None
    """``plan(mechanism, *, n_rows, n_cols, epsilon, delta, parameters) -> (neighbouring, events, calibration)``:
    the relation and the DpEvents a complete run emits, from public values, for the reservation."""
    job_mechanisms: tuple[str, ...] | None = None
    """The mechanism names a job spec runs through this entry; None: the registry's private mechanisms of the
    entry that no entry registered before it runs (a name of two entries runs through the first)."""
    run_arguments: frozenset[str] = frozenset({"mechanism"})
    """Which of ``mechanism``, ``on_release``, ``resume`` and ``progress`` the job passes to :attr:`function`."""
    parameters: frozenset[str] | None = None
    """The ``[mechanism]`` parameters a job spec may set; None: :attr:`function`'s keyword parameters, less the
    job's own arguments and :attr:`reserved`."""
    reserved: frozenset[str] = frozenset()
    """Parameters of :attr:`function` that a job spec cannot set beyond those every job keeps (its ledger, ...)."""
    check_spec: Callable[..., None] | None = None
    """``check_spec(source, mechanism, parameters, *, ingest, n_features)``: the spec checks particular to the
    entry (raises :class:`~dppca_dask.errors.JobSpecError`; may fill in defaults in ``parameters``)."""
    rows_needed: Callable[[str, Mapping[str, Any]], str | None] = lambda mechanism, parameters: None
    """Why the plan of a mechanism with parameters needs the store's number of rows, or None."""
    check_content: Callable[[Any], None] | None = None
    """A check of the store's values the entry needs beyond the preflight's, before anything is reserved."""
    content_checked: str = ""
    """What :attr:`check_content` checks, for the dry run's notes (``"the word counts"``)."""
    load_state: Callable[[str, Mapping[str, Any]], Any] | None = None
    """``load_state(mechanism, parameters)``: how the run reads its checkpoint back (None when it does not
    resume); None: the mechanism's own reader (:attr:`Mechanism.load_state`)."""
    default_n_iter: int | None = None
    """The iterations of a run that resumes when the spec does not set ``n_iter``."""
    appends: bool = False
    """Whether its store grows by ``[data.append]`` (else it may be refreshed by ``[data.ingest]``)."""
    run_job: str | None = None
    """The dotted name of its own job runner, ``run_job(spec, *, date, client, noise, allow_new_store) ->
    JobOutcome``, for an entry whose budget is not the dataset's (the window's partitions); None: the
    dataset-scoped runner. Named, not imported: it runs the entry point, which imports the registry."""
    dry_run: str | None = None
    """The dotted name of its own dry run, ``dry_run(spec, date) -> DryRun``, with :attr:`run_job`."""


_ENTRIES: dict[str, Entry] = {}


def register_entry(entry: Entry) -> Entry:
    """Make ``entry`` a kind jobs run (a later registration under the same name replaces it)."""
    _ENTRIES[entry.name] = entry
    return entry


def entry_names() -> tuple[str, ...]:
    """Names of the registered entry kinds, in registration order."""
    return tuple(_ENTRIES)


def get_entry(name: str) -> Entry:
    """The entry kind called ``name``."""
    try:
        return _ENTRIES[name]
    except KeyError:
        raise InvalidParameterError(f"entry must be one of {', '.join(_ENTRIES)}; got {name!r}") from None


def job_mechanisms(name: str) -> tuple[str, ...]:
    """The mechanism names a job spec runs through the entry ``name`` (:attr:`Entry.job_mechanisms`)."""
    entry = get_entry(name)
    if entry.job_mechanisms is not None:
        return entry.job_mechanisms
    names = list(_ENTRIES)
    taken = {mechanism for other in names[:names.index(name)] for mechanism in job_mechanisms(other)}
    return tuple(mechanism for mechanism in mechanism_names(name)
                 if mechanism not in taken and get_mechanism(mechanism, name).private)


def entry_for(mechanism: str) -> Entry | None:
    """The entry a job spec naming ``mechanism`` runs through (the first registered that runs it), or None."""
    for name, entry in _ENTRIES.items():
        if mechanism in job_mechanisms(name):
            return entry
    return None
