"""The mechanism registry is the one list: the API, the CLI and jobs read it."""

from __future__ import annotations

import argparse

import pytest

from dppca_dask import api
from dppca_dask.errors import InvalidParameterError
from dppca_dask.jobs.plan import planned_events
from dppca_dask.api import plan_lowrank
from dppca_dask.methods import Mechanism, get_mechanism, job_mechanisms, mechanism_help, mechanism_names, register
from dppca_dask.methods import _registry


def test_entries_list_their_mechanisms_in_registration_order() -> None:
    assert mechanism_names("pca") == ("adaptive-power", "adaptive-power-block", "auto", "analyze-gauss", "exact",
                                      "private-power")
    assert mechanism_names("lowrank") == ("private-low-rank", "randomized-response", "private-power")
    assert api.mechanisms() == mechanism_names("pca")
    assert job_mechanisms("pca") == ("adaptive-power", "adaptive-power-block", "auto", "analyze-gauss",
                                    "private-power")
    assert job_mechanisms("lowrank") == ("private-low-rank", "randomized-response")
    for entry in ("pca", "lowrank"):
        for name in mechanism_names(entry):
            mechanism = get_mechanism(name, entry)
            assert (mechanism.name, mechanism.entry) == (name, entry)
            assert mechanism.summary and mechanism.neighbouring
    assert not get_mechanism("exact").private


def test_unknown_mechanism_names_the_choices() -> None:
    with pytest.raises(InvalidParameterError, match=r"one of private-low-rank, .* for lowrank; got 'exact'"):
        get_mechanism("exact", "lowrank")
    with pytest.raises(InvalidParameterError, match="got 'nope'"):
        get_mechanism("nope")


def test_validate_and_plan_agree_with_the_entry_points() -> None:
    pca_mech = get_mechanism("analyze-gauss", "pca")
    params = pca_mech.validate({"epsilon": 1.0, "delta": 1e-6, "n_components": 2})
    plan = pca_mech.plan(params, n_rows=None, n_cols=5)
    assert tuple(plan.planned_events) == api.plan_release(5, mechanism="analyze-gauss", epsilon=1.0, delta=1e-6,
                                                          n_components=2).events
    low = get_mechanism("private-low-rank", "lowrank")
    given = {"rank": 2, "epsilon": 1.0, "delta": 1e-6, "row_norm_bound": float("inf"), "row_change_bound": 1.0}
    assert low.validate(given)["rank"] == 2
    assert low.plan(given, n_rows=50, n_cols=8).events == plan_lowrank(
        50, 8, rank=2, epsilon=1.0, delta=1e-6, mechanism="private-low-rank", row_norm_bound=float("inf"),
        row_change_bound=1.0).events
    with pytest.raises(InvalidParameterError, match="unknown lowrank parameters: bogus"):
        low.validate({**given, "bogus": 1})


def test_private_power_plans_the_embedding_ladder_when_n_rows_is_known() -> None:
    options = {"c_doubling": True, "n_iter": 2}
    without = api.plan_release(6, mechanism="private-power", epsilon=1.0, delta=1e-6, **options)
    with_rows = planned_events("private-power", n_rows=9, n_cols=6, epsilon=1.0, delta=1e-6, parameters=options)
    assert len(without.events) == 1  # the guarantee: the ladder depends on n_rows
    assert with_rows.events == api.plan_release(6, n_rows=9, mechanism="private-power", epsilon=1.0, delta=1e-6,
                                                **options).events
    assert with_rows.events != without.events


def test_a_registered_mechanism_reaches_pca_validation_and_the_cli(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_registry, "_REGISTRY", dict(_registry._REGISTRY))
    base = get_mechanism("analyze-gauss", "pca")
    api.register_mechanism("gauss-copy", lambda params, n_cols: base.plan(
        api.validate_parameters(**{**params.to_json(), "mechanism": "analyze-gauss"}), n_cols=n_cols),
        summary="a copy of analyze-gauss")
    assert "gauss-copy" in api.mechanisms()
    assert api.plan_release(4, mechanism="gauss-copy", epsilon=1.0, delta=1e-6).events == api.plan_release(
        4, mechanism="analyze-gauss", epsilon=1.0, delta=1e-6).events
    assert "gauss-copy: a copy of analyze-gauss" in mechanism_help("pca")
    from dppca_dask.cli import pca as cli_pca

    parser = argparse.ArgumentParser()
    cli_pca.register(parser.add_subparsers())
    assert parser.parse_args(["pca", "s", "--epsilon", "1", "--delta", "1e-6", "--mechanism", "gauss-copy"])
    register(Mechanism(name="other", entry="window", summary="s", neighbouring="n", private=True,
                       validate=dict, plan=lambda params, *, n_rows, n_cols: None))
    assert "other" not in api.mechanisms() and mechanism_names("window")[-1] == "other"


