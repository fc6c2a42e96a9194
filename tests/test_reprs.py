"""Every result type prints a short repr: its type, mechanism, shape, privacy summary and diagnostics in a few
lines, never its arrays (a PCAResult's default dataclass repr was 26,801 characters over 373 lines); in a notebook,
the same facts as a small HTML table (``_repr_html_``), every value escaped."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dppca_dask import load_lowrank, load_result, lowrank, pca

pytestmark = pytest.mark.filterwarnings("ignore::dppca_dask.errors.NotPrivateWarning")

#: The bound every repr meets: a few lines, none of them long.
MAX_LINES, MAX_CHARS = 8, 800


def check_short(text: str, *must: str) -> None:
    lines = text.splitlines()
    assert len(lines) <= MAX_LINES and len(text) <= MAX_CHARS, text
    assert all(len(line) <= 160 for line in lines)
    for word in must:
        assert word in text, (word, text)


@pytest.fixture(scope="module")
def released(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    rng = np.random.default_rng(0)
    rows = rng.standard_normal((2_000, 300)) / np.sqrt(300)
    result = pca(rows, epsilon=1.0, delta=1e-6, n_components=5, mechanism="adaptive-power-block", center=True,
                 client="local", progress=False, seed=0)
    low = lowrank(rows, rank=3, epsilon=1.0, delta=1e-6, client="local", seed=0)
    directory = tmp_path_factory.mktemp("results")
    return {"pca": result, "loaded": load_result(result.save(directory / "pca")), "lowrank": low,
            "loaded_lowrank": load_lowrank(low.save(directory / "lowrank"))}


def test_pca_results_are_short(released: dict[str, Any]) -> None:
    for name in ("pca", "loaded"):
        text = repr(released[name])
        check_short(text, "PCAResult", "adaptive-power-block", "5x300", "privacy:", "diagnostics:",
                    "explained_variance_ratio")


def test_lowrank_results_are_short(released: dict[str, Any]) -> None:
    for name in ("lowrank", "loaded_lowrank"):
        check_short(repr(released[name]), "LowRankResult", "2000x300", "privacy:", "diagnostics:")


def test_tensor_and_topic_results_are_short(released: dict[str, Any]) -> None:
    from dppca_dask.methods.tensor.power import TensorPowerResult
    from dppca_dask.methods.tensor.private import PrivateTensorResult
    from dppca_dask.methods.tensor.rows import RowMomentResult
    from dppca_dask.methods.tensor.topics import TopicResult

    report = released["pca"].privacy
    k, d = 5, 500
    topics = np.full((k, d), 1.0 / d)
    check_short(repr(TopicResult(topics=topics, weights=np.full(k, 0.2), eigenvalues=np.ones(k), privacy=report,
                                 provenance={"big": list(range(10_000))})), "TopicResult", "5 topics", "privacy:")
    check_short(repr(PrivateTensorResult(eigenvalues=np.ones(k), components=np.ones((k, d)), privacy=report,
                                         calibration=None)), "PrivateTensorResult", "privacy:")
    check_short(repr(TensorPowerResult(eigenvalues=np.ones(k), components=np.ones((k, d)), n_queries=40)),
                "TensorPowerResult", "5 eigenpairs")
    check_short(repr(RowMomentResult(eigenvalues=np.ones(k), components=np.ones((k, d)),
                                     thresholds=np.ones((k, 6)), privacy=report, noise_multiplier=1.0)),
                "RowMomentResult", "privacy:")


def check_html(obj: Any, *must: str) -> str:
    """``obj._repr_html_()`` is a small table holding every line of the text repr's facts (escaped as HTML)."""
    import html

    table = obj._repr_html_()
    assert table.startswith('<table class="dppca-dask-result">') and table.endswith("</table>"), table
    assert table.count("<tr>") <= MAX_LINES and len(table) <= 3 * MAX_CHARS, table
    for line in repr(obj).splitlines()[1:]:  # privacy, diagnostics and the extra lines: label and value
        label, _, value = line.strip().partition(": ")
        assert html.escape(label) in table and html.escape(value) in table, (line, table)
    for word in (type(obj).__name__, *must):
        assert word in table, (word, table)
    return table


def test_results_show_the_same_facts_as_a_small_html_table(released: dict[str, Any]) -> None:
    for name in ("pca", "loaded"):
        check_html(released[name], "adaptive-power-block", "5x300 components", "explained_variance_ratio")
    for name in ("lowrank", "loaded_lowrank"):
        check_html(released[name], "private-low-rank", "2000x300 of rank")


def test_tensor_and_topic_results_show_an_html_table(released: dict[str, Any]) -> None:
    from dppca_dask.methods.tensor.power import TensorPowerResult
    from dppca_dask.methods.tensor.private import PrivateTensorResult
    from dppca_dask.methods.tensor.rows import RowMomentResult
    from dppca_dask.methods.tensor.topics import TopicResult

    report = released["pca"].privacy
    k, d = 5, 500
    check_html(TopicResult(topics=np.full((k, d), 1.0 / d), weights=np.full(k, 0.2), eigenvalues=np.ones(k),
                           privacy=report, provenance={}), "5 topics over 500 words", "topics")
    check_html(PrivateTensorResult(eigenvalues=np.ones(k), components=np.ones((k, d)), privacy=report,
                                   calibration=None), "5 eigenpairs")
    check_html(TensorPowerResult(eigenvalues=np.ones(k), components=np.ones((k, d)), n_queries=40),
               "40 query batches")
    check_html(RowMomentResult(eigenvalues=np.ones(k), components=np.ones((k, d)), thresholds=np.ones((k, 6)),
                               privacy=report, noise_multiplier=1.0), "5 eigenpairs")


def test_the_html_table_escapes_every_value() -> None:
    from dppca_dask.methods.tensor.topics import TopicResult

    k, d = 2, 4
    privacy = {"private": True, "epsilon": 1.0, "delta": 1e-6, "neighbouring": "<script>alert('x')</script> & more"}
    table = check_html(TopicResult(topics=np.full((k, d), 0.25), weights=np.full(k, 0.5), eigenvalues=np.ones(k),
                                   privacy=privacy, provenance={}))
    assert "<script>" not in table and "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt; &amp; more" in table
