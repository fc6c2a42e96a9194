"""A scikit-learn estimator for differentially private PCA: :class:`DPPCA`, a thin wrapper around :func:`~dppca_dask.pca`.

``DPPCA`` follows scikit-learn's conventions (``get_params``/``set_params``, ``clone``, pickling, ``set_output``,
``get_feature_names_out``, the input checks and error wording of :class:`sklearn.decomposition.PCA`) and adds what
data larger than memory needs: store paths are accepted by ``fit``, ``transform`` and ``fit_transform``, and the
projection of a store or a ``dask.array.Array`` is returned lazily as a Dask array.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, TransformerMixin
from sklearn.utils.validation import check_array, check_is_fitted, validate_data

from dppca_dask.errors import InvalidInputError, InvalidParameterError

__all__ = ["DPPCA", "expected_failed_checks"]

#: Arguments of :func:`dppca_dask.pca` that describe where and how one run executes, not the model: they are
#: arguments of :meth:`DPPCA.fit`, never hyperparameters (a ``distributed.Client`` cannot be cloned or pickled,
#: and a noise source, a resumed state, the store's access options or a ledger job id belong to one run).
FIT_ARGUMENTS = ("client", "noise", "on_release", "resume", "storage_options", "ledger", "dataset", "job_id")


def _is_store(X: Any) -> bool:
    from dppca_dask.storage import MatrixStore

    from zarr.storage import FsspecStore

    return isinstance(X, (str, os.PathLike, MatrixStore, FsspecStore))


def _is_anndata_file(X: Any, layer: str | None) -> bool:
    """An AnnData file read directly: an ``.h5ad`` path, or any path when a layer is named."""
    return isinstance(X, (str, os.PathLike)) and (os.fspath(X).lower().endswith(".h5ad") or layer is not None)


def _anndata_rows(X: Any, layer: str | None) -> Any:
    from dppca_dask.ingest.adata import anndata_dask

    return anndata_dask(os.fspath(X), layer=layer)


def _is_dask(X: Any) -> bool:
    try:
        import dask.array as da
    except ImportError:  # pragma: no cover - dask is a dependency
        return False
    return isinstance(X, da.Array)


class DPPCA(ClassNamePrefixFeaturesOutMixin, TransformerMixin, BaseEstimator):
    """Differentially private PCA with scikit-learn's vocabulary.

    Every hyperparameter is the parameter of :func:`dppca_dask.pca` with the same name (see there for the
    meaning, range and privacy role of each); ``fit`` calls ``pca`` once and stores the release.

    Parameters
    ----------
    n_components : int, default=1
        Number of components k.
    epsilon, delta : float, default=1.0, 1e-6
        Total privacy budget of one ``fit`` (ignored by ``mechanism="exact"``).
    mechanism : str, default=None
        ``"adaptive-power"``, ``"adaptive-power-block"``, ``"analyze-gauss"``, ``"private-power"`` or ``"exact"``
        (not private), or ``"auto"``. None: as :func:`dppca_dask.pca` (``"auto"``: block adaptive power or
        Analyze Gauss, chosen from a private pilot run).
    n_iter, row_norm_bound, seed, persist, svt_share, beta, grid_per_octave, grid_octaves, calibration, \
