"""Resuming an interrupted block run: from every checkpoint (after the quantile, the mean, each AboveThreshold step,
each Gaussian step and the explained variance) the resumed run draws no released noise again, emits the same
events as an uninterrupted run, and with the same noise for the remaining releases returns the same result.

Deterministic: the noise of every release is a function of the seed and the release's key (:class:`KeyedNoise`),
so a resumed run draws for each remaining release exactly what the uninterrupted run drew."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp

from dppca_dask import pca
from dppca_dask.methods.adaptive_power.block import BlockPowerState
from dppca_dask.methods.adaptive_power.block_plan import BLOCK_POWER
from dppca_dask.errors import InvalidParameterError, ReleaseError
from dppca_dask.mechanisms import NoiseSource

PARAMS: dict[str, Any] = {"epsilon": 1.0, "delta": 1e-6, "n_iter": 3, "n_components": 2, "mechanism": BLOCK_POWER,
                          "client": "local", "progress": False}


class KeyedNoise(NoiseSource):
    """Noise drawn from a generator seeded by (seed, release key): a release's noise does not depend on the order
    of the releases before it. Records the keys drawn. Not private."""

    def __init__(self, seed: int) -> None:
        super().__init__(np.random.default_rng(seed), private=False, description="keyed (test)")
        self.seed = seed
        self.drawn: list[str] = []
        self._streams: dict[str, np.random.Generator] = {}

    def _stream(self) -> np.random.Generator:
        key = str(self.current_release)
        if key not in self._streams:
            digest = hashlib.sha256(f"{self.seed}/{key}".encode()).digest()
            self._streams[key] = np.random.default_rng(int.from_bytes(digest[:8], "little"))
            self.drawn.append(key)
        return self._streams[key]

    def _gaussian(self, std: float, size: Any) -> Any:
        return self._stream().normal(0.0, std, size)

    def _laplace(self, scale: float, size: Any) -> Any:
        return self._stream().laplace(0.0, scale, size)


@pytest.fixture
def matrix(rng: np.random.Generator) -> sp.csr_array:
    dense = rng.standard_normal((1_500, 20)) * np.array([3.0, 2.0, 1.5] + [0.4] * 17) / 4.0 + 0.2
    return sp.csr_array(dense)


def _states(matrix: Any, **kwargs: Any) -> tuple[Any, list[tuple[BlockPowerState, tuple]], KeyedNoise]:
    states: list[tuple[BlockPowerState, tuple]] = []

    def keep(state: BlockPowerState, events: tuple) -> None:  # written and read back, as a job's checkpoint is
        states.append((BlockPowerState.from_json(json.loads(json.dumps(state.to_json()))), events))

    noise = KeyedNoise(5)
    full = pca(matrix, noise=noise, on_release=keep, **{**PARAMS, **kwargs})
    return full, states, noise


@pytest.mark.parametrize("kwargs", [{}, {"center": "private", "row_norm_bound": "auto"}], ids=["plain", "centred"])
def test_resumed_from_every_checkpoint_equals_the_uninterrupted_run(matrix: sp.csr_array, kwargs: dict) -> None:
    full, states, first = _states(matrix, **kwargs)
    stages = [s.stage for s, _ in states]
    # a fixed bound releases the fraction of rows it clips first; an automatic one releases the bound itself
    expected = (["row-norm-bound", "mean"] if kwargs else ["clipped-fraction"]) + ["iteration"] * 6 + [
        "explained-variance"]
    assert stages == expected
    assert [s.pending_index is not None for s, _ in states if s.stage == "iteration"] == [True, False] * 3
    for i, (state, events_at) in enumerate(states):
        second = KeyedNoise(5)
        resumed = pca(matrix, noise=second, resume=state, **{**PARAMS, **kwargs})
        # nothing released before the checkpoint is drawn again; everything after it is drawn once, in order
        done = len(first.drawn) - len(second.drawn)
        assert second.drawn == first.drawn[done:] and set(second.drawn).isdisjoint(first.drawn[:done]), i
        np.testing.assert_array_equal(resumed.components, full.components)
        np.testing.assert_array_equal(resumed.thresholds, full.thresholds)
        np.testing.assert_array_equal(resumed.explained_variance, full.explained_variance)
        if kwargs:
            np.testing.assert_array_equal(resumed.mean, full.mean)
            assert resumed.extras["row_norm_bound"] == full.extras["row_norm_bound"]
        else:
            assert resumed.extras["clipped_fraction"] == full.extras["clipped_fraction"]
        # the ledger sees the same events: the report of the resumed run is the whole run's
        assert resumed.privacy.events == full.privacy.events
        assert resumed.privacy.epsilon == full.privacy.epsilon
        for key in first.drawn[:done]:
            with pytest.raises(ReleaseError, match="already drawn"):
                with second.release(key):
                    pass


def test_a_resume_between_an_svt_step_and_its_gaussian_step_reuses_the_released_index(
        matrix: sp.csr_array) -> None:
    full, states, first = _states(matrix)
    crash, events_at_crash = [(s, e) for s, e in states if s.pending_index is not None][1]
    # the clipped fraction, the first iteration's two steps and the released SVT step are accounted
    assert crash.iteration == 1 and len(events_at_crash) == 1 + 2 + 1
    second = KeyedNoise(5)
    resumed = pca(matrix, noise=second, resume=crash, **PARAMS)
    assert second.drawn == ["block/iter-1/gaussian", "block/iter-2/svt", "block/iter-2/gaussian",
                            "explained-variance"]  # no second draw of block/iter-1/svt
    np.testing.assert_array_equal(resumed.components, full.components)
    assert resumed.thresholds[0, 1] == full.thresholds[0, 1]


def test_resume_refuses_a_state_of_another_run(matrix: sp.csr_array) -> None:
    _, states, _ = _states(matrix)
    state = states[3][0]
    with pytest.raises(InvalidParameterError, match=r"resume.x must have shape \(20, 5\)"):
        pca(matrix, noise=KeyedNoise(1), resume=state, **{**PARAMS, "n_components": 3})
    with pytest.raises(InvalidParameterError, match=r"resume.iteration must be in \[0, 1\]"):
        pca(matrix, noise=KeyedNoise(1), resume=states[-1][0], **{**PARAMS, "n_iter": 1})
    with pytest.raises(InvalidParameterError, match="resumes from the BlockPowerState"):
        pca(matrix, noise=KeyedNoise(1), resume=object(), **PARAMS)
    with pytest.raises(InvalidParameterError, match="not the checkpoint of a block run"):
        BlockPowerState.from_json({"component": 0, "iteration": 1, "x": [[1.0]]})
