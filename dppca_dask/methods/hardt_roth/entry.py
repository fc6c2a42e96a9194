"""The Hardt-Roth steps of the :func:`~dppca_dask.lowrank` entry point: the run of each ``lowrank`` mechanism, the
factors its output releases, and its privacy report (with the replace-one-row figure of clipped rows).

Everything here reads public parameters or released values only (post-processing).
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np

__all__ = ["feasible_values", "lowrank_report", "make_run", "released_factors", "warn_paper_constants",
           "with_replace_one"]


def warn_paper_constants(events: Any, parameters: Mapping[str, Any], neighbouring: str) -> None:
    """Private low-rank with ``calibration="paper"``: warn, before anything is read, when the paper's printed
    constants do not meet the requested (ε, δ) (the planned events composed by the accountant)."""
    if parameters["mechanism"] != "private-low-rank" or parameters["calibration"] != "paper":
        return
    from dppca_dask.accounting import build_report

    epsilon, delta = parameters["epsilon"], parameters["delta"]
    report = build_report(events, target_epsilon=epsilon, target_delta=delta, neighbouring=neighbouring)
    if not report.meets_target:
        warnings.warn(
            f"calibration='paper' uses Hardt-Roth 2012's printed constants, which do not meet "
            f"(epsilon={epsilon:g}, delta={delta:g}) (the range finder's noise lacks a sqrt(ln(1/delta)) "
            f"factor); this run is ({report.epsilon:.4g}, {delta:g})-DP, as its privacy report states",
            UserWarning, stacklevel=3,  # lowrank -> here: the caller of lowrank
        )


def make_run(mechanism: str, p: Mapping[str, Any], n_cols: int, noise: Any) -> Any:
    """The release generator of ``mechanism`` for the validated parameters ``p`` on ``n_cols`` public columns."""
    if mechanism == "private-low-rank":
        from dppca_dask.methods.hardt_roth.find_and_project import private_low_rank_run

        return private_low_rank_run(
            n_cols=n_cols, rank=p["rank"], oversampling=p["oversampling"], epsilon=p["epsilon"], delta=p["delta"],
            row_norm_bound=p["row_norm_bound"], row_change_bound=p["row_change_bound"], noise=noise,
            calibration=p["calibration"], projection=p["projection"], prune_alpha=p["prune_alpha"],
            left_factor=p["left_factor"], truncate=p["truncate"],
        )
    if mechanism == "randomized-response":
        from dppca_dask.methods.hardt_roth.randomized_response import randomized_response_run

        return randomized_response_run(
            n_cols=n_cols, rank=p["rank"], epsilon=p["epsilon"], delta=p["delta"],
            row_norm_bound=p["row_norm_bound"], row_change_bound=p["row_change_bound"], noise=noise,
            calibration=p["calibration"],
        )
    from dppca_dask.methods.hardt_roth.power_iteration import private_power_run

    return private_power_run(
        n_cols=n_cols, epsilon=p["epsilon"], delta=p["delta"], n_iter=p["n_iter"], n_components=p["rank"],
        symmetric=p["symmetric"], coherence=p["coherence"], c_doubling=p["c_doubling"],
        entry_bound=p["entry_bound"], calibration=p["calibration"], release_values=True,
        signed_values=p["signed_values"], noise=noise,
    )


def released_factors(mechanism: str, output: Any,
                     parameters: Mapping[str, Any]) -> tuple[Any, Any, Any, dict[str, Any]]:
    """The released factors of a run's output and its mechanism's extras (post-processing of released values):
    (output, left, right, extras); private power's values of a symmetric matrix projected onto their feasible set."""
    extras: dict[str, Any] = {"n_passes": output.n_passes}
    if mechanism == "private-low-rank":
        extras.update(alphas=output.alphas, projection_sensitivity=output.projection_sensitivity,
                      width=output.calibration.width)
        return output, output.left, output.right, extras
    if mechanism == "randomized-response":
        extras.update(sigma=output.sigma)
        return output, output.left, output.right, extras
    extras.update(values=output.values, coherence=list(output.coherence), failed_rungs=list(output.failed_rungs),
                  dimension=output.dimension, n_releases=output.n_releases)
    if parameters.get("symmetric", False):
        output, order = feasible_values(output, signed=bool(parameters["signed_values"]))
        extras.update(values=output.values, coherence=[extras["coherence"][i] for i in order],
                      failed_rungs=[extras["failed_rungs"][i] for i in order])
        return output, output.components.T, output.values[:, None] * output.components, extras
    return output, output.left[:, None], output.values[:, None] * output.components, extras


def feasible_values(output: Any, *, signed: bool) -> tuple[Any, list[int]]:
    """Private power's released σ̂_i of a symmetric matrix projected onto their feasible set (post-processing):
    norms (``signed=False``) are non-negative, so a negative one (Laplace noise) becomes 0; then the components are
    ordered by decreasing σ̂ (with their diagnostics), so that the values read as singular values do. Signed values
    (Rayleigh quotients) are kept as released. Returns the output and the order applied."""
    components = np.asarray(output.components)
    values = np.asarray(output.values, dtype=np.float64)
    if signed or values.shape[0] != components.shape[0]:
        return output, list(range(components.shape[0]))
    values = np.maximum(values, 0.0)
    order = [int(i) for i in np.argsort(-values, kind="stable")]
    diag = output.diagnostics
    if diag is not None:
        from dppca_dask.diagnostics import diagnostics

        diag = diagnostics([diag.noise_to_signal[i] for i in order], threshold=diag.threshold, rule=diag.rule)
    return dataclasses.replace(output, components=components[order], values=values[order], diagnostics=diag), order


def lowrank_report(output: Any, events: list[Any], parameters: Mapping[str, Any], neighbouring: str, noise: Any,
                   calibration: Mapping[str, Any]) -> tuple[Any, dict[str, Any]]:
    """The run's privacy report (the emitted events composed by the accountant; with rows clipped to the row-change
    bound, the replace-one-row figure) and the calibration its provenance states: the planned ``calibration``, or
    private power's as run (with the paper's figure under ``calibration="paper"``)."""
    from dppca_dask.accounting import build_report

    mechanism, delta = parameters["mechanism"], parameters["delta"]
    calibration_info, paper_figure = dict(calibration), None
    if mechanism == "private-power":
        calibration_info = output.calibration.to_dict()
        if parameters["calibration"] == "paper":
            paper_figure = output.calibration.paper_figure()
    report = build_report(events, target_epsilon=parameters["epsilon"], target_delta=delta,
                          neighbouring=neighbouring, private=bool(noise.private), paper_figure=paper_figure)
    if mechanism != "private-power" and parameters["row_change_bound"] == parameters["row_norm_bound"]:
        report = with_replace_one(report, events, delta)
    return report, calibration_info


def with_replace_one(report: Any, events: list[Any], delta: float) -> Any:
    """Add the replace-one-row figure: with rows clipped to c = s, replacing a row is a change of at most 2s."""
    from dppca_dask.accounting import epsilon_for, group_events

    value = epsilon_for(group_events(events, group_size=2), delta=delta, accountant=report.accountant)
    group = {
        "neighbouring": "replace one row (rows clipped to the row-change bound)",
        "epsilon": value,
        "delta": float(delta),
        "accountant": report.accountant,
        "method": "group privacy of size 2 (sensitivities doubled)",
    }
    return dataclasses.replace(report, group_privacy=group)