max_dense_dim, progress, coherence, entry_bound, c_doubling, symmetric, timings, executor
        As in :func:`dppca_dask.pca`. ``seed`` makes the fit reproducible and **not private**. ``executor``
        (``"auto"``, ``"local"``, ``"cluster"``) says where a fit without a client runs: in this process for
        inputs small by their public shape, else on an embedded ``LocalCluster``.
    layer : str, default=None
        Read ``layers/<layer>`` of an AnnData ``.h5ad`` file or ``.zarr`` store given to ``fit`` / ``transform``
        as a path, instead of ``X``. An ``.h5ad`` path is read in row blocks from the file (never whole).
    center : {None, "private", True, False} or ndarray, default=None
        As in :func:`dppca_dask.pca` (whose default is ``False``). ``None``: ``"private"`` for the mechanisms that
        centre (adaptive power and Analyze Gauss, as the CLI does), ``False`` for the others. Private centring
        releases the mean of the clipped rows from a public share of the budget and centres the rows inside the
        kernels, as :class:`sklearn.decomposition.PCA` centres; ``False`` keeps the uncentred top singular vectors.

    Attributes
    ----------
    components_ : ndarray of shape (n_components, n_features)
        The released components (unit rows; each one's largest-magnitude coordinate is positive).
    n_components_ : int
        Number of released components.
    n_features_in_ : int
        Number of columns seen in ``fit``.
    feature_names_in_ : ndarray of shape ``(n_features_in_,)``
        Column names, when ``X`` was a DataFrame with string column names.
    privacy_report_ : PrivacyReport
        The privacy report of the release ((ε, δ), neighbouring relation, accountant); ``privacy_`` is the same.
    result_ : PCAResult
        The whole release, with provenance.
    diagnostics_ : Diagnostics or None
        How far to trust the release (:class:`~dppca_dask.diagnostics.Diagnostics`: ``reliable`` and a
        ``noise_to_signal`` figure per component, from released values only). A fit whose release is not reliable
        issues an :class:`~dppca_dask.errors.UnreliableReleaseWarning` (a ``UserWarning``).
    mean_, explained_variance_, explained_variance_ratio_, singular_values_ : ndarray
        Set only when the mechanism releases them (a private release of each); absent otherwise. When ``mean_`` is
        set, ``transform`` subtracts it and ``inverse_transform`` adds it back.
    clipped_fraction_ : float
        The released fraction of rows that the fixed ``row_norm_bound`` clipped (a noisy count over a noisy count,
        from 2% of the budget); set only when released. Above one half, ``fit`` issues a
        :class:`~dppca_dask.errors.ClippingWarning`.

    Notes
    -----
    The components are those of the rows clipped to ``row_norm_bound`` and centred by the released mean
    (``mean_``); with ``center=False`` they are the top right singular vectors of the clipped rows.

    Privacy: each ``fit`` is one release that spends its whole (ε, δ) on ``X``. ``transform`` and
    ``inverse_transform`` are public functions of the released components applied to the data you pass; they
    spend nothing, but their output about private rows is as private as those rows.

    The estimator has no ``score``, and model selection is possible (``GridSearchCV`` with a scorer of your own
    clones and fits it as any transformer) but **every fit on private data spends budget**: a search over m
    settings with c folds spends m·c times (ε, δ) in total, and choosing hyperparameters by their score on the
    private data is itself a release that no report covers. Tune on public or synthetic data, or account for the
    whole search.

    ``client`` (and ``noise``, ``on_release``, ``resume``) are arguments of ``fit``, not hyperparameters: they say
    where one run executes. Without a client, ``fit`` uses the ``dppca_dask.client`` entry of ``dask.config`` if
    set (e.g. ``dask.config.set({"dppca_dask.client": "local"})`` for in-process runs), else the active
    ``distributed.Client`` (the one made last, or set with ``client.as_current()``), else what :func:`~dppca_dask.pca` does
    with ``client=None``.

    Examples
    --------
    >>> import numpy as np
    >>> from dppca_dask.estimator import DPPCA
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(2_000, 8)) * [4, 2, 1, 1, 1, 1, 1, 1]
    >>> X /= np.linalg.norm(X, axis=1).max()
    >>> model = DPPCA(n_components=2, epsilon=1.0, delta=1e-6)
    >>> model.fit_transform(X).shape
    (2000, 2)
    >>> model.components_.shape, model.explained_variance_ratio_.shape
    ((2, 8), (2,))
    >>> model.privacy_report_.private
    True
    """

    def __init__(
        self,
        n_components: int = 1,
        *,
        epsilon: float = 1.0,
        delta: float = 1e-6,
        mechanism: str | None = None,
        n_iter: int | None = None,
        row_norm_bound: float | str = 1.0,
        seed: int | None = None,
        persist: bool | None = None,
        svt_share: float = 0.1,
        beta: float = 0.05,
        grid_per_octave: int = 4,
        grid_octaves: int = 24,
        calibration: str = "standard",
        max_dense_dim: int = 4096,
        progress: bool | None = None,
        coherence: float | None = None,
        entry_bound: float = 1.0,
        c_doubling: bool = False,
        symmetric: bool = False,
        timings: bool = False,
        center: Any = None,
        executor: str = "auto",
        layer: str | None = None,
    ) -> None:
        self.n_components = n_components
        self.epsilon = epsilon
        self.delta = delta
        self.mechanism = mechanism
        self.n_iter = n_iter
        self.row_norm_bound = row_norm_bound
        self.seed = seed
        self.persist = persist
        self.svt_share = svt_share
        self.beta = beta
        self.grid_per_octave = grid_per_octave
        self.grid_octaves = grid_octaves
        self.calibration = calibration
        self.max_dense_dim = max_dense_dim
        self.progress = progress
        self.coherence = coherence
        self.entry_bound = entry_bound
        self.c_doubling = c_doubling
        self.symmetric = symmetric
        self.timings = timings
        self.center = center
        self.executor = executor
        self.layer = layer

    # ---------------------------------------------------------------------------------------------- scikit-learn
    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        tags.input_tags.allow_nan = False
        # Without a seed every fit draws fresh noise (that is what makes it private).
        tags.non_deterministic = self.seed is None
        tags.transformer_tags.preserves_dtype = ["float64"]
        return tags

    @property
    def _n_features_out(self) -> int:
        return int(self.components_.shape[0])

    # ------------------------------------------------------------------------------------------------------ fit
    def _center(self) -> Any:
        """The ``center`` passed to :func:`~dppca_dask.pca` (``None`` resolved as the CLI resolves it)."""
        if self.center is not None:
            return self.center
        from dppca_dask.methods.adaptive_power.centring import CENTRING_MECHANISMS

        return "private" if self._mechanism() in CENTRING_MECHANISMS else False

    def _mechanism(self) -> str:
        from dppca_dask.methods._params import default_mechanism

        return self.mechanism if self.mechanism is not None else default_mechanism(self.n_components)

    def fit(
        self,
        X: Any,
        y: Any = None,
        *,
        client: Any = None,
        noise: Any = None,
        on_release: Callable[[Any, tuple[Any, ...]], None] | None = None,
        resume: Any = None,
        storage_options: Any = None,
        ledger: Any = None,
        dataset: str | None = None,
        job_id: str | None = None,
    ) -> DPPCA:
        """Release the components of ``X`` (one private release: spends ``epsilon``, ``delta``).

        Parameters
        ----------
        X : array-like, sparse matrix, dask array, store path or URL, MatrixStore or FsspecStore of shape \