def test_a_registered_entry_kind_reaches_jobs_without_a_branch(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    """A new family registers its mechanism and its entry kind; a job spec naming the mechanism is parsed (the
    parameters from the entry point's signature, the entry's own checks), planned and run through the entry,
    and ``jobs/`` names none of it."""
    from dppca_dask.errors import JobSpecError
    from dppca_dask.jobs import parse_job
    from dppca_dask.jobs.plan import rows_needed
    from dppca_dask.methods import Entry, entry_for, register_entry

    monkeypatch.setattr(_registry, "_REGISTRY", dict(_registry._REGISTRY))
    monkeypatch.setattr(_registry, "_ENTRIES", dict(_registry._ENTRIES))
    base = get_mechanism("analyze-gauss", "pca")
    register(Mechanism(name="gauss-copy", entry="copy", summary="a copy of analyze-gauss",
                       neighbouring=base.neighbouring, private=True, validate=base.validate, plan=base.plan))

    def check(source, mechanism, mech, *, ingest, n_features):
        mech.setdefault("n_components", 2)

    def plan(mechanism, *, n_rows, n_cols, epsilon, delta, parameters):
        release = api.plan_release(n_cols, mechanism="analyze-gauss", epsilon=epsilon, delta=delta, **parameters)
        return release.neighbouring, release.events, release.calibration

    entry = register_entry(Entry(name="copy", function="dppca_dask.pca", load_result="dppca_dask.load_result",
                                 plan=plan, check_spec=check, rows_needed=lambda m, p: "it counts rows"))
    assert entry_for("gauss-copy") is entry
    doc = {"job": {"name": "j"}, "data": {"store": "s.zarr"}, "mechanism": {"name": "gauss-copy"},
           "privacy": {"epsilon": 0.5, "delta": 1e-7}, "budget": {"ledger": "l.sqlite", "dataset": "ds"},
           "output": {"path": "out/{date}"}}
    spec = parse_job(doc, base_dir=str(tmp_path))
    assert (spec.kind, spec.entry, dict(spec.parameters)) == ("copy", entry, {"n_components": 2})
    with pytest.raises(JobSpecError, match=r"unknown parameter\(s\) bogus for 'gauss-copy'.*n_components"):
        parse_job({**doc, "mechanism": {"name": "gauss-copy", "bogus": 1}}, base_dir=str(tmp_path))
    assert rows_needed("gauss-copy", {}) == "it counts rows"
    assert planned_events("gauss-copy", n_rows=10, n_cols=4, epsilon=0.5, delta=1e-7,
                          parameters={"n_components": 2}).events == api.plan_release(
        4, mechanism="analyze-gauss", epsilon=0.5, delta=1e-7, n_components=2).events


def test_every_name_an_entry_kind_gives_resolves_to_a_callable() -> None:
    """An entry names what runs above the registry by dotted names (imported when a job needs them): a module
    moved without its entry's names updated fails here, not in a nightly job."""
    from dppca_dask.methods import entry_names, get_entry
    from dppca_dask.methods._registry import resolve

    assert set(entry_names()) >= {"pca", "lowrank", "window", "topics"}
    for name in entry_names():
        entry = get_entry(name)
        for dotted in (entry.function, entry.load_result, entry.run_job, entry.dry_run):
            if dotted is not None:
                assert callable(resolve(dotted)), (name, dotted)


def test_every_dotted_name_the_package_resolves_exists() -> None:
    """The same for the names the package passes to ``resolve`` itself (a planner's, a job runner's)."""
    import re
    from pathlib import Path

    import dppca_dask
    from dppca_dask.methods._registry import resolve

    root = Path(dppca_dask.__file__).parent
    names = {m for path in root.rglob("*.py") for m in re.findall(r'resolve\("([\w.]+)"\)', path.read_text())}
    assert names  # (the pattern finds them)
    for dotted in sorted(names):
        assert callable(resolve(dotted)), dotted
