"""Partitions of stores in object storage fetched ahead: while the kernel works on one partition, the next ones of
the same process are on their way.

Out of core, each step re-reads every partition, and a worker reads the same partitions every step (the coordinator
places partition ``i`` on worker ``i mod W``, and asks each worker to take its partitions in the order of their
indices). So each process learns, per store, which partitions it reads (its own: a set of public partition
indices, never anything about the data) and, when it reads one, requests the next ones of its own that it has not
read yet in this step, in index order after the current one; in the first step, before it knows them, it guesses
from the stride between its last two reads (``i + stride``, after the last partition the first of its own:
``i mod stride``). Once every partition of its own was read, the first ones of the next step are requested (a
process that reads only one partition of a store has nothing to fetch ahead).

Memory is bounded: at most :data:`DEPTH` partitions per store are held ahead in a process, beside the one being
worked on. A partition fetched ahead that the plan no longer names (another worker took it) is dropped; one whose
fetch failed is fetched again when it is needed, where the error is reported. What is requested, and when, follows
from the partition indices a process was given and the partition table, never from the values.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["DEPTH", "ReadAhead"]

#: Partitions held ahead per store and process, beside the one being worked on.
DEPTH = 2

#: ``fetch(index, wait)``: partition ``index``'s arrays (``wait=True``) or a future of them (``wait=False``).
Fetch = Callable[[int, bool], Any]


@dataclass
class _Plan:
    own: set[int] = field(default_factory=set)
    """Partitions this process has read (its own)."""
    done: set[int] = field(default_factory=set)
    """Partitions read in the current step (a partition read again starts the next step)."""
    held: dict[int, Any] = field(default_factory=dict)
    """Partition index -> future of its fetch."""
    last: int | None = None


class ReadAhead:
    """The read-ahead of one process (workers of a cluster each have their own), for every store it reads."""

    def __init__(self, depth: int = DEPTH) -> None:
        self.depth = depth
        self._lock = threading.Lock()
        self._plans: dict[Any, _Plan] = {}

    def held(self, key: Any) -> list[int]:
        """The partitions of store ``key`` fetched (or being fetched) ahead, in index order."""
        with self._lock:
            plan = self._plans.get(key)
            return sorted(plan.held) if plan is not None else []

    def fetch(self, key: Any, index: int, n: int, fetch: Fetch) -> Any:
        """Partition ``index`` (of ``n``) of store ``key``: the one fetched ahead when it is, else fetched now;
        then the next ones of this process requested."""
        with self._lock:
            plan = self._plans.setdefault(key, _Plan())
            if index in plan.done:
                plan.done = set()
            plan.done.add(index)
            plan.own.add(index)
            stride = index - plan.last if plan.last is not None and index > plan.last else 0
            plan.last = index
            future = plan.held.pop(index, None)
        current = None
        if future is not None:
            try:
                current = future.result()
            except Exception:  # fetched again below, where an error is reported
                current = None
        if current is None:
            current = fetch(index, True)
        self._ahead(plan, index, n, stride, fetch)
        return current

    def _ahead(self, plan: _Plan, index: int, n: int, stride: int, fetch: Fetch) -> None:
        with self._lock:
            rest = sorted(plan.own - plan.done, key=lambda i: (i < index, i))  # after this one, then wrapped
            if not rest and stride:
                guess = index + stride if index + stride < n else index % stride
                rest = [guess] if guess != index and guess not in plan.done else []
            if not rest and plan.done >= plan.own and len(plan.own) > 1:
                rest = sorted(plan.own)  # the next step's first
            wanted = rest[: self.depth]
            for i in [i for i in plan.held if i not in wanted]:
                plan.held.pop(i).cancel()
            missing = [i for i in wanted if i not in plan.held]
        started = {i: fetch(i, False) for i in missing}
        with self._lock:
            plan.held.update(started)

    def clear(self) -> None:
        """Drop every partition held ahead (their fetches cancelled where they have not ended)."""
        with self._lock:
            for plan in self._plans.values():
                for future in plan.held.values():
                    future.cancel()
            self._plans.clear()
