"""The public API of the core mechanism: validation, the not-private seed, frozen results written and read back,
the estimator, resuming a run, nothing un-noised in any output, utility against Analyze Gauss, and the ``pca``
command end to end on w8a."""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import warnings
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from dppca_dask import DPPCA, load_result, pca
from dppca_dask.methods.adaptive_power.sequential import AdaptivePowerState
from dppca_dask.cli import main
from dppca_dask.errors import InvalidInputError, InvalidParameterError, NotPrivateWarning, ReleaseError, StoreNotFoundError
from dppca_dask.kernels import ThresholdGrid
from dppca_dask.mechanisms import NoiseSource
from dppca_dask.mechanisms.testing import AuditingNoiseSource

W8A = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "w8a.svm"


@pytest.fixture
def small(rng: np.random.Generator) -> sp.csr_array:
    return sp.random(2_000, 40, density=0.1, random_state=rng, format="csr")


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"epsilon": 0.0}, "epsilon must be finite and > 0"),
    ({"epsilon": -1.0}, "epsilon must be finite and > 0"),
    ({"delta": 1.0}, r"delta must be in \[1e-14, 1\); got 1;"),
    ({"n_components": 41}, "n_components must be <= the number of columns"),
    ({"n_components": 0}, "n_components must be an integer >= 1"),
    ({"mechanism": "magic"}, "mechanism must be one of"),
    ({"row_norm_bound": -1.0}, "row_norm_bound must be finite and > 0"),
    ({"n_iter": 0}, r"n_iter must be an integer in \[1, 1000\]; got 0"),
    ({"svt_share": 1.5}, r"svt_share must be in \(0, 1\)"),
    ({"seed": "x"}, "seed must be an integer"),
    ({"seed": 1, "noise": "n"}, "give either seed or noise"),
    ({"mechanism": "analyze-gauss", "max_dense_dim": 10}, "max_dense_dim"),
    ({"calibration": "other"}, "calibration must be 'standard' or 'paper'"),
    # parameter abuses (issue 9.5): each is refused before calibration, data access or any noise draw
    ({"epsilon": 1e308}, r"epsilon must be <= 100; got 1e\+308; a larger epsilon promises nothing"),
    ({"epsilon": 100.5}, r"epsilon must be <= 100; got 100.5"),
    ({"epsilon": True}, "epsilon must be a number; got True"),
    ({"delta": 1e-320}, r"delta must be in \[1e-14, 1\); got 9.99989e-321; the accountant is not reliable"),
    ({"delta": 1e-15}, r"delta must be in \[1e-14, 1\); got 1e-15"),
    ({"delta": "x"}, r"delta must be a number in \[1e-14, 1\); got 'x'"),
    ({"row_norm_bound": 1e300}, r"row_norm_bound must be in \[1e-100, 1e\+100\]; got 1e\+300; scale the data"),
    ({"row_norm_bound": 1e-300}, r"row_norm_bound must be in \[1e-100, 1e\+100\]; got 1e-300"),
    ({"n_iter": 1_000_000}, r"n_iter must be an integer in \[1, 1000\]; got 1000000; each iteration is a pass "
                           r"over the data and a few suffice \(default 5\)"),
    ({"n_iter": 10_000}, r"n_iter must be an integer in \[1, 1000\]; got 10000"),  # the maximum documented before
    ({"n_iter": True}, "n_iter must be an integer >= 1; got True"),
    ({"n_iter": 500, "n_components": 3, "mechanism": "adaptive-power"},
     r"n_iter × n_components must be <= 1000; got 500 × 3 = 1500 passes over the data; lower n_iter, or use "
     r"mechanism='adaptive-power-block'"),
    ({"n_components": True}, "n_components must be an integer >= 1; got True"),
    ({"beta": 0.0}, r"beta must be in \(0, 1\); got 0.0; e.g. 0.05"),
    ({"svt_share": "x"}, r"svt_share must be a number in \(0, 1\); got 'x'"),
    ({"grid_per_octave": 1000}, r"grid_per_octave must be an integer in \[1, 64\]; got 1000"),
    ({"grid_octaves": 10_000}, r"grid_octaves must be an integer in \[1, 256\]; got 10000"),
    ({"max_dense_dim": 2.5}, "max_dense_dim must be an integer >= 1; got 2.5"),
    ({"timings": "yes"}, "timings must be True or False; got 'yes'"),
])
def test_invalid_parameters_fail_before_anything_runs(small, kwargs, message) -> None:
    noise = AuditingNoiseSource(0)
    params = {"epsilon": 1.0, "delta": 1e-6, "client": "local", "noise": noise, **kwargs}
    if "seed" in kwargs and "noise" not in kwargs:
        params.pop("noise")
    with pytest.raises(InvalidParameterError, match=message):
        pca(small, **params)
    assert noise.released_keys == frozenset() and noise.records == []  # nothing drawn


