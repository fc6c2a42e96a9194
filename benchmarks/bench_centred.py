"""The top centred component of w8a at ε = 1 against scikit-learn's PCA on the clipped rows.

For each setting (row-norm bound 1 or "auto", 1 or 3 components, the block power run, centred Analyze Gauss or the
``auto`` choice between them),
``pca(..., center=True)`` runs ``--repeats`` times with fresh noise from the operating system (private runs), and
the table prints the median and largest sin² between the released top component and scikit-learn's top component
of the rows clipped to the bound used (the released one for "auto"), centred at their exact mean.

    python benchmarks/bench_centred.py --repeats 5          # w8a from ../shared/data, or --w8a PATH/w8a.svm
    python benchmarks/bench_centred.py --mechanisms auto --bounds 1
    python benchmarks/bench_centred.py --quick              # auto, bound 1, k = 1, two runs: seconds

The last line is ``ratio <median |released − true| explained variance ratio / true ratio>`` of the first setting
(the relative error of the released share of variance).
"""

from __future__ import annotations

import _common  # noqa: F401  (thread environment first)

import argparse
import os
import warnings
from typing import Any

import numpy as np
import scipy.sparse as sp


def main() -> None:
    from sklearn.datasets import load_svmlight_file
    from sklearn.decomposition import PCA

    from dppca_dask import pca

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    here = os.path.dirname(os.path.abspath(__file__))
    parser.add_argument("--w8a", default=os.path.join(here, "..", "..", "shared", "data", "w8a.svm"))
    parser.add_argument("--quick", action="store_true", help="mechanism auto, bound 1, k = 1, two runs")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--mechanisms", default="adaptive-power,analyze-gauss,auto",
                        help="comma-separated mechanisms (default: %(default)s)")
    parser.add_argument("--bounds", default="1,auto", help="comma-separated row-norm bounds (default: %(default)s)")
    args = parser.parse_args()
    if args.quick:
        args.mechanisms, args.bounds, args.repeats = "auto", "1", 2
    mechanisms = args.mechanisms.split(",")
    bounds = [b if b == "auto" else float(b) for b in args.bounds.split(",")]
    features, _ = load_svmlight_file(args.w8a, n_features=300)
    matrix = sp.csr_array(features, dtype=np.float64)
    norms = np.sqrt(np.asarray(matrix.multiply(matrix).sum(axis=1)).ravel())
    references: dict[float, Any] = {}

    def reference(bound: float) -> Any:
        if bound not in references:
            clipped = matrix.multiply(np.minimum(1.0, bound / np.maximum(norms, 1e-300))[:, None]).toarray()
            references[bound] = PCA(3).fit(clipped)
        return references[bound]

    rows = []
    for bound in bounds:
        for k in (1,) if args.quick else (1, 3):
            for mechanism in mechanisms:
                errors, ratio_errors = [], []
                for _ in range(args.repeats):
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        out = pca(matrix, epsilon=args.epsilon, delta=1e-6, n_components=k, center=True,
                                  row_norm_bound=bound, mechanism=mechanism, client="local", progress=False)
                    used = out.extras.get("row_norm_bound", bound)
                    ref = reference(float(used))
                    errors.append(_common.sin2(out.components[0], ref.components_[0]))
                    ratio_errors.append(abs(out.explained_variance_ratio[0] - ref.explained_variance_ratio_[0]))
                rows.append({"bound": str(bound), "k": k, "asked": mechanism, "mechanism": out.mechanism,
                             "median sin2": _common.median(errors), "max sin2": max(errors),
                             "median |ratio error|": _common.median(ratio_errors),
                             "true ratio": float(ref.explained_variance_ratio_[0])})
                print(_common.table(rows[-1:], list(rows[-1])), flush=True)
    print(f"\nw8a, epsilon={args.epsilon}, delta=1e-6, {args.repeats} private runs each; reference: scikit-learn PCA "
          "on the rows clipped to the bound used")
    print(_common.table(rows, list(rows[0])))
    print(f"ratio {rows[0]['median |ratio error|'] / rows[0]['true ratio']:.3f}  (relative error of the released "
          f"explained variance ratio: {rows[0]['asked']}, bound {rows[0]['bound']}, k = {rows[0]['k']})")


if __name__ == "__main__":
    main()
