"""The spectral histogram (seed 001 §5 recommended core) on row streams: §9 checks 4–6. Deterministic."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dppca_dask.errors import InvalidParameterError, StoreCorruptError
from dppca_dask.methods.window.histogram import SpectralHistogram, loewner_leq


def _stream(seed: int, n: int, d: int, rank: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    basis = np.linalg.qr(rng.standard_normal((d, rank)))[0]
    rows = rng.standard_normal((n, rank)) @ basis.T
    return rows / np.maximum(np.linalg.norm(rows, axis=1), 1.0)[:, None]


def _run(rows: np.ndarray, w: int, eta: float, lam: float):
    h = SpectralHistogram(rows.shape[1], eta, lam)
    for t, a in enumerate(rows):
        h.add(t, np.outer(a, a), window_start=max(0, t - w + 1))
        yield t, h


@pytest.mark.parametrize("rank", [2, 5])
def test_sandwich_pruning_invariants_and_space(seed, rank):
    d, w, eta, lam = 5, 60, 0.2, 5.0
    rows = _stream(seed, 2 * w, d, rank)
    worst = 0
    for t, h in _run(rows, w, eta, lam):
        worst = max(worst, h.n_checkpoints)
        if t % 5 and t != 2 * w - 1:  # the full checks on every 5th step (each is O(ℓ²) eigendecompositions)
            continue
        s = max(0, t - w + 1)
        window = rows[s : t + 1].T @ rows[s : t + 1]
        assert h.starts == sorted(set(h.starts)) and h.starts[-1] == t  # strictly increasing, t_ℓ = T
        assert h.n_checkpoints >= min(t + 1, 2)
        assert h.starts[0] <= s and (h.n_checkpoints < 2 or s <= h.starts[1])  # t₁ ≤ T−W+1 ≤ t₂
        for i, start in enumerate(h.starts):  # checkpoints hold exact sums
            assert np.allclose(h.grams[i], rows[start : t + 1].T @ rows[start : t + 1])
        assert loewner_leq(window, h.grams[0], 1.0)  # A_WᵀA_W ⪯ K₁
        if h.n_checkpoints >= 2:
            assert loewner_leq(h.grams[1], window, 1.0)  # K₂ ⪯ A_WᵀA_W
        lam_i = lam * np.eye(d)
        for i in range(h.n_checkpoints):  # no (1−η)-close pair two apart below the newest
            for p in range(i + 2, h.n_checkpoints - 1):
                assert not loewner_leq(h.grams[i] + lam_i, h.grams[p] + lam_i, 1 - eta)
        for i in range(h.n_checkpoints - 1):  # consecutive: close, or adjacent
            assert (h.starts[i + 1] == h.starts[i] + 1
                    or loewner_leq(h.grams[i] + lam_i, h.grams[i + 1] + lam_i, 1 - eta))
        # log-det space bound (deterministic, §9 check 6)
        logdet = [np.linalg.slogdet(g + lam_i)[1] for g in (h.grams[0], h.grams[-1])]
        assert h.n_checkpoints <= 3 + 2 * (logdet[0] - logdet[1]) / -math.log(1 - eta) + 1e-9
    prior = 3 + 2 * rank * math.log((1 + (w + 1) / lam) / (1 - eta)) / -math.log(1 - eta)
    assert worst <= prior and worst < w // 2  # o(W): far fewer checkpoints than rows
    assert h.nbytes == 8 * h.n_checkpoints * d * d


def test_expired_direction_leaves_the_first_checkpoint():
    # W rows along e₁, then W rows along e₂: once e₁ expired, e₁ᵀK₁e₁ ≤ max(1, λη/(1−η)) and e₂ᵀK₁e₂ ≥ W
    d, w, eta, lam = 3, 30, 0.2, 4.0
    rows = np.zeros((2 * w + 5, d))
    rows[:w, 0] = 1.0
    rows[w:, 1] = 1.0
    for t, h in _run(rows, w, eta, lam):
        pass
    assert h.grams[0][0, 0] <= max(1.0, lam * eta / (1 - eta)) + 1e-9
    assert h.grams[0][1, 1] >= w


def test_persistence_roundtrip_and_parameter_checks(tmp_path):
    h = SpectralHistogram(3, 0.3, 2.0)
    for t, a in enumerate(_stream(1, 30, 3, 3)):
        h.add(t, np.outer(a, a), window_start=max(0, t - 9))
    h.save(str(tmp_path / "hist"), meta={"window": "10 rows"})
    back = SpectralHistogram.load(str(tmp_path / "hist"), expect={"eta": 0.3, "window": "10 rows"})
    assert back.starts == h.starts and all(np.array_equal(a, b) for a, b in zip(back.grams, h.grams))
    assert oct((tmp_path / "hist" / "state.npz").stat().st_mode & 0o777) == "0o600"
    assert SpectralHistogram.load(str(tmp_path / "none"), expect={}) is None
    with pytest.raises(InvalidParameterError, match="built with window='10 rows'"):
        SpectralHistogram.load(str(tmp_path / "hist"), expect={"window": "5 rows"})
    (tmp_path / "hist" / "state.npz").write_bytes(b"garbage")
    with pytest.raises(StoreCorruptError, match="cannot be read"):
        SpectralHistogram.load(str(tmp_path / "hist"), expect={})
    with pytest.raises(InvalidParameterError, match="already added"):
        h.add(3, np.eye(3), window_start=0)
    with pytest.raises(InvalidParameterError, match="eta must be in"):
        SpectralHistogram(3, 1.0, 1.0)
    with pytest.raises(InvalidParameterError, match="regularizer must be finite"):
        SpectralHistogram(3, 0.5, 0.0)
    with pytest.raises(InvalidParameterError, match="holds no partition"):
        SpectralHistogram(3, 0.5, 1.0).covering(0)
    with pytest.raises(InvalidParameterError, match="after the window's first partition"):
        h.covering(0)