def test_seed_makes_a_reproducible_not_private_result_that_is_frozen_and_saved(small, tmp_path: Path) -> None:
    with pytest.warns(NotPrivateWarning, match="NOT differentially private"):
        first = pca(small, epsilon=1.0, delta=1e-6, seed=4, client="local", progress=False)
    with pytest.warns(NotPrivateWarning):
        second = pca(small, epsilon=1.0, delta=1e-6, seed=4, client="local", progress=False)
    np.testing.assert_array_equal(first.components, second.components)
    assert first.private is False and first.provenance["seeded"] is True
    assert first.provenance["noise_sampler"] == "float"  # a seed always uses the float sampler
    assert first.privacy.neighbouring == "add/remove one row"
    with pytest.raises(dataclasses.FrozenInstanceError):
        first.components = np.zeros((1, 40))  # type: ignore[misc]
    with pytest.raises(ValueError):
        first.components[0, 0] = 1.0
    first.save(tmp_path / "out")
    back = load_result(tmp_path / "out")
    np.testing.assert_array_equal(back.components, first.components)
    np.testing.assert_array_equal(back.thresholds, first.thresholds)
    assert back.privacy.neighbouring == first.privacy.neighbouring and back.private is False
    assert back.provenance["parameters"]["n_iter"] == 5  # the documented default


def test_unseeded_runs_are_private_and_differ(small) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", NotPrivateWarning)
        a = pca(small, epsilon=1.0, delta=1e-6, client="local", progress=False)
        b = pca(small, epsilon=1.0, delta=1e-6, client="local", progress=False)
    assert a.private and b.private and not np.array_equal(a.components, b.components)
    assert a.privacy.epsilon <= 1.0 and a.privacy.delta == 1e-6 and a.privacy.accountant == "pld"


def test_estimator(small) -> None:
    from sklearn.exceptions import NotFittedError

    model = DPPCA(2, epsilon=1.0, delta=1e-6, seed=1)
    assert model.get_params()["n_components"] == 2 and "client" not in model.get_params()
    with pytest.raises(NotFittedError, match="not fitted yet"):
        model.transform(small)
    with pytest.warns(NotPrivateWarning):
        projected = model.fit_transform(small, client="local")
    assert projected.shape == (2_000, 2) and model.components_.shape == (2, 40)
    with pytest.raises(ValueError, match="Invalid parameter 'alpha'"):
        model.set_params(alpha=1)
    with pytest.raises(InvalidInputError, match="X has 10 features, but DPPCA is expecting 40 features"):
        model.transform(small[:, :10])


