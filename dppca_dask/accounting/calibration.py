"""Calibrating noise to a target total (ε, δ), shared by every family: plain Gaussian releases, one common noise
scale for a plan's releases, the privacy figures of reports, the search both calibrations use, and their cache.

The adaptive power method's own calibration (seed 004) lives with its family,
:mod:`dppca_dask.methods.adaptive_power.calibration`, and uses the search and the cache here.

Calibration reads only public parameters (ε, δ, T, k, the budget split), never the data, so its results may be
cached on disk and logged. Every calibration is checked at the end with the same accountant code that builds the
privacy report of the run, and never returns a noise level whose figure exceeds the target.
"""

from __future__ import annotations

import json
import logging
import math
import os
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from dp_accounting import dp_event

from dppca_dask.accounting.composition import (
    Accountant,
    epsilon_for,
    gaussian_delta,
    merged_gaussian_multiplier,
    pld_interval_for,
)
from dppca_dask.errors import CalibrationError, InvalidParameterError

__all__ = [
    "CACHE_DIR_ENV",
    "MIN_PLD_DELTA",
    "cache_path",
    "NoiseScaleCalibration",
    "cached_epsilon_for",
    "calibrate_gaussian",
    "calibrate_noise_scale",
    "clear_memory_cache",
]

log = logging.getLogger(__name__)

#: Environment variable naming the cache directory (default ``~/.cache/dppca_dask``; empty disables the cache).
CACHE_DIR_ENV = "DPPCA_DASK_CACHE_DIR"
_CACHE_FILE = "calibration.json"
#: Bumped whenever the calibration procedure or the PLD grid rule changes, so older cache entries are not reused.
_CALIBRATION_VERSION = 2
#: Relative precision of the calibrated multiplier (the answer is at most this much noisier than needed).
_RTOL = 1e-4
#: The coarse search uses a PLD grid this many times wider than the fine grid of the report.
_COARSE_FACTOR = 10.0
#: No calibrated multiplier exceeds this; a target that needs more is reported as unreachable.
_MAX_MULTIPLIER = 1e7
_MIN_MULTIPLIER = 1e-3

#: Smallest δ the PLD accountant is trusted at: its tail truncation (1e-15 of probability mass, counted
#: pessimistically) makes figures at smaller δ meaningless (a target of 1e-17 gave a multiplier 1,000× too large).
MIN_PLD_DELTA = 1e-14

#: Calibrations made in this process, by cache key (the adaptive power method's:
#: :mod:`dppca_dask.methods.adaptive_power.calibration`); :func:`clear_memory_cache` forgets them.
_memo: dict[str, Any] = {}
_scale_memo: dict[str, NoiseScaleCalibration] = {}
_figure_memo: dict[str, float] = {}
_memo_lock = threading.Lock()


# ----------------------------------------------------------------------------------------------------------
# validation


def _check_target(epsilon: float, delta: float) -> None:
    if not (math.isfinite(epsilon) and epsilon > 0):
        raise InvalidParameterError(f"epsilon must be finite and > 0; got {epsilon}")
    if not (0.0 < delta < 1.0):
        raise InvalidParameterError(f"delta must be in (0, 1); got {delta}; pass e.g. delta=1e-6")


