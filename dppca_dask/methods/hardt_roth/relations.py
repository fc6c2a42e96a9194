"""The neighbouring relations of the Hardt–Roth mechanisms, as the privacy report states them.

Private power iteration (seed 000) is private for one entry of the store changing by at most a public bound b;
private find-and-project and randomized response (seed 003) for one row changing by a vector of L2 norm at most s.
"""

from __future__ import annotations

from dppca_dask.accounting.report import ENTRY_CHANGE, ROW_CHANGE

__all__ = ["entry_relation", "row_change_relation"]


def entry_relation(entry_bound: float) -> str:
    """The entry-level neighbouring relation for a public bound b (seed 000, Def. 2.1 scaled by b)."""
    if entry_bound == 1.0:
        return ENTRY_CHANGE
    return f"one entry changes by at most {entry_bound:g}"


def row_change_relation(row_change_bound: float) -> str:
    """The row-change relation of seed 003 (Def. 2.1) for a public L2 bound s."""
    if row_change_bound == 1.0:
        return ROW_CHANGE
    return f"one row changes by a vector of L2 norm at most {row_change_bound:g}"

