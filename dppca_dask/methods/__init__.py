"""Every mechanism, one package per family, and the registry the API, the CLI, jobs and benchmarks read.

A family package defines its :class:`Mechanism` (name, entry point, summary, neighbouring relation, ``validate``
and ``plan``) and the registry lines at the end of this module register it; nothing else lists mechanisms. Each
entry kind (``pca``, ``lowrank``, ``topics``, ``window``) is an :class:`Entry` registered beside its mechanisms:
what a job naming one of them runs, checks, plans and loads (``dppca_dask.jobs`` reads nothing else about a
family).
"""

from __future__ import annotations

from dppca_dask.methods._registry import (
    Entry,
    Mechanism,
    MechanismPlan,
    entry_for,
    entry_names,
    get_entry,
    get_mechanism,
    job_mechanisms,
    mechanism_help,
    mechanism_names,
    register,
    register_entry,
    resolve,
)

__all__ = ["Entry", "Mechanism", "MechanismPlan", "entry_for", "entry_names", "get_entry", "get_mechanism",
           "job_mechanisms", "mechanism_help", "mechanism_names", "register", "register_entry", "resolve"]

# The registry: one import and registration per family module (the order is the order of CLI choices).
from dppca_dask.methods import adaptive_power, analyze_gauss, exact  # noqa: E402
from dppca_dask.methods.hardt_roth import lowrank_mechanisms as _hr_lowrank  # noqa: E402
from dppca_dask.methods.hardt_roth import pca_mechanism as _hr_private_power  # noqa: E402

register(adaptive_power.MECHANISM)
register(adaptive_power.BLOCK_MECHANISM)
register(adaptive_power.AUTO_MECHANISM)
register(analyze_gauss.MECHANISM)
register(exact.MECHANISM)
register(_hr_private_power.MECHANISM)
for _mechanism in _hr_lowrank.MECHANISMS:
    register(_mechanism)
from dppca_dask.methods import _entries  # noqa: E402

register_entry(_entries.PCA_ENTRY)
register_entry(_entries.LOWRANK_ENTRY)
from dppca_dask.methods.tensor import mechanism as _tensor  # noqa: E402

register(_tensor.MECHANISM)
from dppca_dask.methods.tensor import job as _tensor_job  # noqa: E402

register_entry(_tensor_job.TOPICS_ENTRY)

from dppca_dask.methods.window import mechanisms as _window  # noqa: E402

for _mechanism in _window.MECHANISMS:
    register(_mechanism)
register_entry(_entries.WINDOW_ENTRY)