(n_samples, n_features)
            Each row is one individual. In-memory input is checked as scikit-learn checks it (2-D, numeric,
            finite, at least one row) before anything is released.
        y : None
            Ignored.
        client, noise, on_release, resume
            As in :func:`dppca_dask.pca` (where to run; per-run state).
        storage_options
            For ``X`` given as a store URL (``s3://bucket/x.zarr``): fsspec options of its file system, as in
            :func:`dppca_dask.pca` (where the store is, not a hyperparameter; never kept on the model).
        ledger, dataset, job_id
            Keep this fit's release in a privacy-budget ledger, as :func:`dppca_dask.pca` does (given together; a
            job id stands for one fit: a refit needs a new one).
        """
        from dppca_dask.api._pca import pca

        if storage_options is not None:
            from dppca_dask.storage import open_matrix

            X = open_matrix(X, storage_options=storage_options)  # a store URL with its options: the handle
        data = self._check_fit_input(X)
        _warn_inside_search(self)
        if client is None and self.executor != "local":  # "local" runs in this process, whatever client is active
            client = _default_client()
        if self._mechanism() == "exact" and (self.center is True or self.center == "exact"):
            return self._fit_exact_centred(data, client)
        result = pca(
            data,
            epsilon=self.epsilon,
            delta=self.delta,
            n_components=self.n_components,
            n_iter=self.n_iter,
            row_norm_bound=self.row_norm_bound,
            mechanism=self._mechanism(),
            client=client,
            seed=self.seed,
            persist=self.persist,
            svt_share=self.svt_share,
            beta=self.beta,
            grid_per_octave=self.grid_per_octave,
            grid_octaves=self.grid_octaves,
            calibration=self.calibration,
            max_dense_dim=self.max_dense_dim,
            progress=self.progress,
            on_release=on_release,
            resume=resume,
            noise=noise,
            executor=self.executor,
            layer=self.layer if _is_anndata_file(data, self.layer) else None,
            coherence=self.coherence,
            entry_bound=self.entry_bound,
            c_doubling=self.c_doubling,
            symmetric=self.symmetric,
            timings=self.timings,
            center=self._center(),
            ledger=ledger,
            dataset=dataset,
            job_id=job_id,
        )
        for name in ("mean_", "explained_variance_", "explained_variance_ratio_", "singular_values_",
                     "clipped_fraction_"):
            if hasattr(self, name):
                delattr(self, name)  # a refit must not keep the previous release's values
        self.result_ = result
        self.diagnostics_ = result.diagnostics
        from dppca_dask.diagnostics import warn_if_unreliable

        warn_if_unreliable(result.diagnostics, f"this fit's {result.mechanism} release", stacklevel=2)
        self.components_ = np.asarray(result.components)
        self.n_components_ = int(self.components_.shape[0])
        self.privacy_report_ = result.privacy
        self.privacy_ = result.privacy
        for name in ("mean", "explained_variance", "explained_variance_ratio", "singular_values"):
            value = getattr(result, name, None)
            if value is not None:
                setattr(self, f"{name}_", np.asarray(value, dtype=np.float64))
        if "clipped_fraction" in result.extras:
            self.clipped_fraction_ = float(result.extras["clipped_fraction"])
        return self

    def _fit_exact_centred(self, data: Any, client: Any) -> DPPCA:
        """The non-private baseline that matches scikit-learn's ``PCA``: the exact mean subtracted, no clipping,
        the exact top eigenvectors of the centred Gram, and scikit-learn's explained variance (``/(n − 1)``) and
        ratios. In-memory data only (the centred matrix is dense)."""
        from dppca_dask.api._pca import pca

        if not (isinstance(data, np.ndarray) or sp.issparse(data)):
            raise InvalidParameterError(
                "mechanism='exact' with center=True centres the data in memory (the non-private baseline that "
                f"matches scikit-learn's PCA); got {type(data).__name__}: load the rows into an array, or use "
                "center=False")
        dense = data.toarray() if sp.issparse(data) else np.asarray(data, dtype=np.float64)
        mean = dense.mean(axis=0)
        centred = dense - mean
        result = pca(centred, epsilon=self.epsilon, delta=self.delta, n_components=self.n_components,
                     mechanism="exact", row_norm_bound=float("inf"), client=client, max_dense_dim=self.max_dense_dim,
                     progress=self.progress, executor=self.executor, center=False)
        n = max(centred.shape[0] - 1, 1)
        eigenvalues = np.asarray(result.extras["eigenvalues"], dtype=np.float64)
        total = float(np.sum(centred**2)) / n
        self.result_ = result
        self.components_ = np.asarray(result.components)
        self.n_components_ = int(self.components_.shape[0])
        self.privacy_report_ = self.privacy_ = result.privacy
        self.mean_ = mean
        self.explained_variance_ = eigenvalues / n
        self.explained_variance_ratio_ = self.explained_variance_ / total if total > 0 else np.zeros_like(eigenvalues)
        self.singular_values_ = np.sqrt(np.maximum(eigenvalues, 0.0))
        return self

    def _check_fit_input(self, X: Any) -> Any:
        """Validate ``X`` at the boundary (before any budget is spent) and set ``n_features_in_``."""
        for name in ("feature_names_in_", "n_features_in_"):
            if hasattr(self, name):
                delattr(self, name)
        if self.layer is not None and not isinstance(X, (str, os.PathLike)):
            raise InvalidParameterError(
                f"layer={self.layer!r} names a layer of an AnnData file: fit needs the file's path (an .h5ad file "
                f"or AnnData .zarr store); got {type(X).__name__}")
        if _is_anndata_file(X, self.layer):
            self.n_features_in_ = int(_anndata_rows(X, self.layer).shape[1])
            return X  # pca opens it (in row blocks) and labels the release's inferred width
        if _is_store(X):
            from dppca_dask.storage import MatrixStore, open_matrix

            store = X if isinstance(X, MatrixStore) else open_matrix(X)
            self.n_features_in_ = int(store.n_cols)
            return store
        if _is_dask(X):
            if X.ndim != 2:
                raise InvalidInputError(f"Expected a 2D dask array, got {X.ndim}D array instead; reshape your "
                                        "data (e.g. X.reshape(-1, 1) for a single feature)")
            self.n_features_in_ = int(X.shape[1])
            return X
        try:
            checked = validate_data(self, X, accept_sparse=("csr", "csc", "coo"), dtype=[np.float64, np.float32],
                                    ensure_min_samples=1, reset=True)
        except InvalidInputError:
            raise
        except ValueError as exc:
            raise InvalidInputError(str(exc)) from exc
        return checked

    # ------------------------------------------------------------------------------------------------ transform
    def transform(self, X: Any) -> Any:
        """Project rows onto the components: ``(X - mean_) @ components_.T`` (no mean when none was released).

        In-memory input returns a numpy array; a ``dask.array.Array``, a store path or a ``MatrixStore`` returns a
        lazy ``dask.array.Array`` (nothing is read until you compute it). Spends no budget.
        """
        check_is_fitted(self)
        if _is_anndata_file(X, self.layer):
            return self._transform_dask(_anndata_rows(X, self.layer))
        if _is_store(X):
            return self._transform_store(X)
        if _is_dask(X):
            return self._transform_dask(X)
        return self._project(self._check_rows(X))

    def _check_rows(self, X: Any) -> Any:
        """In-memory rows checked as scikit-learn checks them against the fitted width (its errors as
        :class:`~dppca_dask.errors.InvalidInputError`)."""
        try:
            return validate_data(self, X, accept_sparse=("csr", "csc", "coo"), dtype=[np.float64, np.float32],
                                 reset=False)
        except InvalidInputError:
            raise
        except ValueError as exc:
            raise InvalidInputError(str(exc)) from exc

    def _project(self, block: Any) -> np.ndarray:
        out = np.asarray(block @ self.components_.T, dtype=np.float64)
        mean = getattr(self, "mean_", None)
        if mean is not None:
            out = out - mean @ self.components_.T
        return out

    def _transform_dask(self, X: Any) -> Any:
        if X.ndim != 2:
            raise InvalidInputError(f"Expected a 2D dask array, got {X.ndim}D array instead; reshape your data")
        if int(X.shape[1]) != self.n_features_in_:
            raise InvalidInputError(f"X has {X.shape[1]} features, but {type(self).__name__} is expecting "
                                    f"{self.n_features_in_} features as input.")
        if X.dtype.kind not in "fiub":
            raise InvalidInputError(f"dask array of dtype {X.dtype} is not numeric; convert it to float64 first")
        k = self.n_components_
        rows = X.rechunk({1: -1}) if X.numblocks[1] > 1 else X
        return rows.map_blocks(_project_block, self.components_, getattr(self, "mean_", None),
                               chunks=(rows.chunks[0], (k,)), dtype=np.float64, meta=np.empty((0, k)))

    def _transform_store(self, X: Any) -> Any:
        import dask
        import dask.array as da

        from dppca_dask.storage import MatrixStore, open_matrix

        store = X if isinstance(X, MatrixStore) else open_matrix(X)
        if store.n_cols != self.n_features_in_:
            raise InvalidInputError(f"store '{store.path}' has {store.n_cols} features, but "
                                    f"{type(self).__name__} is expecting {self.n_features_in_} features as input.",
                                    source=store.path)
        k = self.n_components_
        mean = getattr(self, "mean_", None)
        blocks = [
            da.from_delayed(
                dask.delayed(_project_partition)(store, part.index, self.components_, mean),
                shape=(part.n_rows, k), dtype=np.float64, meta=np.empty((0, k)),
            )
            for part in store.partitions
        ]
        if not blocks:
            return da.zeros((0, k), dtype=np.float64)
        return da.concatenate(blocks, axis=0)

    def fit_transform(self, X: Any, y: Any = None, *, client: Any = None, noise: Any = None,
                      on_release: Callable[[Any, tuple[Any, ...]], None] | None = None, resume: Any = None) -> Any:
        """``fit(X)`` then ``transform(X)``; for a store or a dask array the projection is lazy."""
        return self.fit(X, y, client=client, noise=noise, on_release=on_release, resume=resume).transform(X)

    def score(self, X: Any, y: Any = None) -> float:
        """Minus the mean squared reconstruction error of the rows of ``X`` (in memory) by the components: higher
        is better, as scikit-learn's scorers expect (``GridSearchCV`` uses it without a ``scoring``). Computed on
        ``X`` by the caller, not released: score on held-out data."""
        check_is_fitted(self)
        checked = self._check_rows(X)
        dense = checked.toarray() if sp.issparse(checked) else np.asarray(checked, dtype=np.float64)
        mean = getattr(self, "mean_", None)
        centred = dense if mean is None else dense - mean
        residual = centred - (centred @ self.components_.T) @ self.components_
        return -float(np.mean(np.sum(residual**2, axis=1)))

    def inverse_transform(self, X: Any) -> np.ndarray:
        """Map projected rows back to feature space: ``X @ components_`` (plus ``mean_`` when released)."""
        check_is_fitted(self)
        try:
            checked = check_array(X, dtype=[np.float64, np.float32], input_name="X")
        except ValueError as exc:
            raise InvalidInputError(str(exc)) from exc
        if checked.shape[1] != self.n_components_:
            raise InvalidInputError(f"X has {checked.shape[1]} columns, but {type(self).__name__} has "
                                    f"{self.n_components_} components; pass the output of transform")
        out = np.asarray(checked @ self.components_, dtype=np.float64)
        mean = getattr(self, "mean_", None)
        return out if mean is None else out + mean


def _inside_search() -> bool:
    """Whether this call runs under scikit-learn's fit-and-score of a model search or cross-validation."""
    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_name == "_fit_and_score" and "sklearn" in frame.f_code.co_filename:
            return True
        frame = frame.f_back  # type: ignore[assignment]
    return False


