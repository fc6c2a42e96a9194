"""Hardened noise: exact discrete samplers on a 2^k lattice, the rounding and its sensitivity, and the switch.

The hardened samplers draw from the operating system's secure generator through OpenDP and cannot be seeded, so
the draws below are not reproducible; the ``seed`` fixture seeds the test data and the sources' numpy generators
(start vectors, Ω). Statistical assertions are two-sided at a false-failure rate of alpha = 1e-6 each, on exact
sufficient statistics: Σz²/σ² ~ χ²(n) for Gaussian noise, Σ|z| ~ Gamma(n, scale=b) for Laplace noise. On the
lattice used (2^-40 of a scale and finer) the discrete distributions' second and first absolute moments equal the
continuous ones to a relative 2^-40 or better, far below the tests' resolution (about 1e-2).
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import dask.config
import numpy as np
import pytest
import scipy.sparse as sp
from dp_accounting import GaussianDpEvent, LaplaceDpEvent
from scipy import stats

import dppca_dask
from dppca_dask.errors import InvalidParameterError, NotPrivateWarning, ReleaseError
from dppca_dask.mechanisms import NoiseSource, above_threshold, gaussian_mechanism, laplace_mechanism
from dppca_dask.mechanisms.hardened import (
    LATTICE_BITS,
    discrete_gaussian,
    discrete_laplace,
    inflated_sensitivity,
    lattice_exponent,
    round_to_lattice,
)
from dppca_dask.mechanisms.noise import DEFAULT_SAMPLER, SAMPLER_CONFIG_KEY, SAMPLER_ENV, default_sampler
from dppca_dask.mechanisms.secret import secret_gaussian

ALPHA = 1e-6
N = 10_000


class AuditingHardenedSource(NoiseSource):
    """Hardened sampling that records what each mechanism hands to the audit hook (not private)."""

    def __init__(self, seed: int) -> None:
        super().__init__(np.random.default_rng(seed), private=False, description="hardened audit (test)",
                         sampler="hardened")
        self.records: list[dict[str, Any]] = []

    def audit(self, *, kind: str, exact: Any, sensitivity: float, scale: Any) -> None:
        self.records.append({"release": self.current_release, "kind": kind, "exact": np.array(exact, copy=True),
                             "sensitivity": sensitivity, "scale": scale})


def _two_sided_ok(dist: Any, statistic: float) -> bool:
    return bool(dist.cdf(statistic) > ALPHA / 2 and dist.sf(statistic) > ALPHA / 2)


def _on_lattice(values: Any, k: int) -> bool:
    with np.errstate(over="ignore"):  # values of 2^(k+1024) and more are on the lattice; they scale to inf
        scaled = np.ldexp(np.asarray(values, dtype=np.float64), -k)
    return bool(np.all(scaled == np.rint(scaled)))


@pytest.fixture(autouse=True)
def _no_sampler_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(SAMPLER_ENV, raising=False)


# -- the lattice ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("scale", "k"),
    [
        (1.0, -40),  # 2^0: ⌊log2⌋ = 0
        (1.5, -40),
        (2.0, -39),
        (0.75, -41),
        (4.0 / 0.1, -35),  # an SVT query scale at ε = 0.1: 40 = 1.25·2^5
        (2.0**40, 0),  # the largest scales whose lattice still holds the integers
        (2.0**-1000, -1040),
        (2.0**-1050, -1074),  # clamped at the smallest float64
    ],
)
def test_lattice_exponent_is_floor_log2_minus_40(scale: float, k: int) -> None:
    assert lattice_exponent(scale) == k
    assert LATTICE_BITS == 40


@pytest.mark.parametrize("bad", [0.0, -1.0, math.inf, math.nan])
def test_lattice_exponent_rejects_bad_scales(bad: float) -> None:
    with pytest.raises(InvalidParameterError, match="scale must be finite and > 0"):
        lattice_exponent(bad)


@pytest.mark.parametrize("k", [-40, -3, 0, 5, -1074])
def test_round_to_lattice_is_nearest_and_on_the_lattice(k: int, rng: np.random.Generator) -> None:
    step = math.ldexp(1.0, k)
    values = np.concatenate([
        rng.standard_normal(500) * step * 1000,
        rng.standard_normal(100) * 1e6,
        [0.0, -0.0, step / 2, -step / 2, 1.5 * step, 2.5 * step, 1e300, -1e300, 5e-324],
    ])
    rounded = round_to_lattice(values, k)
    assert _on_lattice(rounded, k) and np.all(np.isfinite(rounded))
    for x, r in zip(values.tolist(), rounded.tolist()):  # exact rational check of the distance
        assert abs(Fraction(r) - Fraction(x)) <= Fraction(step) / 2
    np.testing.assert_array_equal(round_to_lattice(np.array([1e300, -1e300]), k), [1e300, -1e300])
    if k > -1074:  # ties go to the even lattice point (half of 2^-1074 is not a float64)
        ties = np.array([step / 2, 1.5 * step, 2.5 * step, -2.5 * step])
        np.testing.assert_array_equal(round_to_lattice(ties, k) / step, [0.0, 2.0, 2.0, -2.0])


def test_inflated_sensitivity_formula() -> None:
    # L2: Δ + 2^k·√n; L1: Δ + 2^k·n (each coordinate of each neighbour moves by at most 2^(k-1)).
    for sensitivity, k, n in [(1.0, -40, 20_000), (0.25, -30, 1), (3.0, -10, 7), (1e-3, -60, 10**9)]:
        l2 = inflated_sensitivity(sensitivity, k, n, norm="l2")
        l1 = inflated_sensitivity(sensitivity, k, n, norm="l1")
        exact_l1 = Fraction(sensitivity) + Fraction(2) ** k * n
        assert Fraction(l1) >= exact_l1 and l1 == pytest.approx(float(exact_l1), rel=1e-15)
        exact_l2_sq = (Fraction(l2) - Fraction(sensitivity)) ** 2 / Fraction(2) ** (2 * k)
        assert exact_l2_sq >= n  # the float bound is never below Δ + 2^k·√n
        assert l2 == pytest.approx(sensitivity + math.ldexp(math.sqrt(n), k), rel=1e-15)
    # 1 + 2^-40·√20000 = 1 + 1.2861e-10
    assert inflated_sensitivity(1.0, -40, 20_000, norm="l2") - 1.0 == pytest.approx(1.2861e-10, rel=1e-4)


def test_inflated_sensitivity_rejects_unknown_norms() -> None:
    with pytest.raises(InvalidParameterError, match="norm must be 'l1' or 'l2'; got 'linf'"):
        inflated_sensitivity(1.0, -40, 3, norm="linf")


def test_inflation_agrees_with_opendps_own_privacy_maps() -> None:
    # OpenDP's make_gaussian / make_laplace on float vectors account for the same rounding: their maps give
    # ρ = Δ'²/(2σ²) and ε = Δ'/b with our Δ'.
    import opendp.prelude as dp

    dp.enable_features("contrib")
    n, k, sigma = 20_000, -40, 3.0
    gaussian = dp.m.make_gaussian(dp.vector_domain(dp.atom_domain(T=float, nan=False), size=n),
                                  dp.l2_distance(T=float), scale=sigma, k=k)
    laplace = dp.m.make_laplace(dp.vector_domain(dp.atom_domain(T=float, nan=False), size=n),
                                dp.l1_distance(T=float), scale=sigma, k=k)
    l2 = inflated_sensitivity(1.0, k, n, norm="l2")
    l1 = inflated_sensitivity(1.0, k, n, norm="l1")
    assert gaussian.map(1.0) == pytest.approx(l2**2 / (2 * sigma**2), rel=1e-12)
    assert laplace.map(1.0) == pytest.approx(l1 / sigma, rel=1e-12)


def test_rounded_neighbours_move_by_at_most_the_inflated_sensitivity(rng: np.random.Generator) -> None:
    # Worst case: coordinates just below a half step round down, their neighbours' just above round up.
    n, k = 64, -40
    step = math.ldexp(1.0, k)
    base = (rng.integers(-1000, 1000, n) + 0.5) * step - step * 2**-8
    shift = rng.standard_normal(n)
    shift *= 0.5 / np.linalg.norm(shift)  # ‖x − x'‖₂ = 0.5 (up to rounding)
    neighbour = base + shift
    sensitivity = float(np.linalg.norm(neighbour - base))
    moved = float(np.linalg.norm(round_to_lattice(neighbour, k) - round_to_lattice(base, k)))
    assert moved <= inflated_sensitivity(sensitivity, k, n, norm="l2")
    moved_l1 = float(np.abs(round_to_lattice(neighbour, k) - round_to_lattice(base, k)).sum())
    assert moved_l1 <= inflated_sensitivity(float(np.abs(neighbour - base).sum()), k, n, norm="l1")


# -- the samplers ---------------------------------------------------------------------------------------------


def test_discrete_gaussian_scale_chi_square() -> None:
    std = 1.7
    k = lattice_exponent(std)
    z = discrete_gaussian(std, N, k)
    assert z.shape == (N,) and z.dtype == np.float64 and _on_lattice(z, k)
    assert _two_sided_ok(stats.chi2(N), float(np.sum((z / std) ** 2)))
    assert abs(float(z.mean())) < 5.5 * std / math.sqrt(N)  # P(|N(0,1)| > 5.5) < 4e-8


def test_discrete_laplace_scale_gamma() -> None:
    b = 2.3
    k = lattice_exponent(b)
    z = discrete_laplace(b, N, k)
    assert z.shape == (N,) and _on_lattice(z, k)
    assert _two_sided_ok(stats.gamma(N, scale=b), float(np.sum(np.abs(z))))


def test_samplers_return_floats_and_shapes() -> None:
    one = discrete_gaussian(2.0, None, -39)
    assert isinstance(one, float) and _on_lattice(one, -39)
    grid = discrete_laplace(2.0, (3, 4), -39)
    assert grid.shape == (3, 4) and _on_lattice(grid, -39)
    assert discrete_gaussian(2.0, (0, 5), -39).shape == (0, 5)


def test_hardened_source_draws_on_the_lattice_of_its_scale(seed: int) -> None:
    source = NoiseSource(np.random.default_rng(seed), private=False, sampler="hardened")
    with source.release("a"):
        g = source.gaussian(5.0, size=200)
        lap = source.laplace(40.0, size=200)  # an SVT scale: lattice 2^-35, which holds the integers
    assert _on_lattice(g, lattice_exponent(5.0)) and _on_lattice(lap, -35)
    assert source.lattice_exponent(40.0) == -35
    with source.release("b"):
        coarse = source.gaussian(5.0, size=50, lattice=-2)
    assert _on_lattice(coarse, -2)


@pytest.mark.parametrize("bad", [1.5, True, -1075, 1024, "3"])
def test_hardened_source_rejects_bad_lattices_before_the_release_is_used(bad: object, seed: int) -> None:
    source = NoiseSource(np.random.default_rng(seed), private=False, sampler="hardened")
    with pytest.raises(InvalidParameterError, match="lattice must be an integer exponent"):
        source.gaussian(1.0, lattice=bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidParameterError, match="lattice must be an integer exponent"):
        with source.release("x"):
            source.laplace(1.0, lattice=bad)  # type: ignore[arg-type]


def test_float_source_has_no_lattice(seed: int) -> None:
    with pytest.warns(NotPrivateWarning):
        source = NoiseSource.from_seed(seed)
    assert source.sampler == "float" and source.lattice_exponent(3.0) is None


# -- the mechanisms on hardened noise -------------------------------------------------------------------------


def test_gaussian_mechanism_hardened_scale_sensitivity_and_event(seed: int) -> None:
    source = AuditingHardenedSource(seed)
    sensitivity, multiplier = 0.5, 3.0
    k = lattice_exponent(multiplier * sensitivity)
    noisy, event = gaussian_mechanism(np.zeros(N), l2_sensitivity=sensitivity, noise_multiplier=multiplier,
                                      noise=source, release="g")
    assert event == GaussianDpEvent(multiplier)  # the multiplier is kept: the noise grows instead
    (record,) = source.records
    inflated = inflated_sensitivity(sensitivity, k, N, norm="l2")
    assert record["sensitivity"] == inflated and record["scale"] == multiplier * inflated
    assert record["scale"] > multiplier * sensitivity
    assert _on_lattice(noisy, k)
    assert _two_sided_ok(stats.chi2(N), float(np.sum((noisy / record["scale"]) ** 2)))


def test_laplace_mechanism_hardened_scale_sensitivity_and_event(seed: int) -> None:
    source = AuditingHardenedSource(seed)
    sensitivity, epsilon = 2.0, 0.5
    k = lattice_exponent(sensitivity / epsilon)
    noisy, event = laplace_mechanism(np.zeros(N), l1_sensitivity=sensitivity, epsilon=epsilon, noise=source,
                                     release="l")
    assert event == LaplaceDpEvent(1.0 / epsilon)
    (record,) = source.records
    inflated = inflated_sensitivity(sensitivity, k, N, norm="l1")
    assert record["sensitivity"] == inflated and record["scale"] == inflated / epsilon
    assert _on_lattice(noisy, k)
    assert _two_sided_ok(stats.gamma(N, scale=record["scale"]), float(np.sum(np.abs(noisy))))


def test_hardened_release_is_rounded_value_plus_lattice_noise(seed: int, rng: np.random.Generator) -> None:
    source = AuditingHardenedSource(seed)
    value = rng.standard_normal(50) / 3
    k = lattice_exponent(2.0)
    noisy, _ = gaussian_mechanism(value, l2_sensitivity=1.0, noise_multiplier=2.0, noise=source, release="g")
    audited = source.records[0]["exact"]
    np.testing.assert_array_equal(audited, round_to_lattice(value, k))  # the audit sees the rounded value
    assert not np.array_equal(audited, value)
    assert _on_lattice(noisy, k) and _on_lattice(noisy - audited, k)  # sums below 2^(53+k): exact
    scalar, _ = laplace_mechanism(1 / 3, l1_sensitivity=1.0, epsilon=1.0, noise=source, release="l")
    assert np.ndim(scalar) == 0 and _on_lattice(scalar, lattice_exponent(1.0))


def test_hardened_sources_keep_one_draw_per_release(seed: int) -> None:
    source = NoiseSource(np.random.default_rng(seed), private=False, sampler="hardened")
    gaussian_mechanism(np.zeros(3), l2_sensitivity=1.0, noise_multiplier=1.0, noise=source, release="r")
    with pytest.raises(ReleaseError, match="already drawn"):
        gaussian_mechanism(np.zeros(3), l2_sensitivity=1.0, noise_multiplier=1.0, noise=source, release="r")
    with pytest.raises(ReleaseError, match="only inside a release"):
        source.gaussian(1.0)
    with pytest.raises(ReleaseError, match="only inside a release"):
        source.laplace(1.0, size=3)
    with pytest.raises(ReleaseError, match="cannot be copied or pickled"):
        import pickle

        pickle.dumps(source)


def test_svt_on_hardened_noise_answers_like_the_exact_test(seed: int) -> None:
    # Counts far from the cut-off on both sides: the released index is the first count below it, whatever the
    # (bounded with overwhelming probability) noise; the noise drawn is discrete Laplace on a lattice of integers.
    source = NoiseSource(np.random.default_rng(seed), private=False, sampler="hardened")
    counts = np.array([10_000.0, 9_000.0, 3.0, 2.0])
    result = above_threshold(counts, cutoff=100.0, epsilon=1.0, noise=source, release="svt")
    assert result.index == 2  # fails only if a Lap(4) noise exceeds 1,000 in size: probability < 1e-100


def test_secret_draws_still_come_from_the_numpy_generator(seed: int) -> None:
    a = NoiseSource(np.random.default_rng(seed), private=False, sampler="hardened")
    omega = secret_gaussian(a, (3, 2), release="omega")
    np.testing.assert_array_equal(omega, np.random.default_rng(seed).standard_normal((3, 2)))


def test_pca_runs_end_to_end_on_hardened_noise(seed: int, rng: np.random.Generator) -> None:
    matrix = sp.random(3_000, 40, density=0.1, format="csr", random_state=np.random.default_rng(seed))
    matrix.data = rng.uniform(0.0, 1.0, matrix.nnz)
    source = AuditingHardenedSource(seed)
    result = dppca_dask.pca(matrix, epsilon=1.0, delta=1e-6, n_components=2, client="local", noise=source,
                            progress=False)
    assert result.components.shape == (2, 40) and np.all(np.isfinite(result.components))
    np.testing.assert_allclose(np.linalg.norm(result.components, axis=1), 1.0, rtol=1e-9)
    kinds = {record["kind"] for record in source.records}
    assert kinds == {"svt", "gaussian"}
    for record in source.records:
        if record["kind"] == "gaussian":
            k = lattice_exponent(record["scale"])
            assert _on_lattice(record["exact"], k) or _on_lattice(record["exact"], k - 1)
            assert record["sensitivity"] > 0 and record["scale"] > 0
    released = {record["release"] for record in source.records}
    assert released <= source.released_keys and len(released) == len(source.records)  # one draw per key


def test_pca_run_with_hardened_default_is_private(monkeypatch: pytest.MonkeyPatch, seed: int) -> None:
    from dppca_dask.mechanisms import hardened

    matrix = sp.random(2_000, 20, density=0.2, format="csr", random_state=np.random.default_rng(seed))
    draws: list[str] = []
    real_draw = hardened._draw

    def counting_draw(kind: str, scale: float, size: Any, k: int) -> Any:
        draws.append(kind)
        return real_draw(kind, scale, size, k)

    monkeypatch.setattr(hardened, "_draw", counting_draw)
    monkeypatch.setenv(SAMPLER_ENV, "hardened")
    result = dppca_dask.pca(matrix, epsilon=1.0, delta=1e-6, client="local", progress=False,
                            mechanism="adaptive-power")
    assert result.private and result.components.shape == (1, 20)
    assert result.provenance["noise_sampler"] == "hardened"
    # default T = 5: a start vector, then per iteration the SVT (ρ, then ν) and the Gaussian step
    assert draws.count("gaussian") == 1 + dppca_dask.api.DEFAULT_N_ITER
    assert draws.count("laplace") == 2 * dppca_dask.api.DEFAULT_N_ITER


# -- the switch -----------------------------------------------------------------------------------------------


def test_default_is_float_unless_configured() -> None:
    assert DEFAULT_SAMPLER == "float"
    assert default_sampler() == "float"
    assert NoiseSource.from_entropy().sampler == "float"


def test_explicit_sampler_argument(seed: int) -> None:
    hardened = NoiseSource.from_entropy("hardened")
    assert hardened.sampler == "hardened" and hardened.private
    assert "hardened" in hardened.description and "hardened" in repr(hardened)
    assert NoiseSource.from_entropy("float").sampler == "float"
    assert NoiseSource.from_entropy(" Hardened ").sampler == "hardened"


def test_environment_variable_sets_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SAMPLER_ENV, "hardened")
    assert default_sampler() == "hardened"
    assert NoiseSource.from_entropy().sampler == "hardened"
    assert NoiseSource.from_entropy("float").sampler == "float"  # an explicit argument wins
    monkeypatch.setenv(SAMPLER_ENV, "")
    assert default_sampler() == DEFAULT_SAMPLER


def test_dask_config_sets_the_default_and_beats_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SAMPLER_ENV, "float")
    with dask.config.set({SAMPLER_CONFIG_KEY: "hardened"}):
        assert default_sampler() == "hardened"
        assert NoiseSource.from_entropy().sampler == "hardened"
    assert default_sampler() == "float"


def test_bad_settings_are_refused(monkeypatch: pytest.MonkeyPatch, seed: int) -> None:
    monkeypatch.setenv(SAMPLER_ENV, "secure")
    with pytest.raises(InvalidParameterError, match=f"the environment variable {SAMPLER_ENV} must be one of"):
        NoiseSource.from_entropy()
    monkeypatch.delenv(SAMPLER_ENV)
    with dask.config.set({SAMPLER_CONFIG_KEY: 3}):
        with pytest.raises(InvalidParameterError, match="the dask config key 'dppca_dask.noise_sampler'"):
            default_sampler()
    with pytest.raises(InvalidParameterError, match="sampler must be one of 'hardened', 'float'; got 'exact'"):
        NoiseSource.from_entropy("exact")
    with pytest.raises(InvalidParameterError, match="sampler must be one of"):
        NoiseSource(np.random.default_rng(seed), private=False, sampler="opendp")


def test_seeded_sources_stay_float_and_reproducible(monkeypatch: pytest.MonkeyPatch, seed: int) -> None:
    monkeypatch.setenv(SAMPLER_ENV, "hardened")
    with pytest.warns(NotPrivateWarning):
        a = NoiseSource.from_seed(seed)
    with pytest.warns(NotPrivateWarning):
        b = NoiseSource.from_seed(seed, "float")
    assert a.sampler == b.sampler == "float"
    with a.release("x"):
        x = a.gaussian(1.0, size=4)
    with b.release("x"):
        y = b.gaussian(1.0, size=4)
    np.testing.assert_array_equal(x, y)


def test_seeded_hardened_source_is_refused(seed: int) -> None:
    with pytest.raises(InvalidParameterError, match="sampler='hardened' cannot be seeded"):
        NoiseSource.from_seed(seed, "hardened")


# -- the SVT's comparison in exact arithmetic -----------------------------------------------------------------


def _rounded_first_below(counts: list[float], cutoff: float, rho: float, nu: list[float]) -> int | None:
    """The comparison as two rounded float sums (what the SVT must not do)."""
    below = np.flatnonzero(np.asarray(counts) + np.asarray(nu) <= cutoff + rho)
    return int(below[0]) if below.size else None


def test_svt_decision_is_exact_where_float_sums_round_the_wrong_way() -> None:
    from dppca_dask.mechanisms import svt_first_below

    # F + ν = 2^53 + 1 exactly (> c + ρ = 2^53 + 0.75), but float64 has a step of 2 there: both sums round to
    # 2^53, so the rounded comparison says "below" and the exact one does not.
    counts, nu = [2.0**53], [1.0]
    cutoff, rho = 2.0**53, 0.75
    assert _rounded_first_below(counts, cutoff, rho, nu) == 0
    assert svt_first_below(counts, cutoff=cutoff, threshold_noise=rho, query_noise=nu) is None
    # a tie is below; later queries do not matter; none below gives None
    assert svt_first_below([5.0, 3.0, 1.0], cutoff=3.0, threshold_noise=0.0, query_noise=[0.0, 0.0, 0.0]) == 1
    assert svt_first_below([5.0, 4.0], cutoff=1.0, threshold_noise=0.5, query_noise=[0.25, -2.0]) is None
    assert svt_first_below([1e-300], cutoff=5e-324, threshold_noise=0.0, query_noise=[-1e-300]) == 0


def test_svt_decision_agrees_with_float_comparisons_away_from_rounding(rng: np.random.Generator) -> None:
    from dppca_dask.mechanisms import svt_first_below

    for _ in range(200):
        counts = np.sort(rng.integers(0, 1000, 20).astype(float))[::-1]
        nu = rng.laplace(0, 8, 20)
        rho = float(rng.laplace(0, 4))
        assert svt_first_below(counts, cutoff=300.0, threshold_noise=rho, query_noise=nu) == _rounded_first_below(
            list(counts), 300.0, rho, list(nu))


def test_svt_decision_rejects_mismatched_shapes() -> None:
    from dppca_dask.mechanisms import svt_first_below

    with pytest.raises(InvalidParameterError, match="same length; got shapes"):
        svt_first_below([1.0, 2.0], cutoff=0.0, threshold_noise=0.0, query_noise=[0.0])


def test_a_missing_opendp_is_reported_before_any_noise(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from dppca_dask.errors import MissingExtraError
    from dppca_dask.mechanisms import hardened

    monkeypatch.setattr(hardened, "_opendp", None)
    monkeypatch.setitem(sys.modules, "opendp.prelude", None)  # makes `import opendp.prelude` fail
    with pytest.raises(MissingExtraError, match="hardened sampling needs the 'opendp' package"):
        NoiseSource.from_entropy("hardened")
    assert NoiseSource.from_entropy("float").sampler == "float"
