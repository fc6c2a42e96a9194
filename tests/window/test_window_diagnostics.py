"""Diagnostics of window releases: each release's noise law, from the released matrix and its public calibration."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest

from dppca_dask import window
from dppca_dask.cli import main
from dppca_dask.mechanisms.testing import ZeroNoiseSource

pytestmark = pytest.mark.filterwarnings("ignore::dppca_dask.errors.NotPrivateWarning")


def _release(store, release: str):  # noqa: ANN001, ANN202
    extra = {"sketch_rows": 400} if release == "jl" else {}  # enough rows for the law to hold at d = 6
    return window(store, last="5D", epsilon=1, delta=1e-6, release=release, client="local", noise=ZeroNoiseSource(),
                  **extra)


def _planted(release, rng: np.random.Generator, strength: float):  # noqa: ANN001, ANN202
    """The release with its matrix replaced by a rank-one signal of ``strength`` times the noise's scale plus
    noise drawn from the release's own law (the calibration is the real one)."""
    cal = release.calibration
    d = 60  # wider than the store (d = 6), where the laws' finite-size spread is small (they only need the scale)
    v = rng.standard_normal(d)
    v /= np.linalg.norm(v)
    c2 = float(cal["row_norm_bound"]) ** 2
    if release.release == "gaussian":
        sigma = float(cal["noise_multiplier"]) * float(cal["l2_sensitivity"])
        noise = np.triu(rng.standard_normal((d, d))) * sigma
        matrix = strength * sigma * math.sqrt(d) * np.outer(v, v) + noise + noise.T - np.diag(np.diag(noise))
        return dataclasses.replace(release, released=matrix)
    if release.release == "wishart":
        tau = int(cal["tau"])
        g = rng.standard_normal((tau, d))
        matrix = strength * c2 * math.sqrt(tau * d) * np.outer(v, v) + c2 * g.T @ g
        return dataclasses.replace(release, released=matrix)
    m, level = int(cal["sketch_rows"]), c2 * float(cal["sigma"]) ** 2
    ell = strength * math.sqrt(d / m)  # the spike over the noise level, in units of the detection edge sqrt(γ)
    root = math.sqrt(level) * (np.eye(d) + (math.sqrt(1.0 + ell) - 1.0) * np.outer(v, v))
    z = rng.standard_normal((m, d)) / math.sqrt(m)
    return dataclasses.replace(release, released=root @ z.T @ z @ root)


@pytest.mark.parametrize("release", ["gaussian", "wishart", "jl"])
def test_each_release_flags_noise_and_passes_a_strong_signal(ten_days, seed: int, release: str) -> None:
    rng = np.random.default_rng(seed)
    base = _release(ten_days, release)
    noise_only = _planted(base, rng, 0.0)
    assert not noise_only.diagnostics.reliable and noise_only.diagnostics.noise_to_signal[0] > 0.7
    strong = _planted(base, rng, 20.0)
    assert strong.diagnostics.reliable and strong.diagnostics.noise_to_signal[0] < 0.3
    assert strong.to_dict()["diagnostics"] == strong.diagnostics.to_dict()
    assert len(strong.diagnostics_for(3).noise_to_signal) == 3
    assert not strong.diagnostics_for(3).reliable  # the two directions past the planted one are noise


def test_the_window_cli_prints_diagnostics_in_json_and_warns_when_unreliable(ten_days, capsys) -> None:  # noqa: ANN001
    code = main(["window", str(ten_days.path), "--last", "5D", "--epsilon", "0.05", "--delta", "1e-6", "--task", "pca",
                 "--n-components", "2", "--json", "--executor", "local", "--seed", "3"])
    assert code == 0
    captured = capsys.readouterr()
    obj = json.loads(captured.out)
    assert sorted(obj["diagnostics"]) == ["noise_to_signal", "reliable", "rule", "threshold"]
    assert len(obj["diagnostics"]["noise_to_signal"]) == 2
    warned = [line for line in captured.err.splitlines() if "dominated by its privacy noise" in line]
    assert len(warned) == (0 if obj["diagnostics"]["reliable"] else 1)


def test_a_window_release_has_a_short_repr(ten_days) -> None:  # noqa: ANN001
    release = _release(ten_days, "gaussian")
    wide = dataclasses.replace(release, released=np.eye(300))  # a 300×300 matrix is never printed
    for item in (release, wide):
        text = repr(item)
        assert len(text.splitlines()) <= 8 and len(text) <= 800, text
        assert "WindowRelease" in text and "gaussian release" in text and "diagnostics:" in text


def test_a_window_release_shows_the_same_facts_as_a_small_html_table(ten_days) -> None:  # noqa: ANN001
    release = dataclasses.replace(_release(ten_days, "gaussian"), released=np.eye(300))
    table = release._repr_html_()
    assert table.startswith('<table class="dppca-dask-result">') and table.endswith("</table>")
    assert table.count("<tr>") <= 8 and len(table) <= 2_000, table
    for fact in ("WindowRelease", "sliding-window", "300x300 gaussian release", "privacy", "diagnostics", "window"):
        assert fact in table, (fact, table)
    assert repr(release).splitlines()[1].split(": ", 1)[1] in table  # the privacy line, as the text repr shows it
