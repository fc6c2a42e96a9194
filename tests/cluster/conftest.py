"""Tests that need a real scheduler and two workers on loopback (see ``_local_cluster``; its fixtures
``loopback_cluster`` and ``loopback_tls_cluster`` are imported by ``tests/conftest.py``, one cluster of each kind for
the whole session)."""

from __future__ import annotations

import sys
from pathlib import Path

# The helper module sits beside this file; make it importable whatever pytest's import mode.
_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
