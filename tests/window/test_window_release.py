"""``dppca_dask.window``: noise off against numpy on the window's clipped rows, downstream tasks, bad input."""

from __future__ import annotations

import numpy as np
import pytest

from dppca_dask import window
from dppca_dask.errors import InvalidParameterError, NotPrivateWarning
from dppca_dask.ingest import ingest
from dppca_dask.mechanisms.testing import ZeroNoiseSource
from dppca_dask.mechanisms.wishart import wishart_tau
from window_data import D, ROWS_PER_DAY, clipped, day_block, day_labels

pytestmark = pytest.mark.filterwarnings("ignore::dppca_dask.errors.NotPrivateWarning")


def _exact(days: range, *, c: float = 1.0, labels: bool = False, first_rows: int = 0) -> np.ndarray:
    blocks = []
    for n in days:
        x = day_block(n).toarray()
        if labels:
            x = np.hstack([x, day_labels(n)[:, None]])
        blocks.append(x)
    rows = np.vstack(blocks)[first_rows:]
    rows = clipped(rows, c)
    return rows.T @ rows


@pytest.mark.parametrize("release", ["gaussian", "wishart", "jl"])
def test_noise_off_releases_the_exact_window_gram(ten_days, release):
    result = window(ten_days, last="5D", epsilon=1, delta=1e-6, release=release, client="local",
                    noise=ZeroNoiseSource(), row_norm_bound=0.8)
    exact = _exact(range(6, 11), c=0.8)
    if release == "jl":  # zero draws: Ã = 0; the debiased release is −c²σ²I
        assert np.allclose(result.released, 0) and result.shift == pytest.approx(0.64 * result.calibration["sigma"] ** 2)
        return
    assert np.allclose(result.released, exact)  # zero draws: R = 0 (Wishart), zero Gaussian noise
    if release == "wishart":
        assert result.shift == pytest.approx(0.64 * np.ceil(wishart_tau(D, epsilon=1, delta=1e-6)))
        return
    values, vectors = np.linalg.eigh(exact)
    top = result.pca(2)
    assert np.allclose(np.abs(top @ vectors[:, ::-1][:, :2]), np.eye(2), atol=1e-8)  # sign-invariant
    x = np.random.default_rng(0).standard_normal(D)
    assert result.directional_variance(x) == pytest.approx(x @ exact @ x)
    assert result.window.partitions == (5, 6, 7, 8, 9)
    assert result.privacy.neighbouring == "add/remove one row" and not result.private


def test_row_window_and_its_calibration(ten_days):
    result = window(ten_days, last_rows=ROWS_PER_DAY + 7, epsilon=1, delta=1e-6, client="local",
                    noise=ZeroNoiseSource())
    assert np.allclose(result.debiased, _exact(range(9, 11), first_rows=ROWS_PER_DAY - 7))
    assert result.calibration["l2_sensitivity"] == pytest.approx(np.sqrt(2))  # a row enters, the oldest leaves
    assert "oldest row" in result.privacy.neighbouring
    wish = window(ten_days, last_rows=10, epsilon=1, delta=1e-6, release="wishart", client="local",
                  noise=ZeroNoiseSource())
    run_delta = 1e-6 / (1 + np.exp(0.5))
    assert wish.calibration["mechanism_epsilon"] == 0.5
    assert wish.calibration["tau"] == np.ceil(wishart_tau(D, epsilon=0.5, delta=run_delta))
    assert wish.privacy.epsilon == pytest.approx(1.0, rel=1e-3)


def test_regression_and_constrained_pca(ten_days):
    result = window(ten_days, last="4D", epsilon=1, delta=1e-6, labels=True, client="local",
                    noise=ZeroNoiseSource())
    gram = _exact(range(7, 11), labels=True)
    coef = result.regression(ridge=0)  # without noise and ridge: the exact fit (the default ridge shrinks it)
    expected = np.linalg.solve(gram[:-1, :-1], gram[:-1, -1])
    assert np.allclose(coef, expected, atol=1e-8)
    assert np.allclose(result.covariance, gram[:-1, :-1])
    sparse = result.sparse_pca(2, nonzeros=2)
    assert sparse.shape == (2, D) and (np.count_nonzero(sparse, axis=1) <= 2).all()
    assert np.allclose(np.linalg.norm(sparse, axis=1), 1)
    nonneg = result.nonnegative_pca(2)
    assert (nonneg >= 0).all() and np.allclose(nonneg @ nonneg.T, np.eye(2), atol=1e-12)
    ridge = result.regression(ridge=5.0)
    assert np.linalg.norm(ridge) < np.linalg.norm(coef)


