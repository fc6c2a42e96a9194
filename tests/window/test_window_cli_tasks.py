"""``dppca-dask window``: every task from the CLI (sparse and non-negative PCA, directional variance), the histogram
and JL parameters as options, and options that do not apply refused with exit 2 before anything is read."""

from __future__ import annotations

import json

import numpy as np
import pytest

from dppca_dask.cli import main
from window_data import D


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _window(store, *argv: str) -> list[str]:  # noqa: ANN001
    return ["window", store.path, "--last", "3D", "--epsilon", "1", "--delta", "1e-6", "--scheduler", "local",
            *argv]


def test_structured_pca_tasks_from_the_cli(daily_store, capsys):
    store = daily_store(4)
    code, out, err = run(capsys, *_window(store, "--task", "sparse-pca", "--nonzeros", "2", "--n-components", "2",
                                          "--seed", "1", "--json"))
    assert code == 0, err
    sparse = np.asarray(json.loads(out)["components"])
    assert sparse.shape == (2, D) and (np.count_nonzero(sparse, axis=1) <= 2).all()
    assert np.allclose(np.linalg.norm(sparse, axis=1), 1.0)
    code, out, err = run(capsys, *_window(store, "--task", "nonnegative-pca", "--n-components", "2", "--seed", "1",
                                          "--json"))
    assert code == 0, err
    nonneg = np.asarray(json.loads(out)["components"])
    assert nonneg.shape == (2, D) and (nonneg >= 0).all() and np.allclose(nonneg @ nonneg.T, np.eye(2), atol=1e-12)
    code, out, err = run(capsys, *_window(store, "--task", "nonnegative-pca", "--seed", "1"))
    assert code == 0, err
    assert "component 0: largest coordinates" in out and "component 1" not in out


def test_directional_variance_from_the_cli(daily_store, tmp_path, capsys):
    """The variance along e_0 is the released covariance's first diagonal entry (one seeded release); a file holds
    several directions."""
    store = daily_store(4)
    code, out, err = run(capsys, *_window(store, "--seed", "3", "--json"))
    assert code == 0, err
    cov = np.asarray(json.loads(out)["covariance"])
    unit = ",".join(["1"] + ["0"] * (D - 1))
    code, out, err = run(capsys, *_window(store, "--task", "directional-variance", "--direction", unit, "--seed",
                                          "3", "--json"))
    assert code == 0, err
    assert json.loads(out)["directional_variance"] == pytest.approx([cov[0, 0]])
    (tmp_path / "dirs.txt").write_text("1 0 0 0 0 0\n0,1,0,0,0,0\n")
    code, out, err = run(capsys, *_window(store, "--task", "directional-variance", "--direction",
                                          str(tmp_path / "dirs.txt"), "--seed", "3"))
    assert code == 0, err
    assert "directional variance: " in out
    values = [float(v) for v in out.split("directional variance: ")[1].splitlines()[0].split()]
    assert values == pytest.approx([cov[0, 0], cov[1, 1]], rel=1e-5)


@pytest.mark.parametrize(("argv", "message"), [
    (["--task", "pca", "--ridge", "1"], "--ridge applies to --task regression only"),
    (["--n-components", "2"], "--n-components applies to --task pca, sparse-pca or nonnegative-pca only"),
    (["--task", "regression", "--n-components", "2"], "--n-components applies to"),
    (["--nonzeros", "2"], "--nonzeros applies to --task sparse-pca only"),
    (["--task", "sparse-pca"], "--task sparse-pca needs --nonzeros"),
    (["--task", "sparse-pca", "--nonzeros", "9"], "nonzeros must be an integer in [1, 6]"),
    (["--direction", "1,0"], "--direction applies to --task directional-variance only"),
    (["--task", "directional-variance"], "needs --direction"),
    (["--task", "directional-variance", "--direction", "1,0"], "finite directions of 6 numbers"),
    (["--task", "directional-variance", "--direction", "a,b"], "comma-separated numbers or a file"),
    (["--tau-rule", "alg7"], "--tau-rule applies to --release wishart only"),
    (["--sketch-rows", "4"], "--sketch-rows applies to --release jl only"),
    (["--rank-bound", "2", "--release", "wishart"], "--rank-bound applies to --release jl only"),
    (["--eta", "0.3"], "--eta applies to --structure spectral-histogram only"),
    (["--regularizer", "5"], "--regularizer applies to --structure spectral-histogram only"),
    (["--tree", "--horizon", "8", "--rank-bound", "2"], "--rank-bound do not apply"),
])
def test_options_that_do_not_apply_exit_2_before_anything_is_charged(daily_store, tmp_path, capsys, argv, message):
    store = daily_store(4)
    ledger = str(tmp_path / "ledger.sqlite")
    assert main(["budget", "init", "--ledger", ledger, "--dataset", "nightly", "--total-epsilon", "10",
                 "--total-delta", "1e-5"]) == 0
    capsys.readouterr()
    code, out, err = run(capsys, *_window(store, "--ledger", ledger, "--dataset", "nightly", "--job-id", "j-1",
                                          *argv))
    assert code == 2 and out == "" and message in err, err
    from dppca_dask.ledger import Ledger

    assert list(Ledger(ledger).find("j-1")) == []


