"""Fixtures for tests that need a real scheduler and two workers on loopback (see ``_local_cluster``)."""

from __future__ import annotations

import sys
from pathlib import Path

# The helper module sits beside this file; make it importable whatever pytest's import mode.
_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

from _local_cluster import loopback_cluster, loopback_tls_cluster  # noqa: E402,F401  (pytest fixtures)
