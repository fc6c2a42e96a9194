"""Analyze Gauss: the noisy Gram matrix's top components, the worst-case-optimal baseline of :func:`dppca_dask.pca`.

Paper: Dwork, Talwar, Thakurta & Zhang, "Analyze Gauss: optimal bounds for privacy-preserving principal component
analysis" (STOC 2014), Algorithm 1; the project's comparisons against it are in the seed-004 spec
(``specs/seed004.md`` in the shared specs folder, §5), and its centred variant shares the centring of
:mod:`dppca_dask.methods.adaptive_power`.

Mechanism (registered by :mod:`dppca_dask.methods`): ``analyze-gauss`` (:data:`MECHANISM`): ``A'ᵀA'`` plus symmetric
Gaussian noise at the coordinator, then its top eigenvectors; with ``center`` or ``row_norm_bound="auto"`` the
centred run of :mod:`~dppca_dask.methods.analyze_gauss.centred` (planned by
:mod:`dppca_dask.methods.adaptive_power.centring_plan`).

Modules, in reading order:

1. this module: the mechanism;
2. :mod:`~dppca_dask.methods.analyze_gauss.algorithm`: the release as a generator of one request;
3. :mod:`~dppca_dask.methods.analyze_gauss.plan`: its calibration, planned event and replace-one event;
4. :mod:`~dppca_dask.methods.analyze_gauss.centred`: the centred run and its plan (private centre, private bound,
   explained variance).
"""

from __future__ import annotations

from dppca_dask.methods._params import ADD_REMOVE_ROW, pca_planner, pca_validator
from dppca_dask.methods._registry import Mechanism
from dppca_dask.methods.analyze_gauss.plan import plan_analyze_gauss

__all__ = ["MECHANISM"]

MECHANISM = Mechanism(
    name="analyze-gauss", entry="pca",
    summary="top components of the Gram matrix with symmetric Gaussian noise (dense d x d at the coordinator)",
    neighbouring=ADD_REMOVE_ROW, private=True, validate=pca_validator("analyze-gauss"),
    plan=pca_planner(plan_analyze_gauss),
)