def test_window_through_a_local_cluster(ten_days, local_client):
    result = window(ten_days, last="3D", epsilon=1, delta=1e-6, client=local_client, noise=ZeroNoiseSource())
    assert np.allclose(result.debiased, _exact(range(8, 11)))


def test_seed_warns_and_is_reproducible(ten_days):
    with pytest.warns(NotPrivateWarning):
        a = window(ten_days, last="2D", epsilon=1, delta=1e-6, client="local", seed=3)
    b = window(ten_days, last="2D", epsilon=1, delta=1e-6, client="local", seed=3)
    assert np.array_equal(a.released, b.released) and not a.private


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"release": "laplace"}, "release must be one of"),
        ({"epsilon": -1}, "epsilon must be finite and > 0"),
        ({"delta": 1.5}, "delta must be in"),
        ({"row_norm_bound": 0}, "row_norm_bound must be finite"),
        ({"tau_rule": "x"}, "tau_rule must be one of"),
        ({"labels": "yes"}, "labels must be True or False"),
        ({"max_dense_dim": 4}, "dense 6x6 matrix .* exceeds max_dense_dim=4"),
        ({"max_dense_dim": 0}, "max_dense_dim must be a positive integer"),
        ({"sketch_rows": 3}, "sketch_rows applies to release='jl'"),
        ({"seed": 1, "noise": ZeroNoiseSource()}, "either seed or noise"),
        ({"seed": 1.5}, "seed must be an integer"),
    ],
)
def test_bad_parameters_fail_before_any_release(ten_days, kwargs, message):
    args = {"last": "2D", "epsilon": 1, "delta": 1e-6, "client": "local", **kwargs}
    with pytest.raises(InvalidParameterError, match=message):
        window(ten_days, **args)


def test_regression_needs_labels(tmp_path, ten_days):
    store = ingest(day_block(1), tmp_path / "s", n_features=D, timestamp="2026-11-01")
    with pytest.raises(InvalidParameterError, match="no 'labels' array"):
        window(store, last="1D", epsilon=1, delta=1e-6, labels=True, client="local")
    plain = window(ten_days, last="1D", epsilon=1, delta=1e-6, client="local", noise=ZeroNoiseSource())
    with pytest.raises(InvalidParameterError, match="no label column"):
        plain.regression()
    import zarr

    zarr.open_group(store.path, mode="r+").create_array("labels", shape=(3,), dtype=np.float64, chunks=(8,))
    zarr.consolidate_metadata(store.path)  # a node added with zarr: consolidated again
    with pytest.raises(InvalidParameterError, match="does not cover every row"):
        window(store, last="1D", epsilon=1, delta=1e-6, labels=True, client="local")


def test_tasks_refuse_bad_arguments(ten_days):
    result = window(ten_days, last="1D", epsilon=1, delta=1e-6, client="local", noise=ZeroNoiseSource())
    with pytest.raises(InvalidParameterError, match="n_components must be an integer in"):
        result.pca(D + 1)
    with pytest.raises(InvalidParameterError, match="nonzeros must be an integer in"):
        result.sparse_pca(1, 0)
    with pytest.raises(InvalidParameterError, match="x must be a vector of length"):
        result.directional_variance(np.ones(D + 1))
    with pytest.raises(InvalidParameterError, match="x must be finite"):
        result.directional_variance(np.full(D, np.nan))
    from dppca_dask.methods.window.tasks import regression

    with pytest.raises(InvalidParameterError, match="ridge must be finite"):
        regression(np.eye(3), ridge=-1)
    with pytest.raises(InvalidParameterError, match="needs the label column"):
        regression(np.eye(1))


def test_save_writes_an_owner_only_release(tmp_path, ten_days):
    import json
    import os
    import stat

    result = window(ten_days, last="1D", epsilon=1, delta=1e-6, client="local", noise=ZeroNoiseSource())
    path = result.save(tmp_path / "out")
    saved = json.load(open(path))
    assert saved["window"]["n_partitions"] == 1 and np.allclose(saved["released"], result.released)
    assert stat.S_IMODE(os.stat(tmp_path / "out").st_mode) == 0o700
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    from dppca_dask.methods.window.release import load_release

    loaded = load_release(tmp_path / "out")
    assert np.array_equal(loaded.released, result.released) and loaded.window == result.window
    assert loaded.privacy == result.privacy