def _check_count(name: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidParameterError(f"{name} must be an integer >= 1; got {value!r}")


# ----------------------------------------------------------------------------------------------------------
# disk cache


def cache_path() -> Path | None:
    """The calibration cache file, or None when caching is disabled (``DPPCA_DASK_CACHE_DIR=""``)."""
    directory = os.environ.get(CACHE_DIR_ENV)
    if directory is None:
        return Path.home() / ".cache" / "dppca_dask" / _CACHE_FILE
    if directory == "":
        return None
    return Path(directory) / _CACHE_FILE


def _dp_accounting_version() -> str:
    try:
        return metadata.version("dp-accounting")
    except metadata.PackageNotFoundError:  # a source checkout without installed metadata
        return "unknown"


def _cache_key(params: dict[str, Any]) -> str:
    keyed = dict(params, dp_accounting=_dp_accounting_version(), procedure=_CALIBRATION_VERSION)
    return json.dumps(keyed, sort_keys=True, separators=(",", ":"))


#: Most bytes the cache file holds: beyond it the entries written longest ago are evicted (a cache of a few
#: hundred calibrations and report figures; one that grew without bound took seconds to re-read on every run).
MAX_CACHE_BYTES = 1 << 20
#: Seconds a writer waits for another process's write of the cache before it skips its own (a cache miss later).
_LOCK_TIMEOUT = 10.0
#: The parsed cache per file, with the (mtime, size) it was read at: re-read only when the file changed.
_file_memo: dict[str, tuple[tuple[int, int], dict[str, Any]]] = {}


def _read_cache(path: Path) -> dict[str, Any]:
    """The cache's entries (a fresh dict the caller may change), ``{}`` when there is none or it is unreadable."""
    try:
        stat = path.stat()
        stamp = (stat.st_mtime_ns, stat.st_size)
        with _memo_lock:
            known = _file_memo.get(str(path))
        if known is not None and known[0] == stamp:
            return dict(known[1])
        with path.open("r", encoding="utf-8") as fh:
            data = json.load(fh)
        if not isinstance(data, dict) or not isinstance(data.get("entries"), dict):
            raise ValueError("not a calibration cache (no 'entries' table)")
        with _memo_lock:
            _file_memo[str(path)] = (stamp, data["entries"])
        return dict(data["entries"])
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        log.warning("ignoring the unreadable calibration cache %s: %s", path, exc)
        return {}


def _make_private_directory(directory: Path) -> None:
    """Create ``directory`` and its missing parents owner-only (0700) whatever the umask; directories that exist
    keep their mode."""
    missing = []
    head = directory.absolute()
    while not head.is_dir():
        missing.append(head)
        if head.parent == head:
            break
        head = head.parent
    for created in reversed(missing):
        try:
            os.mkdir(created, 0o700)
        except FileExistsError:
            if created.is_dir():
                continue  # made meanwhile by another process
            raise
        os.chmod(created, 0o700)  # mkdir's mode passes through the umask


def _entry_size(key: str, value: Any) -> int:
    """The bytes one entry takes in the file as written (json.dump with indent=0): its own object's text, a little
    more than its share."""
    return len(json.dumps({key: value}, indent=0, sort_keys=True))


def _bounded(entries: dict[str, Any], newest: str) -> tuple[dict[str, Any], str] | None:
    """``entries`` and their file text, within :data:`MAX_CACHE_BYTES`: when beyond it, the entries written longest
    ago are evicted down to three quarters of it (so that a full cache evicts once in many writes, not at each);
    ``None`` when the newest entry alone takes more than half of it (it is then not cached)."""
    if _entry_size(newest, entries[newest]) > MAX_CACHE_BYTES // 2:
        return None
    text = json.dumps({"entries": entries}, indent=0, sort_keys=True)
    if len(text) <= MAX_CACHE_BYTES:
        return entries, text

    def written(key: str) -> float:
        value = entries[key]
        stamp = value.get("written") if isinstance(value, dict) else None
        return float(stamp) if isinstance(stamp, (int, float)) else 0.0

    total = sum(_entry_size(k, v) for k, v in entries.items()) + 16
    kept = dict(entries)
    for key in sorted((k for k in entries if k != newest), key=written):
        if total <= MAX_CACHE_BYTES * 3 // 4:
            break
        total -= _entry_size(key, entries[key])
        del kept[key]
    return kept, json.dumps({"entries": kept}, indent=0, sort_keys=True)


def _write_cache(path: Path, key: str, value: dict[str, Any]) -> None:
    """Add ``key`` to the cache file: under a lock across processes (read, change, replace), in an owner-only
    directory, evicting the oldest entries beyond :data:`MAX_CACHE_BYTES`."""
    from filelock import FileLock, Timeout

    try:
        _make_private_directory(path.parent)
        with FileLock(str(path) + ".lock", timeout=_LOCK_TIMEOUT, mode=0o600):
            entries = _read_cache(path)
            entries[key] = {**value, "written": time.time()}
            bounded = _bounded(entries, key)
            if bounded is None:
                return
            fd, tmp = tempfile.mkstemp(prefix=".calibration-", suffix=".json", dir=path.parent)
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as fh:
                    fh.write(bounded[1])
                os.replace(tmp, path)
                stat = path.stat()
                with _memo_lock:  # what was just written need not be parsed again
                    _file_memo[str(path)] = ((stat.st_mtime_ns, stat.st_size), bounded[0])
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
    except Timeout:
        log.warning("the calibration cache %s is locked by another process; this entry is not cached", path)
    except OSError as exc:
        log.warning("could not write the calibration cache %s: %s", path, exc)


# ----------------------------------------------------------------------------------------------------------
# search


class _Unreachable(Exception):
    pass


def _bracket(
    achieved: Callable[[float], float], target: float, guess: float, step: float
) -> tuple[float, float, float, float]:
    """``lo < hi`` with ``achieved(lo) > target ≥ achieved(hi)``, searched from ``guess`` in factors of ``step``.

    Returns ``(lo, achieved(lo), hi, achieved(hi))``; ``lo`` is 0 (value ∞) when even ``_MIN_MULTIPLIER`` meets
    the target. Raises ``_Unreachable`` when ``_MAX_MULTIPLIER`` does not.
    """
    hi = guess
    value_hi = achieved(hi)
    while value_hi > target:
        if hi >= _MAX_MULTIPLIER:
            raise _Unreachable
        hi = min(hi * step, _MAX_MULTIPLIER)
        value_hi = achieved(hi)
    lo = hi / step
    value_lo = achieved(lo)
    while value_lo <= target:
        hi, value_hi = lo, value_lo
        if lo <= _MIN_MULTIPLIER:
            return 0.0, math.inf, hi, value_hi
        lo = max(lo / step, _MIN_MULTIPLIER)
        value_lo = achieved(lo)
    return lo, value_lo, hi, value_hi


def _solve(
    achieved: Callable[[float], float],
    target: float,
    bracket: tuple[float, float, float, float],
    rtol: float,
) -> tuple[float, float]:
    """Shrink a bracket from :func:`_bracket` until ``hi/lo ≤ 1 + rtol``; return ``(hi, achieved(hi))``.

    Safeguarded regula falsi in ``log m``: ε is smooth and nearly linear in ``log m`` over a small bracket, so
    an interpolated root, nudged half a tolerance to the feasible side, usually lands within the tolerance in one
    or two evaluations; the opposite end is then probed at ``1 + rtol`` from it. A step that fails to halve the
    bracket is followed by a bisection step. Only evaluated points enter the bracket, so ``achieved(hi)`` is
    always a computed value ``≤ target``.
    """
    lo, value_lo, hi, value_hi = bracket
    if lo <= 0.0:
        return hi, value_hi
    bisect_next = False
    while hi / lo > 1.0 + rtol:
        width = math.log(hi / lo)
        if bisect_next or not math.isfinite(value_lo) or value_lo <= value_hi:
            candidate = math.sqrt(lo * hi)
        else:
            fraction = (value_lo - target) / (value_lo - value_hi)
            candidate = lo * math.exp(fraction * width) * (1.0 + 0.5 * rtol)
            candidate = min(max(candidate, lo * (1.0 + 0.25 * rtol)), hi / (1.0 + 0.25 * rtol))
        value = achieved(candidate)
        if value <= target:
            hi, value_hi = candidate, value
            probe = hi / (1.0 + rtol)
            if probe > lo:
                value = achieved(probe)
                if value <= target:
                    hi, value_hi = probe, value
                else:
                    lo, value_lo = probe, value
        else:
            lo, value_lo = candidate, value
            probe = lo * (1.0 + rtol)
            if probe < hi:
                value = achieved(probe)
                if value <= target:
                    hi, value_hi = probe, value
                else:
                    lo, value_lo = probe, value
        bisect_next = math.log(hi / lo) > 0.5 * width
    return hi, value_hi


def _figure_key(events: list[Any], delta: float, accountant: str) -> str | None:
    """The cache key of a report figure: the events' exact JSON form, δ and the accountant (``None`` when an event
    has no JSON form, which is then never cached)."""
    from dppca_dask.accounting.events import event_to_json

    try:
        described = [event_to_json(e) for e in events]
    except InvalidParameterError:
        return None
    return _cache_key({"figure": accountant, "delta": float(delta), "events": described})


def _entry_check(key: str, value: float) -> str:
    """A checksum that ties a figure to its key: a damaged or misplaced entry does not match it."""
    import hashlib

    return hashlib.sha256(f"{key}\n{value!r}".encode()).hexdigest()


def cached_epsilon_for(events: Any, *, delta: float, accountant: Accountant = "pld") -> float:
    """:func:`~dppca_dask.accounting.composition.epsilon_for`, remembered in this process and in the on-disk cache.

    A figure is a function of public inputs only (the events' exact parameters, δ, the accountant, the
    dp-accounting version), so, like a calibration, it may be cached: a privacy report then needs no PLD of its
    own when the same run (same parameters) was reported before. The value is exactly the one ``epsilon_for``
    returns (stored as its shortest round-trip repr); each disk entry carries a checksum of its key and value,
    so a damaged entry is recomputed. The cache file is as trusted as the installed package (it lives in the
    user's own cache directory): the calibration's check of a cached noise multiplier does not use it.
    """
    event_list = list(events) if not isinstance(events, dp_event.DpEvent) else [events]
    key = _figure_key(event_list, delta, accountant)
    if key is None:
        return epsilon_for(event_list, delta=delta, accountant=accountant)
    with _memo_lock:
        if key in _figure_memo:
            return _figure_memo[key]
    path = cache_path()
    if path is not None:
        entry = _read_cache(path).get(key)
        if isinstance(entry, dict):
            raw = entry.get("epsilon")
            value = math.inf if raw == "inf" else raw
            if isinstance(value, float) and value >= 0 and entry.get("check") == _entry_check(key, value):
                with _memo_lock:
                    _figure_memo[key] = value
                return value
            log.warning("ignoring a malformed privacy figure cache entry: %s", key)
    value = float(epsilon_for(event_list, delta=delta, accountant=accountant))
    with _memo_lock:
        _figure_memo[key] = value
    if path is not None and not math.isnan(value):
        _write_cache(path, key, {"epsilon": "inf" if math.isinf(value) else value,
                                 "check": _entry_check(key, value)})
    return value


def clear_memory_cache() -> None:
    """Forget calibrations and privacy figures kept in this process (the disk cache is untouched)."""
    with _memo_lock:
        _memo.clear()
        _scale_memo.clear()
        _figure_memo.clear()


# ----------------------------------------------------------------------------------------------------------
# joint calibration of several releases


@dataclass(frozen=True, slots=True)
class NoiseScaleCalibration:
    """One common factor on the noise of every release of a run, so that together they meet a target (ε, δ)."""

    scale: float
    """s: every Gaussian noise multiplier is multiplied by s and every pure ε divided by it (so every noise
    scale, Gaussian or Laplace, is multiplied by s)."""
    achieved_epsilon: float
    """ε at the target δ of the run's events at ``scale`` by the accountant (≤ the target, checked)."""
    from_cache: bool = False
    """Whether the scale was read from the on-disk cache (and re-checked) rather than searched."""


def calibrate_noise_scale(
    events_at: Callable[[float], Sequence[dp_event.DpEvent]],
    *,
    epsilon: float,
    delta: float,
    accountant: Accountant = "pld",
    cache: bool = True,
) -> NoiseScaleCalibration:
    """The smallest common noise scale s (to a relative 1e-4) at which a run's releases together meet (ε, δ).

    Parameters
    ----------
    events_at
        ``events_at(s)``: the DpEvents the whole run emits when every noise scale of its releases is ``s`` times
        its base value; the accountant's ε must not increase with s (true when Gaussian multipliers grow and pure
        ε shrink with s). A pure function of public parameters.
    epsilon, delta
        Target total guarantee.
    accountant
        ``"pld"`` (default; the accountant of the privacy report) or ``"rdp"``.
    cache
        Read and write the in-process memo and the on-disk calibration cache (keyed by the events at ``s = 1``
        and ``s = 2``, the target and the accountant; a cached scale is re-checked before use).

    Returns
    -------
    NoiseScaleCalibration
        ``scale`` and the achieved ε, which is at most ``epsilon``: only a scale whose events were evaluated by
        :func:`~dppca_dask.accounting.epsilon_for` (the privacy report's own call) at or below the target is
        returned.

    Raises
    ------
    CalibrationError
        When no scale up to 1e7 meets the target.

    Notes
    -----
    Privacy contract: the planners split a budget by public shares (each release calibrated to its share, the
    parts composing to at most the total by basic composition) and then multiply every noise scale by one common
    s, found here, so that the PLD composition of all the releases is the total itself: the shares fix the
    releases' relative noise, the accountant their common level. Searched as the adaptive power multiplier is
    (:func:`~dppca_dask.methods.adaptive_power.calibration.calibrate_adaptive_power`): a safeguarded regula falsi in ``log s`` on a coarse PLD grid, then on the
    report's grid around its answer.
    """
    from dppca_dask.accounting.events import event_to_json

    _check_target(epsilon, delta)
    if accountant not in ("pld", "rdp"):
        raise InvalidParameterError(f"accountant must be 'pld' or 'rdp'; got {accountant!r}")
    described = {str(s): [event_to_json(e) for e in events_at(s)] for s in (1.0, 2.0)}
    key = _cache_key({"kind": "noise_scale", "epsilon": float(epsilon), "delta": float(delta),
                      "accountant": accountant, "rtol": _RTOL, "events": described})
    if cache:
        with _memo_lock:
            memo = _scale_memo.get(key)
        if memo is not None:
            return memo

    def fine(s: float) -> float:
        return epsilon_for(list(events_at(s)), delta=delta, accountant=accountant)

    def remember(out: NoiseScaleCalibration) -> NoiseScaleCalibration:
        if cache:
            with _memo_lock:
                _scale_memo[key] = out
        return out

    path = cache_path() if cache else None
    if path is not None:
        entry = _read_cache(path).get(key)
        scale = entry.get("scale") if isinstance(entry, dict) else None
        if isinstance(scale, float) and math.isfinite(scale) and scale > 0:
            achieved = fine(scale)
            if achieved <= epsilon:
                return remember(NoiseScaleCalibration(scale, achieved, True))
            log.warning("ignoring a calibration cache entry that does not meet its target: %s", key)
        elif entry is not None:
            log.warning("ignoring a malformed calibration cache entry: %s", key)
    try:
        scale, achieved = _search_scale(events_at, fine, epsilon, delta, accountant)
    except _Unreachable:
        raise CalibrationError(
            f"no common noise scale up to {_MAX_MULTIPLIER:g} meets epsilon={epsilon:g} at delta={delta:g}; "
            "lower the shares of the pure-epsilon releases or raise epsilon"
        ) from None
    if not achieved <= epsilon:  # the check: ``achieved`` was computed for exactly this scale
        raise CalibrationError(
            f"calibration failed its check: epsilon={achieved} exceeds the target {epsilon}; please report this"
        )
    out = remember(NoiseScaleCalibration(scale, achieved, False))
    if path is not None:
        _write_cache(path, key, {"scale": scale, "achieved": achieved})
    return out


def _search_scale(
    events_at: Callable[[float], Sequence[dp_event.DpEvent]], fine: Callable[[float], float], epsilon: float,
    delta: float, accountant: Accountant,
) -> tuple[float, float]:
    memo: dict[float, float] = {}

    def fine_memo(s: float) -> float:
        if s not in memo:
            memo[s] = fine(s)
        return memo[s]

    if accountant == "rdp":
        return _solve(fine_memo, epsilon, _bracket(fine_memo, epsilon, 1.0, 2.0), _RTOL)
    coarse_memo: dict[float, float] = {}

    def coarse(s: float) -> float:
        if s not in coarse_memo:
            events = list(events_at(s))
            interval = min(1.0, _COARSE_FACTOR * pld_interval_for(events))
            coarse_memo[s] = epsilon_for(events, delta=delta, accountant=accountant,
                                         value_discretization_interval=interval)
        return coarse_memo[s]

    s_coarse, _ = _solve(coarse, epsilon, _bracket(coarse, epsilon, 1.0, 2.0), 1e-3)
    return _solve(fine_memo, epsilon, _bracket(fine_memo, epsilon, s_coarse, 1.003), _RTOL)


# ----------------------------------------------------------------------------------------------------------
# Gaussian


def calibrate_gaussian(*, epsilon: float, delta: float, count: int = 1) -> float:
    """Smallest noise multiplier for ``count`` Gaussian releases to be (ε, δ)-DP together.

    Parameters
    ----------
    epsilon, delta
        Target total guarantee, ``epsilon > 0``, ``0 < delta < 1``.
    count
        Number of releases, each with the returned multiplier (adaptive composition).

    Returns
    -------
    float
        m such that ``count`` Gaussians of multiplier m are (ε, δ)-DP; checked directly with the exact
        δ(ε) before it is returned, so it never overshoots.

    Notes
    -----
    Privacy contract: for any neighbouring relation under which each release's L2 sensitivity is the one the
    multiplier is applied to. ``count`` Gaussians of multiplier m compose exactly to one of multiplier
    ``m/sqrt(count)``, so m is ``sqrt(count)`` times the analytic Gaussian multiplier of Balle & Wang (2018,
    Theorem 8) — the exact privacy profile, which the PLD accountant reproduces from above — as computed by
    ``dp_accounting.gaussian_mechanism.get_sigma_gaussian``. The answer carries a relative margin of 1e-9 so that the report's ε prints at or below the target. Used by Analyze Gauss
    (Dwork–Talwar–Thakurta–Zhang 2014) and other one-shot baselines.
    """
    _check_target(epsilon, delta)
    _check_count("count", count)
    from dp_accounting.gaussian_mechanism import get_sigma_gaussian

    # dp-accounting's exact calibration (Balle & Wang's δ(ε) solved by Brent's method), then a relative margin.
    sigma = float(get_sigma_gaussian(epsilon, delta, tol=1e-15)) * (1.0 + 1e-9)
    multiplier = sigma * math.sqrt(count)
    while gaussian_delta(merged_gaussian_multiplier([(multiplier, count)]), epsilon) > delta:
        multiplier *= 1.0 + 1e-9
    return float(multiplier)
