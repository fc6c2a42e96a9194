"""Hardt & Roth's mechanisms: private power iteration (``pca`` and ``lowrank``), private find-and-project and
randomized response (``lowrank``).

Papers and specs
----------------
- Hardt & Roth, *Beyond worst-case analysis in private singular vector computation* (STOC 2013): private power
  iteration with a public coherence bound C (Fig. 2), rank k by deflation (Fig. 3), the C-doubling wrapper
  (Remark 4.5). Implementation spec ``specs/seed000.md``: "seed 000" in this package's comments, whose "spec §"
  references are to it.
- Hardt & Roth, *Beating randomized response on incoherent matrices* (STOC 2012): the private range finder
  (Fig. 2), the private projection (Fig. 3), find-and-project (Fig. 4) and the paper's baseline, randomized
  response. Implementation spec ``specs/seed003.md`` ("seed 003").

Mechanisms (registered by :mod:`dppca_dask.methods`)
----------------------------------------------------
- ``private-power``: entry ``pca`` (:mod:`~dppca_dask.methods.hardt_roth.pca_mechanism`) and entry ``lowrank``;
  private for one entry of the store changing by at most ``entry_bound``, not for a row.
- ``private-low-rank`` (``lowrank``'s default) and ``randomized-response``: entry ``lowrank``
  (:mod:`~dppca_dask.methods.hardt_roth.lowrank_mechanisms`); private for one row changing by a vector of L2 norm
  at most ``row_change_bound``.

Modules, in reading order
-------------------------
1. ``relations``: the neighbouring relations the privacy reports state.
2. ``multipliers``: what both calibrations share: the checks of their arguments, the Gaussian mechanism's
   multiplier (textbook, paper, analytic) and the search for the smallest multiplier the PLD accountant puts at the
   target.
3. ``power_calibration``: seed 000's constants (Fig. 2's σ, Fig. 3's split) and ``calibrate_private_power``.
4. ``low_rank_calibration``: seed 003's constants (ρ₁, ρ₂, randomized response's σ) and
   ``calibrate_private_low_rank``.
5. ``requests``: the family's passes over the partitions, each registered with the coordinator with its kernel
   (the kernels themselves, free of Dask, are :mod:`dppca_dask.kernels.hardt_roth`).
6. ``power_iteration``: private power iteration as a generator of requests, its C-doubling ladder and the
   calibration a run on a store of a public shape uses.
7. ``find_and_project``: private find-and-project as a generator of requests.
8. ``randomized_response``: the baseline (input perturbation, then an exact truncated SVD) as a generator.
9. ``linalg``: post-processing on released factors (truncated SVD, rank-r truncation, pruning).
10. ``lowrank_plan``: every parameter of :func:`dppca_dask.lowrank` checked and a run planned (relation, constants,
    DpEvents) from public values only.
11. ``pca_mechanism`` and ``lowrank_mechanisms``: the registry entries (validation and planning per mechanism).
12. ``entry``: the family's steps of :func:`dppca_dask.lowrank` (its run's generator, the released factors, the
    report).

Outside this package: the entry points :func:`dppca_dask.lowrank` and :func:`dppca_dask.pca`, the noise primitives
(:mod:`dppca_dask.mechanisms`) and the composition of the events (:mod:`dppca_dask.accounting`).

Errata decided
--------------
- ``calibration="standard"`` (the default) calibrates every mechanism to its target (ε, δ) with the PLD accountant,
  the report's own code, which then states ε within 0.5% of the target. ``calibration="paper"`` keeps the papers'
  constants as printed, for reproduction; the report states what they achieve, which for seed 003 falls short of
  the target (Thm 2.6's Gaussian constant misses a factor 2, spec 003 erratum 3; Fig. 2's ρ misses
  ``sqrt(ln(1/δ))``, erratum 4).
- Seed 000: Fig. 2's σ does not follow from the theorems cited but holds by exact Gaussian composition (erratum
  1); T is a public parameter (``n_iter``, default 20), since the paper's ``4·ln σ₁`` depends on the data (and
  should read about ``(4/γ)·ln σ₁``, erratum 2); the release is
  ``B_k = Σ σ̂ᵢvᵢvᵢᵀ`` (erratum 3); deflation by σ̂ > 0 is right only for PSD matrices, so rank k > 1 needs
  ``symmetric=True`` and ``signed_values`` releases Rayleigh quotients for indefinite ones (erratum 4); C is a
  public parameter or searched privately by C-doubling (erratum 5); Fig. 3's split composes above the target,
  stated by ``paper_rank_k_epsilon`` (erratum 6); an asymmetric store runs on its embedding, whose events carry
  the exact sensitivity factor sqrt(2) instead of the paper's group-privacy argument on halved (ε, δ) (erratum
  11); the start vector is normalised (erratum 12).
- Seed 003: the projection onto Y is ``Y(YᵀY)⁻¹Yᵀ`` (erratum 2); pruning zeroes entries with ``|entry| > α``
  (erratum 7) for a public ``prune_alpha`` (erratum 15); the left factor is the analysed W, not Fig. 4's literal
  W' (erratum 12; ``left_factor="pruned"`` gives the literal one); under ``"standard"`` the range finder's
  sensitivity is the exact χ² quantile instead of Lemma 4.1's union bound; ``projection="tight"`` is an extension
  beyond the paper (spec §3.7).
"""