def test_resume_continues_without_redrawing_and_reports_the_whole_run(small) -> None:
    states: list[AdaptivePowerState] = []

    def keep(state: AdaptivePowerState, events: tuple) -> None:
        states.append(AdaptivePowerState.from_json(json.loads(json.dumps(state.to_json()))))

    with pytest.warns(NotPrivateWarning):
        full = pca(small, epsilon=1.0, delta=1e-6, n_iter=6, n_components=2, seed=9, client="local",
                   on_release=keep, progress=False, mechanism="adaptive-power")
    assert len(states) == 2 * 12  # a checkpoint after every release: each SVT step and each Gaussian step
    whole = [s for s in states if s.pending_index is None]
    middle = whole[7]  # component 1, iteration 2 (after 6 + 2 iterations)
    assert (middle.component, middle.iteration) == (1, 2)
    noise = NoiseSource(np.random.default_rng(10), private=True)
    resumed = pca(small, epsilon=1.0, delta=1e-6, n_iter=6, n_components=2, client="local", resume=middle,
                  noise=noise, progress=False, timings=True, mechanism="adaptive-power")
    np.testing.assert_array_equal(resumed.components[0], full.components[0])  # finished before the interruption
    np.testing.assert_array_equal(resumed.thresholds[:, :2], full.thresholds[:, :2])
    assert resumed.privacy.epsilon == pytest.approx(full.privacy.epsilon, rel=1e-9)  # the whole run's events
    assert len(resumed.timings["iterations"]) == 4  # only the missing releases ran
    with pytest.raises(ReleaseError, match="already drawn"):
        with noise.release("component-1/iter-0/svt"):  # released by the interrupted run
            pass


def test_resume_between_an_svt_step_and_its_gaussian_step_reuses_the_released_index(small) -> None:
    """A crash after an iteration's AboveThreshold step and before its Gaussian step (issue 8.5): the resume
    reuses the checkpointed index and draws no second SVT noise; SVT draws equal accounted SVT events."""
    states: list[tuple[AdaptivePowerState, tuple]] = []

    def keep(state: AdaptivePowerState, events: tuple) -> None:
        states.append((AdaptivePowerState.from_json(json.loads(json.dumps(state.to_json()))), events))

    first = AuditingNoiseSource(3)
    full = pca(small, epsilon=1.0, delta=1e-6, n_iter=4, n_components=2, client="local", noise=first,
               on_release=keep, progress=False, mechanism="adaptive-power")
    pending = [(s, e) for s, e in states if s.pending_index is not None]
    assert len(pending) == 8
    crash, events_at_crash = pending[5]  # component 1, iteration 1: its SVT released, its Gaussian not
    assert (crash.component, crash.iteration) == (1, 1)
    assert crash.pending_index == int(np.flatnonzero(
        ThresholdGrid.for_bound(1.0).thetas == full.thresholds[1, 1])[0])
    svt_before = sum(1 for r in first.records if r.kind == "svt" and r.release <= "component-1/iter-1/svt")
    assert svt_before == 6 and len(events_at_crash) == 4 * 2 + 2 * 1 + 1  # the released SVT step is accounted

    second = AuditingNoiseSource(4)
    resumed = pca(small, epsilon=1.0, delta=1e-6, n_iter=4, n_components=2, client="local", noise=second,
                  resume=crash, progress=False, mechanism="adaptive-power")
    svt_draws = [r.release for r in second.records if r.kind == "svt"]
    assert svt_draws == ["component-1/iter-2/svt", "component-1/iter-3/svt"]  # no second draw of iter-1
    gauss_draws = [r.release for r in second.records if r.kind == "gaussian"]
    assert gauss_draws[0] == "component-1/iter-1/gaussian"
    assert resumed.thresholds[1, 1] == full.thresholds[1, 1]  # the released threshold, reused
    # accounted SVT events (whole run) = SVT draws before the crash + after the resume
    svt_events = sum(n for e in resumed.privacy.events for n in [e.get("count", 1)]
                     if "EpsilonDeltaDpEvent" in json.dumps(e))
    assert svt_events == svt_before + len(svt_draws) == 8
    assert resumed.privacy.epsilon == pytest.approx(full.privacy.epsilon, rel=1e-12)
    with pytest.raises(ReleaseError, match="already drawn"):
        with second.release("component-1/iter-1/svt"):
            pass


