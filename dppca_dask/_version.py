"""The package's version, in a module of its own so that the modules that stamp it on their results need not import
the package's ``__init__`` (which imports them back, lazily, for its public names)."""

from __future__ import annotations

__version__ = "0.1.0"
