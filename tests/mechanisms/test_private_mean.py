"""The private mean of the centred runs (block power, centred Analyze Gauss, ``auto``): its projection onto the
ball of radius c, and fixed-seed releases equal to those the three runs made before the mean and its projection
had one home (:func:`~dppca_dask.mechanisms.centred.private_mean`). Deterministic (seeded noise)."""

from __future__ import annotations

import numpy as np
import pytest
from dp_accounting import GaussianDpEvent

from dppca_dask.mechanisms.centred import MEAN_SENSITIVITY, private_mean, project_onto_ball
from dppca_dask.mechanisms.testing import AuditingNoiseSource


@pytest.mark.parametrize("radius", [1.0, 2.5])
def test_projection_leaves_the_ball_unchanged(rng: np.random.Generator, radius: float) -> None:
    for scale in (0.0, 0.3, 0.999999):  # the centre, inside, near the sphere
        vector = rng.standard_normal(7)
        vector *= scale * radius / np.linalg.norm(vector)
        np.testing.assert_array_equal(project_onto_ball(vector, radius), vector)
    on_sphere = radius * np.eye(7)[2]  # norm exactly c
    np.testing.assert_array_equal(project_onto_ball(on_sphere, radius), on_sphere)


@pytest.mark.parametrize("radius", [1.0, 2.5])
def test_projection_scales_a_point_outside_to_norm_c(rng: np.random.Generator, radius: float) -> None:
    for scale in (1.000001, 2.0, 1e6):
        vector = rng.standard_normal(7)
        vector *= scale * radius / np.linalg.norm(vector)
        projected = project_onto_ball(vector, radius)
        assert np.linalg.norm(projected) == pytest.approx(radius, rel=1e-15)
        np.testing.assert_allclose(projected, vector * (radius / np.linalg.norm(vector)), rtol=1e-15)  # same direction


#: (seed, Σa', n, c, m) and the mean and count released before the refactoring: the block, centred Analyze Gauss
#: and auto runs each called the unprojected ``private_mean`` and projected inline (``mean * (c / ‖mean‖)`` when
#: ``‖mean‖ > c``). The norm before projection says which cases the projection moved.
RELEASES = [
    ((11, [300.0, -200.0, 100.0, 50.0], 1000, 1.0, 0.5), 0.37726490007835445,
     [0.30008740523211497, -0.19908045880203007, 0.10088726514936952, 0.0496496193947267], 999.7893037381098),
    ((12, [0.4, -0.1, 0.2, 0.3], 3, 1.0, 5.0), 0.733799649086895,
     [0.02434693178742289, 0.5051301047262622, 0.3768269747460315, 0.37511886158333585], 14.446476447430745),
    ((13, [25.0, 10.0, -5.0, 0.0], 40, 2.5, 2.0), 0.9088731672347979,
     [0.8671016668032403, -0.26909392587656505, 0.0405806814651147, 0.011260590331773125], 43.72857412559105),
    ((14, [0.5, 0.5, 0.0, 0.0], 1, 1.0, 5.0), 24.944222632596606,  # projected
     [0.21720730841107672, -0.2576118870923585, -0.44604544344663005, -0.8291565372003217], -1.4977285820251636),
    ((15, [2.0, -1.0, 0.0, 0.5], 2, 2.5, 8.0), 6.373239720430713,  # projected
     [-1.899023757059549, -1.3569461019565145, 0.5500066233076673, -0.7070351906561316], 7.946668520253854),
]


@pytest.mark.parametrize(("case", "norm_before", "expected_mean", "expected_count"), RELEASES)
def test_a_fixed_seed_release_equals_the_earlier_release(case: tuple, norm_before: float,
                                                         expected_mean: list[float], expected_count: float) -> None:
    seed, total, count, bound, multiplier = case
    noise = AuditingNoiseSource(seed)
    mean, noisy_count, event = private_mean(np.array(total), count, row_norm_bound=bound,
                                            noise_multiplier=multiplier, noise=noise, release="mean")
    # the same draw, to the last bit or two: a projected mean is scaled by bound/norm, and numpy releases sum the
    # norm in different orders (numpy 2.4 differs from earlier releases in the last bit on case 14)
    np.testing.assert_allclose(mean, np.array(expected_mean), rtol=4e-16, atol=0)
    assert noisy_count == expected_count
    assert event == GaussianDpEvent(multiplier)
    assert np.linalg.norm(mean) <= bound * (1 + 1e-15)
    if norm_before <= bound:  # the projection moved nothing
        assert np.linalg.norm(mean) == pytest.approx(norm_before, rel=1e-15)
    else:
        assert np.linalg.norm(mean) == pytest.approx(bound, rel=1e-15)
    (record,) = noise.records  # one Gaussian release of (Σa'/c, n) at sensitivity √2: the projection draws nothing
    assert record.release == "mean" and record.sensitivity == MEAN_SENSITIVITY
    np.testing.assert_array_equal(record.exact, np.append(np.array(total) / bound, float(count)))
