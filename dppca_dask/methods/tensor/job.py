"""The ``topics`` entry kind: what a job naming the topic model runs (:func:`dppca_dask.topics`), checks, plans
and loads (see :class:`~dppca_dask.methods.Entry`; registered in :mod:`dppca_dask.methods`). Its rows are
documents of word counts, checked before anything is reserved.
"""

from __future__ import annotations

import math
from typing import Any

from dppca_dask.errors import JobSpecError
from dppca_dask.methods._registry import Entry, get_mechanism

__all__ = ["TOPICS_ENTRY"]

#: Parameters of a ``topics`` job: those of ``dppca-dask topics`` (and ``tensor_clip``), and ``persist``.
_TOPICS_KEYS = frozenset({"n_topics", "alpha0", "n_restarts", "n_iter", "pca_iter", "pca_share", "pair_bound",
                          "tensor_clip", "persist"})


def _integer(source: str, key: str, value: Any) -> int:
    from dppca_dask.jobs.spec import _where

    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise JobSpecError(f"{_where(source, 'mechanism', key)} must be an integer >= 1; got {value!r}")
    return value


def _check_topics(source: str, mech: dict[str, Any], n_features: int | None) -> None:
    """Every parameter of a ``topics`` job, checked as :func:`dppca_dask.topics` checks it (the bound on
    ``n_topics`` by the store's width is checked again against the store before anything is reserved)."""
    from dppca_dask.jobs.spec import _where

    if "n_topics" not in mech:
        raise JobSpecError(f"{_where(source, 'mechanism', 'n_topics')} is required for 'topics' (the number of "
                           "topics K, at most the number of columns)")
    for key in ("n_topics", "n_restarts", "n_iter", "pca_iter"):
        if key in mech:
            _integer(source, key, mech[key])
    if n_features is not None and mech["n_topics"] > n_features:
        raise JobSpecError(f"{_where(source, 'mechanism', 'n_topics')} must be at most the store's width "
                           f"n_features={n_features}; got {mech['n_topics']}")
    if "alpha0" in mech:
        value = mech["alpha0"]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            raise JobSpecError(f"{_where(source, 'mechanism', 'alpha0')} must be a finite number >= 0 (0: the "
                               f"single-topic model; LDA's sum of alpha otherwise); got {value!r}")
    if "pca_share" in mech:
        value = mech["pca_share"]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 1:
            raise JobSpecError(f"{_where(source, 'mechanism', 'pca_share')} must be a number in (0, 1); got "
                               f"{value!r}; e.g. 0.5")
    for key in ("pair_bound", "tensor_clip"):
        if key in mech:
            value = mech[key]
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
                raise JobSpecError(f"{_where(source, 'mechanism', key)} must be a number in (0, 1] (1 clips "
                                   f"nothing); got {value!r}")
    if "persist" in mech and not isinstance(mech["persist"], bool):
        raise JobSpecError(f"{_where(source, 'mechanism', 'persist')} must be true or false; got {mech['persist']!r}")


def _check_spec(source: str, mechanism: str, mech: dict[str, Any], *, ingest: Any, n_features: Any) -> None:
    """:func:`_check_topics` with the width the spec declares (``[data]`` or ``[data.ingest]`` ``n_features``)."""
    declared = n_features if n_features is not None else (ingest or {}).get("n_features")
    _check_topics(source, mech, declared if isinstance(declared, int) else None)


def _plan(mechanism: str, *, n_rows: int | None, n_cols: int, epsilon: float, delta: float,
          parameters: dict[str, Any]) -> tuple[str, tuple[Any, ...], dict[str, Any]]:
    """The topic model's relation and events, from its registry entry's planner."""
    plan = get_mechanism("topics", "topics").plan({**parameters, "epsilon": epsilon, "delta": delta},
                                                  n_rows=n_rows, n_cols=n_cols)
    return plan.neighbouring, tuple(plan.planned_events), dict(plan.calibration)


def _check_content(store: Any) -> None:
    """The topic model's word counts must be whole numbers from 0 to 2^53 (one read of the data in this process;
    nothing is derived)."""
    from dppca_dask.methods.tensor.topics import check_corpus

    check_corpus(store)


TOPICS_ENTRY = Entry(
    name="topics", function="dppca_dask.topics", load_result="dppca_dask.methods.tensor.topics.load_topics", plan=_plan, run_arguments=frozenset(),
    parameters=_TOPICS_KEYS, check_spec=_check_spec, check_content=_check_content,
    content_checked="the word counts",
)