def test_histogram_and_jl_parameters_pass_through(daily_store, capsys):
    """``--eta`` shapes the saved spectral histogram (its checkpoints are kept by partition counts, which η sets): a
    release with another η is refused naming the stored value, and passing that value goes on, at another epsilon
    too; ``--rank-bound`` and ``--tau-rule`` reach the calibration."""
    store = daily_store(6)
    hist = ["--structure", "spectral-histogram", "--seed", "1", "--json"]
    code, out, err = run(capsys, *_window(store, *hist, "--eta", "0.3", "--regularizer", "40"))
    assert code == 0, err
    code, out, err = run(capsys, *["window", store.path, "--last", "3D", "--epsilon", "2", "--delta", "1e-6",
                                   "--scheduler", "local", *hist, "--eta", "0.5"])
    assert code == 2 and "eta=0.3" in err
    code, out, err = run(capsys, *["window", store.path, "--last", "3D", "--epsilon", "2", "--delta", "1e-6",
                                   "--scheduler", "local", *hist, "--eta", "0.3"])
    assert code == 0, err
    code, out, err = run(capsys, *_window(store, "--release", "jl", "--rank-bound", "3", "--seed", "1", "--json"))
    assert code == 0, err
    assert json.loads(out)["calibration"]["rank_bound"] == 3
    code, out, err = run(capsys, *_window(store, "--release", "wishart", "--tau-rule", "thm14", "--seed", "1",
                                          "--json"))
    assert code == 0, err
    assert json.loads(out)["calibration"]["tau_rule"] == "thm14"


def test_components_are_labelled_by_the_stores_column_ids(tmp_path, capsys):
    """A store with declared column ids (Parquet ``--column-ids``): ``feature_names`` in the JSON of a component
    task, and the ids in the text output."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(0)
    names = ["alpha", "beta", "gamma", "delta"]
    (tmp_path / "ids.txt").write_text("\n".join(names))
    for n in (1, 2):
        cols = rng.integers(0, 4, 60)
        cols[:20] = 2  # "gamma" dominates
        pq.write_table(pa.table({"row_id": np.repeat(np.arange(20) + 100 * n, 3), "col_id": [names[c] for c in cols],
                                 "value": rng.random(60) + np.where(cols == 2, 1.5, 0.0)}), tmp_path / f"d{n}.parquet")
    store = tmp_path / "store"
    assert main(["ingest", str(tmp_path / "d1.parquet"), "--out", str(store), "--timestamp", "2026-11-01",
                 "--column-ids", str(tmp_path / "ids.txt")]) == 0
    assert main(["append", str(store), str(tmp_path / "d2.parquet"), "--timestamp", "2026-11-02"]) == 0
    capsys.readouterr()
    argv = ["window", str(store), "--last", "2D", "--epsilon", "50", "--delta", "1e-6", "--scheduler", "local",
            "--seed", "1", "--task", "nonnegative-pca"]
    code, out, err = run(capsys, *argv, "--json")
    assert code == 0, err
    obj = json.loads(out)
    assert obj["feature_names"] == sorted(names)  # the declared universe, sorted
    assert obj["feature_names"][int(np.argmax(obj["components"][0]))] == "gamma"
    code, out, err = run(capsys, *argv)
    assert code == 0, err
    assert "component 0: largest coordinates [gamma] +" in out
