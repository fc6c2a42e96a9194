"""Hostile inputs and data-dependent behaviour of the topic model (one document added or removed) and of the
private tensor power method on an explicit tensor (one entry orbit).

The number of documents is private under this relation: a corpus of fewer documents than topics must run like one
of more (same releases, same fields), not be refused. A word count so large that the distinct-triples weights
overflow must be refused with the bad input's partition and row before any noise is drawn, not half-way through
the run after the whitening's releases. Likewise a tensor whose power iterates would overflow float64.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp

from dppca_dask.errors import InvalidInputError
from dppca_dask.mechanisms.testing import AuditingNoiseSource
from dppca_dask.methods import get_mechanism
from dppca_dask.api import topics
from dppca_dask.methods.tensor.topics import check_corpus

KW = dict(n_topics=3, epsilon=2.0, delta=1e-6, n_restarts=2, n_iter=2, pca_iter=2, client="local")


def _corpus(seed: int, n: int, d: int = 12) -> sp.csr_array:
    rng = np.random.default_rng(seed)
    return sp.csr_array(rng.poisson(1.0, size=(n, d)).astype(float))


@pytest.mark.parametrize("alpha0", [0.0, 0.8])
def test_fewer_documents_than_topics_run_like_their_neighbour(seed, alpha0):
    x = _corpus(seed, 3)  # as many documents as topics; its neighbour has one fewer
    runs = []
    for data in (x, x[:2]):
        noise = AuditingNoiseSource(seed)
        result = topics(data, noise=noise, alpha0=alpha0, **KW)
        runs.append(([(r.release, r.kind, r.exact.shape) for r in noise.records], result.to_dict().keys()))
    assert runs[0] == runs[1]
    assert get_mechanism("topics", "topics").plan({"n_topics": 3, "epsilon": 1.0, "delta": 1e-6}, n_rows=2,
                                                  n_cols=12).events  # the planner does not read n_rows either


@pytest.mark.parametrize("value", [2.0**53 + 2, 1e103, 1e300])
def test_a_count_too_large_for_the_moments_fails_before_any_release(seed, value):
    x = sp.lil_array(_corpus(seed, 200))
    x[57, [0, 1, 2]] = value  # whole numbers: the distinct-triples weight 1/(ℓ(ℓ−1)(ℓ−2)) overflows from ~1e103
    x = sp.csr_array(x)
    noise = AuditingNoiseSource(seed)
    with pytest.raises(InvalidInputError, match="row 57 holds a negative, fractional or too large count"):
        topics(x, noise=noise, **KW)
    assert not noise.records and not noise.released_keys
    with pytest.raises(InvalidInputError, match="row 57"):  # what a job checks before its reservation
        check_corpus(x)


def test_the_largest_count_accepted_releases_within_the_sensitivity(seed):
    from test_tensor_power import _CoupledSource, _RecordingSource, assert_within_sensitivity

    x = _corpus(seed, 200)
    row = np.zeros(x.shape[1])
    row[[0, 1, 2]] = 2.0**53
    x2 = sp.csr_array(sp.vstack([x, sp.csr_array(row[None, :])]))
    for alpha0, clip in ((0.0, 0.25), (0.0, 1.0), (0.8, 1.0), (0.8, 0.25)):
        a = _RecordingSource(seed)
        topics(x, noise=a, alpha0=alpha0, tensor_clip=clip, **KW)
        b = _CoupledSource(seed, a)
        topics(x2, noise=b, alpha0=alpha0, tensor_clip=clip, **KW)
        assert max(assert_within_sensitivity(a.records, b.records)) > 0


@pytest.mark.parametrize("scale", [1e160, 1e300])
def test_a_tensor_too_large_for_float64_fails_before_any_release(seed, scale):
    from dppca_dask.methods.tensor import private_tensor_power_method, tensor_power_method

    rng = np.random.default_rng(seed)
    v = rng.standard_normal(6)
    v /= np.linalg.norm(v)
    t = scale * np.einsum("i,j,k->ijk", v, v, v)  # the squared norm of T(I,u,u) overflows
    noise = AuditingNoiseSource(seed)
    with pytest.raises(InvalidInputError, match="Frobenius norm exceeds 1e150"):
        private_tensor_power_method(t, n_components=2, epsilon=1.0, delta=1e-6, n_restarts=2, n_iter=3, noise=noise)
    assert not noise.records and not noise.released_keys
    with pytest.raises(InvalidInputError, match="Frobenius norm exceeds 1e150"):  # not eigenvalues 0 silently
        tensor_power_method(t, n_components=2, n_restarts=2, n_iter=3, seed=seed)
    found = tensor_power_method(t / scale * 1e149, n_components=1, n_restarts=2, n_iter=5, seed=seed)
    assert found.eigenvalues[0] == pytest.approx(1e149, rel=1e-9)  # just below the bound: exact


def _expanded(events: Any) -> list[tuple[str, float]]:
    """``(type, noise multiplier)`` of each elementary event, from DpEvents or the report's dictionaries."""
    out: list[tuple[str, float]] = []
    for event in events:
        get = event.get if isinstance(event, dict) else lambda name, e=event: getattr(e, name, None)
        kind = get("type") or type(event).__name__
        if kind == "SelfComposedDpEvent":
            out += _expanded([get("event")]) * int(get("count"))
        else:
            out.append((kind, float(get("noise_multiplier"))))
    return sorted(out)


@pytest.mark.parametrize("alpha0", [0.0, 0.8])
def test_topic_events_emitted_equal_the_planned_ones(seed, alpha0):
    x = _corpus(seed, 200)
    params = {"n_topics": 3, "epsilon": 2.0, "delta": 1e-6, "alpha0": alpha0, "n_restarts": 2, "n_iter": 2,
              "pca_iter": 2}
    planned = get_mechanism("topics", "topics").plan(params, n_rows=None, n_cols=x.shape[1]).events
    noise = AuditingNoiseSource(seed)
    result = topics(x, noise=noise, alpha0=alpha0, **KW)
    assert _expanded(result.privacy.events) == _expanded(planned)


@pytest.mark.parametrize("calibration", ["standard", "paper"])
def test_tensor_events_emitted_equal_the_planned_ones(seed, calibration):
    from dppca_dask.methods.tensor.private import calibrate_tensor, private_tensor_power_method

    t = 50.0 * np.einsum("i,j,k->ijk", *([np.ones(4) / 2] * 3))
    plan = calibrate_tensor(epsilon=1.0, delta=1e-6, n_components=2, n_restarts=3, n_iter=4, calibration=calibration)
    result = private_tensor_power_method(t, n_components=2, epsilon=1.0, delta=1e-6, n_restarts=3, n_iter=4,
                                         calibration=calibration, noise=AuditingNoiseSource(seed))
    assert _expanded(result.privacy.events) == _expanded(plan.events())
    assert len(_expanded(plan.events())) == 2 * 3 * 5