def test_nothing_unnoised_in_logs_progress_or_results(tmp_path: Path, capsys, caplog) -> None:
    """A row with a distinctive value: the exact AᵀAx, row norms and filtered counts are never printed, logged or
    written; only iteration numbers, timings and released thresholds are (invariant 3)."""
    from dppca_dask import write_matrix

    rng = np.random.default_rng(0)
    X = rng.standard_normal((3_000, 20)) * 0.01
    X[17, 3] = 0.987654321
    path = tmp_path / "m.zarr"
    write_matrix(path, sp.csr_array(X), rows_per_partition=1_000)
    secrets_ = {f"{0.987654321:.4g}", f"{0.987654321 ** 2:.4g}", "0.9876", "0.97546"}
    with caplog.at_level(logging.DEBUG, logger="dppca_dask"):
        result = pca(str(path), epsilon=1.0, delta=1e-6, client="local", progress=True)
    result.save(tmp_path / "out")
    captured = capsys.readouterr()
    written = (tmp_path / "out" / "result.json").read_text()
    text = "\n".join([captured.out, captured.err, caplog.text, written])
    for secret in secrets_:
        assert secret not in text
    released = [r.getMessage() for r in caplog.records if r.name == "dppca_dask.api"]
    assert released and all(m.startswith(("released iteration", "released the threshold step")) for m in released)
    assert not any(" s)" in m or "took" in m for m in caplog.messages)  # no durations in logs


def test_utility_beats_analyze_gauss_on_low_coherence_data(tmp_path: Path) -> None:
    """Generated low-coherence data (spec §5 regime, smaller): at ε = 1 the median sin² (to the planted direction)
    of adaptive power over 3 seeded runs is below 0.02 and below Analyze Gauss's. Measured over seeds 0-19:
    adaptive 0.0072-0.0105, Analyze Gauss 0.028-0.035, so both bounds hold with a margin of about 2x for any
    seed; the test is seeded, so it does not fail at random."""
    from dppca_dask.datasets import PlantedSpec, planted_direction, write_low_coherence

    spec = PlantedSpec(n_rows=60_000, n_cols=600, nnz_per_row=30, support=60, signal_share=0.01, seed=4)
    store = write_low_coherence(tmp_path / "low.zarr", spec, rows_per_partition=20_000, progress=False)
    truth = planted_direction(spec)
    errors: dict[str, list[float]] = {"adaptive-power": [], "analyze-gauss": []}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NotPrivateWarning)
        for mechanism in errors:
            for seed in range(3):
                result = pca(store, epsilon=1.0, delta=1e-6, mechanism=mechanism, seed=seed, client="local",
                             progress=False)
                cos = float(abs(result.components[0] @ truth))
                errors[mechanism].append(1.0 - cos * cos)
    adaptive, gauss = (float(np.median(v)) for v in errors.values())
    assert adaptive < 0.02 and adaptive < gauss, errors
    assert math.isfinite(gauss)


needs_w8a = pytest.mark.skipif(not W8A.exists(), reason="shared/data/w8a.svm is not beside the project")


