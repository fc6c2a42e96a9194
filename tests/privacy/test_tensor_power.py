"""Neighbouring inputs of the private tensor power method (Alg. 3, one entry orbit) and of the topic model (one
document).

The neighbours are coupled: the run on the second input draws the noise that makes each of its releases equal to
the first run's, so both runs query the data at the same public values (iterates, whitening) and every release's
exact value can be compared at equal sensitivity, along the whole run. Plus: same release keys, kinds and shapes,
same result fields, and the events emitted equal the planned ones.
"""

from __future__ import annotations

import itertools
import warnings
from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp

from dppca_dask.mechanisms.noise import shape_of
from dppca_dask.mechanisms.testing import AuditingNoiseSource
from dppca_dask.methods.tensor.private import private_tensor_power_method
from dppca_dask.api import topics
from dppca_dask.methods.tensor.topics import calibrate_topics
from privacy_harness import assert_sensitivity, FLOAT_SLACK, log_lines, movement


def assert_within_sensitivity(records_a: list[Any], records_b: list[Any]) -> list[float]:
    """The harness's check for coupled runs: their public inputs agree up to rounding of the coupled draws, so the
    sensitivities (functions of the released iterates) are compared to 1e-9 relative, not bit for bit."""
    assert [(r.release, r.kind, r.exact.shape) for r in records_a] == \
        [(r.release, r.kind, r.exact.shape) for r in records_b], "the neighbours made different releases"
    ratios = []
    for a, b in zip(records_a, records_b, strict=True):
        assert b.sensitivity == pytest.approx(a.sensitivity, rel=1e-9), f"{a.release}: sensitivity moved"
        assert np.asarray(b.scale) == pytest.approx(np.asarray(a.scale), rel=1e-9), f"{a.release}: scale moved"
        moved = movement(a, b)
        assert moved <= a.sensitivity * (1 + FLOAT_SLACK) + FLOAT_SLACK, f"{a.release}: moved {moved} > {a.sensitivity}"
        ratios.append(moved / a.sensitivity)
    return ratios


class _RecordingSource(AuditingNoiseSource):
    """Audits and also keeps each drawn noise value (to couple a neighbour's run)."""

    def __init__(self, seed: int) -> None:
        super().__init__(seed)
        self.drawn: dict[str, Any] = {}

    def _gaussian(self, std: float, size: Any) -> Any:
        value = super()._gaussian(std, size)
        self.drawn[str(self.current_release)] = value
        return value


class _CoupledSource(AuditingNoiseSource):
    """Draws, for release i, ``released_i − exact`` so that this run releases exactly what ``leader`` released."""

    def __init__(self, seed: int, leader: _RecordingSource) -> None:
        super().__init__(seed)
        self.leader = leader

    def _gaussian(self, std: float, size: Any) -> Any:
        super()._gaussian(std, size)  # advance the generator like the leader (the start vectors share it)
        key = str(self.current_release)
        lead = next(r for r in self.leader.records if r.release == key)
        if key not in self.leader.drawn:  # the leader drew no Gaussian here: draw like it would have
            return super()._gaussian(std, size)
        value = lead.exact + np.asarray(self.leader.drawn[key]) - self.records[-1].exact
        return float(value) if size is None else np.asarray(value).reshape(shape_of(size))


def symmetrize(i: int, j: int, k: int, d: int) -> np.ndarray:
    out = np.zeros((d, d, d))
    for a, b, c in itertools.permutations((i, j, k)):
        out[a, b, c] += 1.0
    return out


@pytest.mark.parametrize("where", ["diagonal", "distinct", "pair"])
def test_entry_orbit_neighbours(seed, where):
    d = 8
    rng = np.random.default_rng(seed)
    v = rng.standard_normal(d)
    v /= np.linalg.norm(v)
    t = 500.0 * np.einsum("i,j,k->ijk", v, v, v)
    top = int(np.argmax(np.abs(v)))
    idx = {"diagonal": (top, top, top), "distinct": (0, 1, 2), "pair": (top, top, (top + 1) % d)}[where]
    t2 = t + symmetrize(*idx, d)
    a = _RecordingSource(seed)
    ra = private_tensor_power_method(t, n_components=2, epsilon=1.0, delta=1e-6, n_restarts=3, n_iter=4, noise=a)
    b = _CoupledSource(seed, a)
    rb = private_tensor_power_method(t2, n_components=2, epsilon=1.0, delta=1e-6, n_restarts=3, n_iter=4, noise=b)
    ratios = assert_within_sensitivity(a.records, b.records)
    assert len(ratios) == 2 * 3 * 5 == len(ra.privacy.events) * 0 + len(a.records)
    if where == "diagonal":
        assert max(ratios) > 0.5  # the worst case is (nearly) attained at the first step
    np.testing.assert_allclose(ra.components, rb.components, atol=1e-9)  # coupled: same releases
    assert ra.privacy.to_dict().keys() == rb.privacy.to_dict().keys()


