"""What a :func:`~dppca_dask.pca` run reports beside its components, from released values and public parameters
only: the privacy report, the result's ``extras`` (the released bound, clipped fraction and auto decision) and its
diagnostics."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from dppca_dask.methods import MechanismPlan
from dppca_dask.methods._params import PCAParameters

__all__ = ["pca_diagnostics", "pca_extras", "pca_report"]


def pca_extras(output: Any, params: PCAParameters, *, auto_bound: bool) -> dict[str, Any]:
    """A result's ``extras``: the released bound, clipped fraction and auto decision, the exact run's eigenvalues
    (warns when the released clipped fraction is large)."""
    extras: dict[str, Any] = {}
    if auto_bound:
        extras["row_norm_bound"] = float(output.row_norm_bound)  # released by the private quantile
    if getattr(output, "clipped_fraction", None) is not None:  # released: a noisy count over a noisy count
        extras["clipped_fraction"] = float(output.clipped_fraction)
        _warn_clipping(float(output.clipped_fraction), float(params.row_norm_bound))
    if getattr(output, "decision", None) is not None:
        extras["auto"] = dict(output.decision)  # released values and public constants only
    if params.mechanism == "exact":
        extras["eigenvalues"] = np.asarray(output.eigenvalues).tolist()
        extras["passes"] = output.n_passes
    return extras


def _warn_clipping(fraction: float, bound: float) -> None:
    """A :class:`~dppca_dask.errors.ClippingWarning` when the released clipped fraction is above
    :data:`~dppca_dask.methods.adaptive_power.row_norm_bound.CLIPPED_FRACTION_WARNING` (a function of released values only)."""
    from dppca_dask.methods.adaptive_power.row_norm_bound import CLIPPED_FRACTION_WARNING
    from dppca_dask.errors import ClippingWarning

    if fraction > CLIPPED_FRACTION_WARNING:
        warnings.warn(
            f"row_norm_bound={bound:g} clipped about {fraction:.0%} of the rows (released): the components are those "
            "of the rows scaled down to that norm, which may not be the data's principal directions; pass "
            "row_norm_bound='auto' (a private 90th percentile of the row norms) or a bound near the typical row norm "
            "(noise grows with its square), and after StandardScaler bound each value first, e.g. "
            "numpy.clip(X, -3, 3) (see the clipping guide)",
            ClippingWarning, stacklevel=4)  # pca -> pca_extras -> here: the caller of pca


def pca_diagnostics(output: Any, mechanism: str) -> Any:
    """The release's diagnostics (post-processing of released values, computed by the run); every figure 0 for
    the exact, noise-free baseline."""
    from dppca_dask.diagnostics import exact_diagnostics

    if mechanism == "exact":
        return exact_diagnostics(int(np.asarray(output.components).shape[0]))
    return getattr(output, "diagnostics", None)


def pca_report(params: PCAParameters, plan: MechanismPlan, events: tuple[Any, ...], noise: Any) -> Any:
    """The run's privacy report: the emitted events composed by the accountant (with the replace-one figure when
    the plan states one); a non-private report for the exact baseline."""
    from dppca_dask import accounting

    if params.mechanism == "exact":
        from dp_accounting import NonPrivateDpEvent

        return accounting.build_report(
            [NonPrivateDpEvent()], target_epsilon=float("inf"), target_delta=0.0,
            neighbouring=plan.neighbouring, private=False,
        )
    replace_events, method = (None, None) if plan.replace_one is None else (plan.replace_one[0](events),
                                                                          plan.replace_one[1])
    return accounting.build_report(
        list(events),
        target_epsilon=params.epsilon,
        target_delta=params.delta,
        neighbouring=plan.neighbouring,
        private=bool(noise.private),
        paper_figure=plan.paper_figure,
        replace_one_events=replace_events,
        replace_one_method=method,
    )
