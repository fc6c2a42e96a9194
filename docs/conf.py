"""Sphinx configuration of the dppca_dask documentation (``make docs`` builds it into build/docs, offline)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
# Examples in docstrings and pages must not pick up a user's cache or start BLAS threads while the site builds.
os.environ.setdefault("OMP_NUM_THREADS", "1")

import dppca_dask  # noqa: E402

project = "dppca_dask"
author = "the dppca_dask authors"
copyright = "the dppca_dask authors"
release = dppca_dask.__version__
version = release

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.doctest",
    "sphinx.ext.mathjax",
    "numpydoc",
]

source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
root_doc = "index"
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store"]

# MyST: Markdown pages with `{include}`, `{eval-rst}` and the colon fences of admonitions.
myst_enable_extensions = ["colon_fence", "deflist", "dollarmath"]
myst_heading_anchors = 3

# autodoc / numpydoc: the API reference is written by hand as explicit directives (no generated stub files).
autodoc_typehints = "none"
autodoc_member_order = "bysource"
autosummary_generate = False
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
numpydoc_xref_param_type = False
numpydoc_validation_checks: set[str] = set()

# No intersphinx: the site builds without the network.
html_theme = "pydata_sphinx_theme"
html_title = f"dppca_dask {release}"
html_static_path: list[str] = []
html_theme_options = {
    "navigation_with_keys": False,
    "show_toc_level": 2,
    "secondary_sidebar_items": ["page-toc"],
}
html_sidebars = {"**": ["sidebar-nav-bs"]}
html_show_sourcelink = False

nitpicky = False
# jobs/README.md (included) highlights a crontab line as `cron`, which Pygments has no lexer for: shown as text.
suppress_warnings = ["misc.highlighting_failure"]
# docs/guide/ holds the topic guides each feature adds (listed by a glob, which must match at least one page:
# guide/files.md is always there).