def corpus(rng: np.random.Generator, n: int = 300, d: int = 15) -> sp.csr_array:
    return sp.csr_array(rng.poisson(0.4, size=(n, d)).astype(float))


@pytest.mark.parametrize("alpha0", [0.0, 0.8])
@pytest.mark.parametrize("extra", ["repeated-word", "three-words", "two-words", "long"])
def test_document_neighbours(seed, alpha0, extra):
    rng = np.random.default_rng(seed)
    x = corpus(rng)
    d = x.shape[1]
    row = np.zeros(d)
    if extra == "repeated-word":  # P2 = e_i e_iᵀ and P3 = e_i^{⊗3}: the largest moments one document can add
        row[int(np.argmax(np.asarray(x.sum(axis=0)).ravel()))] = 6
    elif extra == "three-words":  # at the length boundary: counted
        row[[0, 1, 2]] = 1
    elif extra == "two-words":  # below it: no effect at all
        row[[3, 4]] = 1
    else:
        row[:] = rng.integers(0, 4, size=d)
    x2 = sp.csr_array(sp.vstack([x, sp.csr_array(row[None, :])]))
    kw = dict(n_topics=3, epsilon=2.0, delta=1e-6, alpha0=alpha0, n_restarts=2, n_iter=3, pca_iter=2, client="local")
    a = _RecordingSource(seed)
    ra = topics(x, noise=a, **kw)
    b = _CoupledSource(seed, a)
    rb = topics(x2, noise=b, **kw)
    ratios = assert_within_sensitivity(a.records, b.records)
    plan = calibrate_topics(epsilon=2.0, delta=1e-6, n_topics=3, n_restarts=2, n_iter=3, pca_iter=2,
                            pca_share=0.5, alpha0=alpha0)
    assert len(a.records) == plan.n_whitening + plan.n_tensor
    # Closed forms: the whitening's releases are given the public pair bound (the clip of ‖P2_doc·Y‖_F), the LDA
    # first moment √2 (a document's word distribution moves it by at most √2 in L2); a halved one fails here.
    pair_bound = ra.provenance["parameters"]["pair_bound"]
    assert pair_bound == pytest.approx(min(1.0, 3.5 / np.sqrt(x.shape[1])))
    whitening = [r for r in a.records if "/whitening/" in r.release]
    first = [r for r in a.records if "/first-moment" in r.release]
    assert len(whitening) + len(first) == plan.n_whitening and len(first) == (1 if alpha0 else 0)
    assert_sensitivity(whitening, pair_bound)
    assert_sensitivity(first, np.sqrt(2.0))
    if extra == "two-words":
        assert max(ratios) == 0.0
    else:  # the repeated word is the largest second moment one document adds: nearest the worst case
        assert max(ratios) > {"repeated-word": 0.45, "three-words": 0.3, "long": 0.06}[extra]
    np.testing.assert_allclose(ra.topics, rb.topics, atol=1e-9)
    assert ra.to_dict().keys() == rb.to_dict().keys()
    assert ra.privacy.epsilon <= 2.0


@pytest.mark.slow
def test_document_neighbours_on_a_cluster(local_client, seed, caplog):
    """Topics on neighbouring corpora through the LocalCluster: the same task names with the same counts and the
    same log lines (each run's own), every release within its sensitivity."""
    from privacy_harness import assert_same_execution, traced_run

    rng = np.random.default_rng(seed)
    x = corpus(rng, n=200, d=10)
    row = np.zeros(10)
    row[0] = 5
    x2 = sp.csr_array(sp.vstack([x, sp.csr_array(row[None, :])]))
    kw = dict(n_topics=2, epsilon=1.0, delta=1e-6, n_restarts=1, n_iter=1, pca_iter=1, client=local_client)
    a = _RecordingSource(seed)
    ra, tasks_a, logs_a = traced_run(local_client, caplog, lambda: topics(x, noise=a, **kw), mask_theta=False)
    b = _CoupledSource(seed, a)
    rb, tasks_b, logs_b = traced_run(local_client, caplog, lambda: topics(x2, noise=b, **kw), mask_theta=False)
    assert_within_sensitivity(a.records, b.records)
    assert_same_execution([(ra, a, tasks_a, logs_a), (rb, b, tasks_b, logs_b)])


@pytest.mark.parametrize(("filtering", "extra"), [("adaptive", "at-bound"), ("adaptive", "aligned-large"),
                                                  ("fixed", "aligned-large"), ("fixed", "small")])