def _warn_inside_search(model: Any) -> None:
    """Warn, once per fit, that a fit inside a search is a release that spends its budget (a search of N fits and a
    refit spends N + 1 budgets; sklearn's own warning filter may show it once per search)."""
    if _inside_search():
        import warnings

        from dppca_dask.errors import SearchSpendsBudgetWarning

        warnings.warn(SearchSpendsBudgetWarning(
            f"{type(model).__name__}.fit inside a model search is a private release: each fit spends "
            f"epsilon={model.epsilon:g}, delta={model.delta:g} of the data's budget, so a search spends one budget "
            "per fit (and one for the refit); choose the parameters on public or held-out data instead"),
            stacklevel=3)


def _default_client() -> Any:
    """The ``dppca_dask.client`` entry of ``dask.config``, else the active ``distributed.Client``, else None."""
    import dask

    configured = dask.config.get("dppca_dask.client", None)
    if configured is not None:
        return configured
    if "distributed" not in sys.modules:  # nothing imported distributed: no client can be active
        return None
    from distributed import default_client

    try:
        return default_client()
    except ValueError:  # no client is active
        return None


def _project_block(block: Any, components: np.ndarray, mean: np.ndarray | None) -> np.ndarray:
    """One dask block projected (runs on a worker; checks finiteness as ``transform`` does in memory)."""
    values = block.data if sp.issparse(block) else np.asarray(block)
    if not np.isfinite(values).all():
        raise InvalidInputError("Input X contains NaN or infinity in a block of the dask array; remove or impute "
                                "those values before transform")
    out = np.asarray(block @ components.T, dtype=np.float64)
    return out if mean is None else out - mean @ components.T


def _project_partition(store: Any, index: int, components: np.ndarray, mean: np.ndarray | None) -> np.ndarray:
    from dppca_dask.coordinator.sources import load_store_partition

    return _project_block(load_store_partition(store, index).block, components, mean)


def expected_failed_checks(estimator: DPPCA) -> dict[str, str]:
    """Checks of ``sklearn.utils.estimator_checks`` that a private estimator must fail, each with its reason.

    Pass it to ``check_estimator(est, expected_failed_checks=expected_failed_checks(est))`` or
    ``parametrize_with_checks(..., expected_failed_checks=expected_failed_checks)``. A seeded estimator (not
    private) passes every check.
    """
    if estimator.seed is not None:
        return {}
    return {
        "check_fit_idempotent": "a private fit draws fresh noise each time (that is what makes it private), so two "
        "fits on the same data release different components; pass seed= for a reproducible (not private) fit",
    }