def test_gram_cache_reads_only_new_partitions(daily_store, monkeypatch):
    import os
    import stat

    from dppca_dask.storage import append_partition
    from window_data import count_reads, day

    store = daily_store(4)
    reads = count_reads(monkeypatch)
    args = {"last": "3D", "epsilon": 1, "delta": 1e-6, "client": "local", "cache": True}
    first = window(store, noise=ZeroNoiseSource(), **args)
    assert sorted(reads) == [1, 2, 3] and np.allclose(first.released, _exact(range(2, 5)))
    directory = os.path.join(os.path.dirname(store.path), ".store.window-grams")
    assert stat.S_IMODE(os.stat(directory).st_mode) == 0o700
    assert all(stat.S_IMODE(os.stat(os.path.join(directory, f)).st_mode) == 0o600 for f in os.listdir(directory))
    reads.clear()
    store = append_partition(store.path, day_block(5), timestamp=day(5))
    second = window(store, noise=ZeroNoiseSource(), **args)
    assert reads == [4] and np.allclose(second.released, _exact(range(3, 6)))
    reads.clear()
    # Which partitions a row window holds whole (cached) follows their private row counts: refused, nothing read
    with pytest.raises(InvalidParameterError, match="cache=True serves time windows"):
        window(store, last_rows=ROWS_PER_DAY + 5, epsilon=1, delta=1e-6, client="local", cache=True,
               noise=ZeroNoiseSource())
    assert reads == []
    for wrong in ("yes", "", 1, None):  # falsy values too: a misspelt setting is refused, not read as False
        with pytest.raises(InvalidParameterError, match="cache must be True or False"):
            window(store, last="1D", epsilon=1, delta=1e-6, client="local", cache=wrong)
    with pytest.raises(InvalidParameterError, match="cache=True serves structure='exact'"):
        window(store, last="1D", epsilon=1, delta=1e-6, client="local", cache=True, structure="spectral-histogram")


def test_budgets_whose_release_cannot_run_are_refused_before_anything_is_read(daily_store, monkeypatch):
    """At ε = 1e-6 the Wishart draw needed 424 TiB (a MemoryError after its release had begun, which spends a
    partition-scoped budget); at ε = 1e6 the report's accounting overflowed after the noise was drawn."""
    from window_data import count_reads

    store = daily_store(2)
    reads = count_reads(monkeypatch)
    with pytest.raises(InvalidParameterError, match="use release='gaussian' or a larger epsilon"):
        window(store, last="1D", epsilon=1e-6, delta=0.5, release="wishart", client="local", seed=1)
    with pytest.raises(InvalidParameterError, match="choose fewer sketch_rows"):
        window(store, last="1D", epsilon=1, delta=1e-6, release="jl", sketch_rows=10**9, client="local", seed=1)
    with pytest.raises(InvalidParameterError, match="epsilon must be at most 100"):
        window(store, last="1D", epsilon=1e6, delta=1e-6, release="wishart", client="local", seed=1)
    assert reads == []


@pytest.mark.parametrize("release", ["wishart", "jl"])
def test_hardened_sampler_is_refused_before_the_window_is_read(daily_store, monkeypatch, release):
    pytest.importorskip("opendp")
    from dppca_dask.mechanisms import NoiseSource
    from window_data import count_reads

    store = daily_store(2)
    reads = count_reads(monkeypatch)
    with pytest.raises(InvalidParameterError, match="no hardened"):
        window(store, last="1D", epsilon=1, delta=1e-6, release=release, client="local",
               noise=NoiseSource.from_entropy(sampler="hardened"))
    assert reads == []


def test_the_papers_wishart_rules_say_when_their_tau_is_not_private(daily_store):
    """At ε = 50 the paper's τ (thm14, alg7) is d + 1 or d + 2: the release without a row then falls, with
    probability 0.39 or so, where the one with it cannot, so its δ is at least that. The report says so; at ε = 1
    (τ in the hundreds) and with the default rule (τ raised to the exact floor) it says nothing."""
    from dppca_dask.mechanisms.wishart import support_delta

    store = daily_store(2)
    args = {"last": "1D", "delta": 1e-6, "release": "wishart", "client": "local", "seed": 1}
    for rule in ("thm14", "alg7"):
        loose = window(store, epsilon=50, tau_rule=rule, **args)
        floor = support_delta(D, loose.calibration["tau"])
        assert floor > 0.1
        assert [c for c in loose.privacy.caveats if "tau_rule" in c] == [
            f"tau_rule={rule!r} (the paper's degrees of freedom, tau={loose.calibration['tau']:.0f}) is not "
            f"(epsilon, delta)-DP as stated: its Wishart step's delta is at least {floor:.3g}, above the 1e-06 it "
            "is given; the default tau_rule='thm11' is"]
        assert not [c for c in window(store, epsilon=1, tau_rule=rule, **args).privacy.caveats if "tau_rule" in c]
    assert not [c for c in window(store, epsilon=50, **args).privacy.caveats if "tau_rule" in c]