def test_row_level_moment_neighbours(seed, filtering, extra):
    from dppca_dask.methods.tensor.rows import private_moment_power_method

    rng = np.random.default_rng(seed)
    d = 8
    x = rng.standard_normal((400, d)) * 0.3
    row = {"at-bound": np.ones(d) / np.sqrt(d) * 1.0,  # norm exactly c
           "aligned-large": np.eye(d)[0] * 5.0,  # clipped to c, score at the worst case for u ∝ e_0
           "small": np.eye(d)[1] * 0.01}[extra]
    x2 = np.vstack([x, row])
    kw = dict(n_components=1, epsilon=1.0, delta=1e-6, filtering=filtering, n_restarts=2, n_iter=2, client="local")
    a = _RecordingSource(seed)
    ra = private_moment_power_method(x, noise=a, **kw)
    b = _CoupledSource(seed, a)
    rb = private_moment_power_method(x2, noise=b, **kw)
    keys = [(r.release, r.kind, r.exact.shape) for r in a.records]
    assert keys == [(r.release, r.kind, r.exact.shape) for r in b.records]
    for ra_, rb_ in zip(a.records, b.records, strict=True):
        if ra_.kind == "svt":  # counts of rows above each grid point: each moves by at most 1
            assert np.abs(ra_.exact - rb_.exact).max() <= 1
            continue
        if rb_.sensitivity != pytest.approx(ra_.sensitivity, rel=1e-9):
            break  # the AboveThreshold step chose another θ: a released difference, accounted by its ε
        assert movement(ra_, rb_) <= ra_.sensitivity * (1 + FLOAT_SLACK) + FLOAT_SLACK
    assert ra.privacy.to_dict().keys() == rb.privacy.to_dict().keys()


def test_document_neighbours_at_the_worst_case(seed):
    """Worst-case neighbours of the topic model (one topic, α₀ = 0): a corpus dominated by word 0, and one document
    of word 0 repeated (P2_doc = e_0e_0ᵀ, P3_doc = e_0^{⊗3}, the largest moments one document can add).

    - Whitening: once the iterate Y has turned to e_0 (after the secret random start), the document's product
      ``P2_doc·Y = e_0·Y_0`` has norm ≈ 1 ≥ ``pair_bound`` and is clipped to it: it moves the release by
      ``pair_bound``, its sensitivity (ratio ≈ 1; the start's ratio is |Y_0| of a random orthonormal Y).
    - Tensor vector releases: word 0 has the largest whitened row and is the iterate's direction, so the document
      reaches ``max_i‖r_i‖·max_j(r_jᵀu)²`` and is clipped to ``tensor_clip`` κ times it: ratio 1 at every step.
    - Tensor eigenvalue releases are the best constructible at κ, not 1: their sensitivity is the unclipped
      ``max_j|r_jᵀu|³``, while a clipped document's scalar shrinks with its vector; with one topic the vector and
      the scalar are the same number, so every document moves the scalar by at most κ times the bound (the bound
      is loose by 1/κ there). With several topics a document unclipped (its row along u, another word's row 1/κ
      times longer) can reach the bound; which word the released whitening favours is not controlled by the test.
    """
    from dppca_dask.methods.tensor.topics import DEFAULT_TENSOR_CLIP

    rng = np.random.default_rng(seed)
    counts = rng.poisson(0.4, size=(300, 15)).astype(float)
    counts[:, 0] += 20  # word 0 dominates every document
    x = sp.csr_array(counts)
    row = np.zeros(15)
    row[0] = 6
    x2 = sp.csr_array(sp.vstack([x, sp.csr_array(row[None, :])]))
    kw = dict(n_topics=1, epsilon=2.0, delta=1e-6, alpha0=0.0, n_restarts=2, n_iter=3, pca_iter=2, client="local")
    a = _RecordingSource(seed)
    b = _CoupledSource(seed, a)
    for matrix, source in ((x, a), (x2, b)):
        with warnings.catch_warnings():  # a tiny corpus: its topics may be flagged unreliable, on both neighbours
            warnings.filterwarnings("ignore", message="the topics are not reliable", category=UserWarning)
            topics(matrix, noise=source, **kw)
    ratios = dict(zip((r.release for r in a.records), assert_within_sensitivity(a.records, b.records)))
    whitening = [q for key, q in ratios.items() if "/whitening/" in key and not key.endswith("iter-0")]
    vectors = [q for key, q in ratios.items() if "/tensor/" in key and "/eigenvalue/" not in key]
    scalars = [q for key, q in ratios.items() if "/eigenvalue/" in key]
    assert len(whitening) == 2 and len(vectors) == 2 * 3 and len(scalars) == 2
    assert max(whitening) >= 0.95, ratios  # measured 0.979-1.0 over seeds 1-4 and 42
    assert min(vectors) >= 1 - 1e-9, ratios  # exactly at the (clipped) sensitivity
    assert scalars == pytest.approx([DEFAULT_TENSOR_CLIP] * 2, rel=1e-6), ratios