@needs_w8a
def test_pca_command_end_to_end_on_w8a(tmp_path: Path, local_client, capsys) -> None:
    from dppca_dask import ingest

    store = tmp_path / "w8a.zarr"
    ingest(W8A, store, rows_per_partition=10_000, progress=False)
    out = tmp_path / "result"
    code = main(["pca", str(store), "--epsilon", "1", "--delta", "1e-6", "--json", "--out", str(out),
                 "--scheduler", local_client.scheduler.address])
    assert code == 0
    obj = json.loads(capsys.readouterr().out)
    assert len(obj["components"]) == 1 and len(obj["components"][0]) == 300
    # the CLI centres by default: adaptive power runs as one block, with the mean and the variance released
    assert obj["mechanism"] == "adaptive-power-block" and len(obj["thresholds"][0]) == 5
    assert len(obj["mean"]) == 300 and len(obj["explained_variance_ratio"]) == 1
    privacy = obj["privacy"]
    assert privacy["epsilon"] <= 1.0 and privacy["delta"] == 1e-6
    assert privacy["neighbouring"] == "add/remove one row" and privacy["accountant"] == "pld"
    saved = json.loads((out / "result.json").read_text())
    assert saved["provenance"]["input"]["fingerprint"] and saved["provenance"]["package"]["dppca_dask"]
    assert saved["provenance"]["parameters"]["epsilon"] == 1.0 and (out / "components.zarr").exists()

    assert main(["pca", str(store), "--epsilon", "1", "--delta", "1e-6", "--mechanism", "exact",
                 "--scheduler", local_client.scheduler.address]) == 0
    assert "NOT differentially private" in capsys.readouterr().out
    assert main(["pca", str(store), "--epsilon", "-1", "--delta", "1e-6"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("dppca-dask pca: error: epsilon must be finite") and "\n" not in err
    assert main(["pca", str(tmp_path / "missing.zarr"), "--epsilon", "1", "--delta", "1e-6"]) == 2
    assert "missing.zarr" in capsys.readouterr().err
    with pytest.raises(StoreNotFoundError):
        load_result(tmp_path / "nowhere")


def test_pca_command_timings_only_on_request_and_parameter_abuse_exit_2(tmp_path: Path, capsys,
                                                                         local_client) -> None:
    from dppca_dask import write_matrix

    rng = np.random.default_rng(1)
    path = tmp_path / "m.zarr"
    write_matrix(path, sp.csr_array(rng.standard_normal((400, 8)) * 0.2), rows_per_partition=200)
    address = local_client.scheduler.address
    assert main(["pca", str(path), "--epsilon", "1", "--delta", "1e-6", "--json", "--scheduler", address]) == 0
    assert "timings" not in json.loads(capsys.readouterr().out)
    assert main(["pca", str(path), "--epsilon", "1", "--delta", "1e-6", "--json", "--timings",
                 "--mechanism", "adaptive-power", "--scheduler", address]) == 0
    timings = json.loads(capsys.readouterr().out)["timings"]
    assert "NOT covered by the privacy guarantee" in timings["note"] and len(timings["iterations"]) == 5
    assert main(["pca", str(path), "--epsilon", "1", "--delta", "1e-6", "--timings", "--scheduler", address]) == 0
    assert "timings (not covered by the privacy guarantee)" in capsys.readouterr().out
    for argv, message in [
        (["--epsilon", "1e308", "--delta", "1e-6"], "epsilon must be <= 100"),
        (["--epsilon", "1", "--delta", "1e-320"], "delta must be in [1e-14, 1)"),
        (["--epsilon", "1", "--delta", "1e-6", "--row-norm-bound", "1e300"], "row_norm_bound must be in"),
        (["--epsilon", "1", "--delta", "1e-6", "--n-iter", "1000000"], "n_iter must be an integer in [1, 1000]"),
    ]:
        assert main(["pca", str(path), *argv]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("dppca-dask pca: error: ") and message in err and "\n" not in err


def test_paper_calibration_uses_the_papers_svt_scales(small) -> None:
    noise = AuditingNoiseSource(5)
    result = pca(small, epsilon=1.0, delta=1e-6, n_iter=2, client="local", noise=noise, calibration="paper",
                 progress=False, mechanism="adaptive-power")
    cal = result.provenance["calibration"]
    eps_svt = cal["epsilon_svt"]
    assert cal["svt_form"] == "general"
    assert [r.scale for r in noise.records if r.kind == "svt"] == [(2 / eps_svt, 4 / eps_svt)] * 2
    # under replace-one the paper's scales keep the SVT's ε: 1/b_ρ + 2/b_ν = ε/2 + ε/2
    assert "is {:.6g}-DP".format(eps_svt) in result.privacy.group_privacy["method"]
