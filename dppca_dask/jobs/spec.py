"""Job specifications: a TOML file naming the data, the mechanism, the privacy budget, the ledger and the output.

```toml
[job]
name = "w8a-nightly"                 # required; the ledger's job id is "<id or name>@<date>"

[data]
store = "../build/jobs/w8a.zarr"     # relative paths are relative to this file; or "s3://bucket/w8a.zarr"
# n_features = 300                   # optional: the public width; with [data.ingest], the width the ingest
                                     # declares; without, checked against the store's declared width
[data.ingest]                        # optional: refresh the store from a source first
source = "../../shared/data/w8a.svm" # svmlight, mtx, npz, h5ad/zarr (AnnData) or Parquet triplets
format = "svmlight"                  # optional; guessed from the extension
n_features = 300                     # the public number of features, here or in [data] (required with an ingest:
                                     # the ingest declares the store's width with it)
rows_per_partition = 10000           # optional
# layer = "counts"                   # AnnData only: ingest layers/<layer> instead of X
# Parquet only: column_ids = "columns.txt" (required: the public column ids, one per line, or an array; as many
# as n_features), row_column = "row_id", col_column = "col_id", value_column = "value", on_duplicate = "sum"
# [data.storage_options]             # optional, a store in object storage: fsspec options of its URL
# endpoint_url = "http://minio.internal:9000"  (default: AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, ... of the environment)

[mechanism]
name = "adaptive-power"              # any mechanism of `dppca-dask pca`, `lowrank` or `topics`
n_iter = 5                           # ... and its public parameters
# center = "private"                 # pca mechanisms: "none" or "private"; default as `dppca-dask pca` (private
                                     # for adaptive-power, adaptive-power-block and analyze-gauss, else none)
# topics: n_topics = 10 (required), alpha0 = 0.0 (0: single-topic model), n_restarts, n_iter, pca_iter,
#         pca_share, pair_bound, tensor_clip (as `dppca-dask topics`)

[privacy]
epsilon = 0.8
delta = 1e-7

[budget]
ledger = "../build/jobs/ledger.sqlite"   # made once by `dppca-dask budget init`; a run never creates it (or a
                                     # postgresql://USER@HOST/DB URL of a PostgreSQL ledger)
dataset = "w8a"
total_epsilon = 1.0                  # optional: checked against the total recorded by `budget init`
total_delta = 1e-6
# allow_new_store = true             # accept a store other than the one the key was first used with

[output]
path = "../build/jobs/out/{name}/{date}"   # placeholders: {name}, {id}, {date}

[cluster]
address = ""                         # empty: this machine (see executor); else tcp://HOST:PORT or tls://HOST:PORT
executor = "auto"                    # without an address: "auto" (in this process for a store of few partitions and
                                     # columns, dppca_dask.executor.*; else an embedded LocalCluster), "local" (in
                                     # this process) or "cluster" (an embedded LocalCluster)
# n_workers = 2, memory_limit = "2GiB" (embedded cluster); tls_ca_file, tls_cert, tls_key (TLS)
```

Every table and key is checked: unknown keys are errors (a misspelt ``total_epsilon`` must not be ignored). A job
releases only on a store whose width was declared, never read off the data (DESIGN.md, invariant 9): a spec with
``[data.ingest]`` must declare ``n_features`` (and, for Parquet triplets, ``column_ids``), which the ingest uses.
Where a
run executes is the ``[cluster]`` table's business and which matrix it reads the ``[data]`` table's: ``executor``
or ``layer`` in ``[mechanism]`` is refused with the table it belongs in.
"""

from __future__ import annotations

import datetime as _dt
import inspect
import math
import os
import re
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dppca_dask.errors import InvalidParameterError, JobSpecError
from dppca_dask.methods._registry import (
    Entry,
    entry_for,
    entry_names,
    get_entry,
    get_mechanism,
    job_mechanisms,
    resolve,
)

__all__ = [
    "BudgetSpec",
    "ClusterSpec",
    "DataSpec",
    "JobSpec",
    "load_job",
    "parse_job",
]

_APPEND_KEYS = frozenset({"source", "format", "row_column", "col_column", "value_column", "zero_based"})
#: Arguments of the entry points a job spec cannot set: they are the job's own business or would break its
#: guarantee (an entry reserves more of its own: :attr:`~dppca_dask.methods.Entry.reserved`).
_RESERVED_ARGUMENTS = frozenset({
    "data", "epsilon", "delta", "mechanism", "client", "seed", "noise", "on_release", "resume", "progress",
    "calibration", "executor", "layer",
})
#: Arguments of the entry points that a job sets in another table (an error in ``[mechanism]`` says where).
_ELSEWHERE = {
    "executor": "where the run executes is set in [cluster]: executor = \"auto\", \"local\" or \"cluster\"",
    "layer": "the matrix a job reads belongs with its data: ingest the AnnData layer into the job's store with "
             "[data.ingest] source = \"FILE.h5ad\", layer = \"NAME\", n_features = D",
}
_INGEST_KEYS = frozenset({
    "source", "format", "rows_per_partition", "dtype", "on_duplicate", "row_column", "col_column", "value_column",
    "zero_based", "n_features", "codec", "layer", "column_ids",
})
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_TABLES = {
    "job": {"name", "id"},
    "data": {"store", "ingest", "n_features", "append", "storage_options"},
    "mechanism": None,  # checked against the mechanism's parameters
    "privacy": {"epsilon", "delta"},
    "budget": {"ledger", "dataset", "total_epsilon", "total_delta", "allow_new_store"},
    "output": {"path"},
    "cluster": {"address", "executor", "n_workers", "memory_limit", "tls_ca_file", "tls_cert", "tls_key"},
}
_REQUIRED = ("job", "data", "mechanism", "privacy", "budget", "output")


def dated(template: str, date: str | None) -> str:
    """A source path template with the run's date filled in: ``{date}`` is ``2026-11-05``, and a format after a
    colon is ``strftime``'s (``{date:%Y/%m/%d}`` is ``2026/11/05``, ``{date:%Y%m%d}`` is ``20261105``). Without a
    date (a spec not yet bound to a run) the template itself."""
    if date is None:
        return template
    return template.format(date=_dt.date.fromisoformat(date))


def _check_dated(source: str, table: str, template: str) -> None:
    try:
        dated(template, "2026-01-31")
    except (KeyError, IndexError, ValueError, AttributeError) as exc:
        raise JobSpecError(
            f"{_where(source, table, 'source')}: only {{date}} (or {{date:FORMAT}}, a strftime format such as "
            f"{{date:%Y/%m/%d}}) may appear in braces; got {template!r} ({type(exc).__name__}: {exc})"
        ) from exc


@dataclass(frozen=True)
class DataSpec:
    store: str
    """Absolute path of the store the job reads."""
    ingest: Mapping[str, Any] | None = None
    """Arguments of :func:`dppca_dask.ingest.ingest` (``source`` absolute; it may hold ``{date}``, see
    :func:`dated`) to refresh the store first."""
    n_features: int | None = None
    """``[data] n_features``: the public width declared in the spec (see :attr:`declared_width`)."""
    append: Mapping[str, Any] | None = None
    """Arguments of :func:`dppca_dask.ingest.append.append_file` (``source`` absolute, with ``{date}``): a window
    job appends the day's file first, stamped with the run's date."""
    storage_options: Mapping[str, Any] | None = field(default=None, repr=False)
    """``[data.storage_options]``: fsspec options of a store given by its URL (``endpoint_url``, ...); never shown
    (:meth:`JobSpec.to_dict` names the keys only). ``None``: the environment (``AWS_ENDPOINT_URL``, ...)."""

    date: str | None = None
    """The run's date once the spec is bound to a run (:meth:`JobSpec.on_date`): dated sources are read for it."""

    def open(self) -> Any:
        """The store (:func:`~dppca_dask.storage.open_matrix`, with the spec's storage options)."""
        from dppca_dask.storage import open_matrix

        return open_matrix(self.store, storage_options=self.storage_options)

    def ingest_source(self) -> str:
        """``[data.ingest] source`` with the run's date filled in (:func:`dated`)."""
        assert self.ingest is not None
        return dated(str(self.ingest["source"]), self.date)

    @property
    def declared_width(self) -> int | None:
        """The width the spec declares: ``[data.ingest] n_features`` or ``[data] n_features`` (they agree when both
        are given). An ingest declares the store's width with it; a store the job does not ingest must have been
        declared with it."""
        if self.n_features is not None:
            return self.n_features
        value = (self.ingest or {}).get("n_features")
        return None if value is None else int(value)


@dataclass(frozen=True)
class BudgetSpec:
    ledger: str
    dataset: str
    total_epsilon: float | None = None
    """Checked against the ledger's recorded total when given (``budget init`` records it)."""
    total_delta: float | None = None
    allow_new_store: bool = False


@dataclass(frozen=True)
class ClusterSpec:
    address: str = ""
    executor: str = "auto"
    """Without an address: ``"auto"``, ``"local"`` or ``"cluster"``, as :func:`dppca_dask.pca`'s ``executor``."""
    n_workers: int | None = None
    memory_limit: str | None = None
    tls_ca_file: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None

    @property
    def tls(self) -> bool:
        return self.tls_ca_file is not None


@dataclass(frozen=True)
class JobSpec:
    """A validated job specification (paths absolute)."""

    name: str
    id: str
    source: str
    """The TOML file it was read from (or ``"<string>"``)."""
    data: DataSpec
    mechanism: str
    parameters: Mapping[str, Any]
    epsilon: float
    delta: float
    budget: BudgetSpec
    output: str
    """Output directory template (placeholders ``{name}``, ``{id}``, ``{date}``)."""
    cluster: ClusterSpec = field(default_factory=ClusterSpec)

    @property
    def kind(self) -> str:
        """The name of the entry kind that runs the mechanism (``"pca"``, ``"lowrank"``, ...: :attr:`entry`)."""
        return self.entry.name

    @property
    def entry(self) -> Entry:
        """The registry's entry kind that runs the mechanism (:func:`~dppca_dask.methods.entry_for`)."""
        return _entry(self.mechanism)

    def job_id(self, date: str) -> str:
        """The ledger's key of this job's run on ``date`` (one release per job id and date)."""
        return f"{self.id}@{date}"

    def on_date(self, date: str) -> JobSpec:
        """This spec bound to a run on ``date`` (``YYYY-MM-DD``): its dated sources name that day's files."""
        import dataclasses

        return dataclasses.replace(self, data=dataclasses.replace(self.data, date=date))

    def output_dir(self, date: str) -> str:
        return self.output.format(name=self.name, id=self.id, date=date)

    def to_dict(self) -> dict[str, Any]:
        return {
            "job": {"name": self.name, "id": self.id},
            "data": {"store": self.data.store, **({"ingest": dict(self.data.ingest)} if self.data.ingest else {}),
                     **({"n_features": self.data.n_features} if self.data.n_features is not None else {}),
                     **({"append": dict(self.data.append)} if self.data.append else {}),
                     **({"storage_options": {key: "(set)" for key in self.data.storage_options}}
                        if self.data.storage_options else {})},
            "mechanism": {"name": self.mechanism, **dict(self.parameters)},
            "privacy": {"epsilon": self.epsilon, "delta": self.delta},
            "budget": {k: v for k, v in vars(self.budget).items() if v is not None and v is not False},
            "output": {"path": self.output},
            "cluster": {k: v for k, v in vars(self.cluster).items()
                        if v not in (None, "") and not (k == "executor" and v == "auto")},
        }


def _where(source: str, table: str, key: str | None = None) -> str:
    return f"{source}: [{table}]" + (f" {key}" if key else "")


def _number(source: str, table: str, key: str, value: Any, *, positive: bool = True) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise JobSpecError(f"{_where(source, table, key)} must be a number; got {value!r}")
    value = float(value)
    if not math.isfinite(value) or (positive and value <= 0):
        raise JobSpecError(f"{_where(source, table, key)} must be finite and > 0; got {value}")
    return value


def _string(source: str, table: str, key: str, value: Any, *, empty: bool = False) -> str:
    if not isinstance(value, str) or (not empty and not value):
        raise JobSpecError(f"{_where(source, table, key)} must be a non-empty string; got {value!r}")
    return value


def _path(base: str, value: str) -> str:
    from dppca_dask._urls import is_url

    if is_url(value):  # a store in object storage (s3://...): as it is
        return value
    value = os.path.expanduser(value)
    return value if os.path.isabs(value) else os.path.normpath(os.path.join(base, value))


def _entry(mechanism: str) -> Entry:
    """The entry kind that runs ``mechanism``: the first registered that runs it; a name no entry runs as a job,
    the first entry's (whose validation refuses it)."""
    return entry_for(mechanism) or get_entry(entry_names()[0])


def _check_layer(source: str, ingest: dict[str, Any]) -> None:
    """``[data.ingest] layer``: the name of an AnnData layer (the source must be AnnData: ``.h5ad`` or ``.zarr``)."""
    layer = ingest["layer"]
    if not isinstance(layer, str) or not layer or "/" in layer:
        raise JobSpecError(f"{_where(source, 'data.ingest', 'layer')} must be the name of an AnnData layer (a "
                           f"non-empty string without '/'); got {layer!r}")
    fmt = ingest.get("format")
    if fmt is not None and fmt != "anndata":
        raise JobSpecError(f"{_where(source, 'data.ingest', 'layer')} applies to AnnData sources (.h5ad, .zarr); got "
                           f"format = {fmt!r}: drop layer, or set format = \"anndata\"")


def parquet_needs_column_ids(source: str) -> str:
    """The refusal of a Parquet ingest without ``column_ids`` (the spec's check, and the run's once the format is
    known from the source)."""
    return (f"{_where(source, 'data.ingest')} ingests Parquet triplets, whose columns are their column ids: "
            "n_features does not say which ids they are, and without them the ingest would take the distinct ids of "
            "the table, a width read off the data that every release reveals; add column_ids = \"FILE\" (a text "
            "file of the public column ids, one per line, as many as n_features) or column_ids = [ID, ...] to "
            "[data.ingest]")


def _check_ingest_schema(source: str, base: str, ingest: dict[str, Any], n_features: int | None) -> None:
    """``[data.ingest]`` declares the width of the store it writes (DESIGN.md, invariant 9): ``n_features`` in
    ``[data.ingest]`` or ``[data]`` (the same value if both), and for Parquet triplets ``column_ids`` (a path,
    made absolute here, or an array of ids)."""
    width = ingest.get("n_features")
    if width is not None and (isinstance(width, bool) or not isinstance(width, int) or width < 1):
        raise JobSpecError(f"{_where(source, 'data.ingest', 'n_features')} must be an integer >= 1; got {width!r}")
    if width is not None and n_features is not None and width != n_features:
        raise JobSpecError(f"{source}: [data] n_features = {n_features} and [data.ingest] n_features = {width} "
                           "disagree; give the public number of features once")
    if width is None and n_features is None:
        raise JobSpecError(
            f"{_where(source, 'data.ingest')} does not declare the width of the store it writes: the ingest would read "
            "it off the data, which every release reveals and the guarantee does not cover; add n_features = D (the "
            "public number of features) to [data] or [data.ingest]"
            + (", and column_ids for Parquet triplets" if ingest.get("format") == "parquet" else "")
        )
    fmt = ingest.get("format")
    if "column_ids" in ingest:
        ids = ingest["column_ids"]
        if isinstance(ids, str) and ids:
            ingest["column_ids"] = _path(base, ids)
        elif not (isinstance(ids, list) and ids
                  and all(isinstance(v, (int, str)) and not isinstance(v, bool) for v in ids)):
            raise JobSpecError(f"{_where(source, 'data.ingest', 'column_ids')} must be the path of a text file with "
                               f"one column id per line, or a non-empty array of integer or string ids; got {ids!r}")
        if fmt is not None and fmt != "parquet":
            raise JobSpecError(f"{_where(source, 'data.ingest', 'column_ids')} applies to Parquet triplets; got "
                               f"format = {fmt!r}: drop column_ids (n_features declares the width), or set format = "
                               "\"parquet\"")
    elif fmt == "parquet":
        raise JobSpecError(parquet_needs_column_ids(source))


#: The values of ``[cluster] executor`` (those of :data:`dppca_dask.coordinator.client.EXECUTORS`).
CLUSTER_EXECUTORS = ("auto", "local", "cluster")


def _executor(source: str, cluster: Mapping[str, Any], address: str) -> str:
    """``[cluster] executor``: ``"auto"`` (default), ``"local"`` or ``"cluster"``; ``"local"`` cannot go with a
    scheduler address."""
    value = cluster.get("executor", "auto")
    if value not in CLUSTER_EXECUTORS:
        raise JobSpecError(f"{_where(source, 'cluster', 'executor')} must be one of "
                           f"{', '.join(repr(v) for v in CLUSTER_EXECUTORS)}; got {value!r}")
    if value == "local" and address:
        raise JobSpecError(f"{_where(source, 'cluster', 'executor')} = \"local\" runs in this process, but [cluster] "
                           f"address = {address!r} names a scheduler; drop one of them")
    return str(value)


def _mechanism_parameters(entry: Entry) -> set[str]:
    """The ``[mechanism]`` parameters a job of ``entry`` may set: the entry's own list, else the keyword parameters
    of the function it runs, less the job's own arguments and those the entry reserves."""
    if entry.parameters is not None:
        return set(entry.parameters)
    fn = resolve(entry.function)
    return {name for name, p in inspect.signature(fn).parameters.items()
            if p.kind == p.KEYWORD_ONLY or (p.kind == p.POSITIONAL_OR_KEYWORD)} - _RESERVED_ARGUMENTS - entry.reserved


def parse_job(obj: Mapping[str, Any], *, source: str = "<string>", base_dir: str | None = None) -> JobSpec:
    """Validate a parsed TOML document; relative paths are taken relative to ``base_dir`` (default: cwd)."""
    base = os.path.abspath(base_dir or os.getcwd())
    _check_tables(source, obj)
    name, job_id = _parse_job_table(source, obj["job"])
    store, ingest, append, storage_options, n_features = _parse_data(source, base, obj["data"])
    mechanism, mech = _parse_mechanism(source, obj, ingest=ingest, append=append, n_features=n_features)
    epsilon, delta = _parse_privacy(source, obj["privacy"])
    budget_spec = _parse_budget(source, base, obj["budget"], epsilon=epsilon, delta=delta)

    output = obj["output"]
    if "path" not in output:
        raise JobSpecError(f"{_where(source, 'output', 'path')} is required")
    out = _path(base, _string(source, "output", "path", output["path"]))  # a URL: see jobs/bucket_output.py
    try:
        out.format(name="n", id="i", date="d")
    except (KeyError, IndexError, ValueError) as exc:
        raise JobSpecError(f"{_where(source, 'output', 'path')}: only {{name}}, {{id}} and {{date}} may appear in "
                           f"braces; got {output['path']!r}") from exc

    cluster = _parse_cluster(source, base, obj.get("cluster", {}))

    return JobSpec(
        name=name, id=job_id, source=source, data=DataSpec(store=store, ingest=ingest, n_features=n_features,
                                                               append=append, storage_options=storage_options),
        mechanism=mechanism,
        parameters=mech, epsilon=epsilon, delta=delta,
        budget=budget_spec,
        output=out, cluster=cluster,
    )


def _check_tables(source: str, obj: Mapping[str, Any]) -> None:
    """The document's tables and each table's keys are known, and the required tables are there."""
    unknown = sorted(set(obj) - set(_TABLES))
    if unknown:
        raise JobSpecError(f"{source}: unknown table(s) {', '.join(f'[{t}]' for t in unknown)}; "
                           f"valid tables: {', '.join(f'[{t}]' for t in _TABLES)}")
    for table in _REQUIRED:
        if table not in obj:
            raise JobSpecError(f"{source}: missing table [{table}]")
    for table, keys in _TABLES.items():
        value = obj.get(table, {})
        if not isinstance(value, dict):
            raise JobSpecError(f"{source}: [{table}] must be a table; got {value!r}")
        if keys is not None:
            extra = sorted(set(value) - keys)
            if table == "data" and "layer" in extra:
                raise JobSpecError(f"{_where(source, 'data', 'layer')}: a job reads its store's matrix; "
                                   f"{_ELSEWHERE['layer']}")
            if extra:
                raise JobSpecError(f"{_where(source, table)}: unknown key(s) {', '.join(extra)}; "
                                   f"valid keys: {', '.join(sorted(keys))}")


def _parse_job_table(source: str, job: Mapping[str, Any]) -> tuple[str, str]:
    """``[job]``: (name, id)."""
    name = _string(source, "job", "name", job.get("name"))
    job_id = _string(source, "job", "id", job.get("id", name))
    for key, value in (("name", name), ("id", job_id)):
        if not _NAME.match(value):
            raise JobSpecError(f"{_where(source, 'job', key)} must be letters, digits, '.', '_' or '-' (at most 128, "
                               f"starting with a letter or digit); got {value!r}")
    return name, job_id


def _parse_data(source: str, base: str, data: Mapping[str, Any]) -> tuple[str, dict[str, Any] | None,
                                                                       dict[str, Any] | None, Any, Any]:
    """``[data]``: (store, ingest, append, storage_options, n_features)."""
    store = _path(base, _string(source, "data", "store", data.get("store")))
    ingest = None
    if "ingest" in data:
        raw = data["ingest"]
        if not isinstance(raw, dict):
            raise JobSpecError(f"{_where(source, 'data', 'ingest')} must be a table")
        extra = sorted(set(raw) - _INGEST_KEYS)
        if extra:
            raise JobSpecError(f"{_where(source, 'data.ingest')}: unknown key(s) {', '.join(extra)}; valid keys: "
                               f"{', '.join(sorted(_INGEST_KEYS))}")
        ingest = dict(raw)
        ingest["source"] = _path(base, _string(source, "data.ingest", "source", raw.get("source")))
        _check_dated(source, "data.ingest", ingest["source"])
        if "layer" in ingest:
            _check_layer(source, ingest)

    append = None
    if "append" in data:
        raw_append = data["append"]
        if not isinstance(raw_append, dict):
            raise JobSpecError(f"{_where(source, 'data', 'append')} must be a table")
        extra = sorted(set(raw_append) - _APPEND_KEYS)
        if extra:
            raise JobSpecError(f"{_where(source, 'data.append')}: unknown key(s) {', '.join(extra)}; valid keys: "
                               f"{', '.join(sorted(_APPEND_KEYS))}")
        append = dict(raw_append)
        append["source"] = _path(base, _string(source, "data.append", "source", raw_append.get("source")))
        _check_dated(source, "data.append", append["source"])

    storage_options = data.get("storage_options")
    if storage_options is not None and not isinstance(storage_options, dict):
        raise JobSpecError(f"{_where(source, 'data', 'storage_options')} must be a table of fsspec options of the "
                           "store's URL (endpoint_url = \"http://HOST:PORT\", ...)")

    n_features = data.get("n_features")
    if n_features is not None and (isinstance(n_features, bool) or not isinstance(n_features, int)
                                   or n_features < 1):
        raise JobSpecError(f"{_where(source, 'data', 'n_features')} must be an integer >= 1; got {n_features!r}")
    if ingest is not None:
        _check_ingest_schema(source, base, ingest, n_features)
    return store, ingest, append, storage_options, n_features


def _parse_mechanism(source: str, obj: Mapping[str, Any], *, ingest: dict[str, Any] | None,
                     append: dict[str, Any] | None, n_features: Any) -> tuple[str, dict[str, Any]]:
    """``[mechanism]``: (name, parameters), checked against the job's kind and its ``[data]``."""
    mech = dict(obj["mechanism"])
    mechanism = _string(source, "mechanism", "name", mech.pop("name", None))
    runnable = tuple(name for kind in entry_names() for name in job_mechanisms(kind))
    if mechanism not in runnable:
        raise JobSpecError(f"{_where(source, 'mechanism', 'name')}: unknown mechanism {mechanism!r}"
                           f"{_not_private_hint(mechanism)}; jobs run {', '.join(runnable)}")
    entry = _entry(mechanism)
    if entry.appends and ingest is not None:  # (it would be ignored: the store grows by its appends)
        raise JobSpecError(f"{_where(source, 'data.ingest')} does not apply to a {mechanism!r} job, whose store grows "
                           "day by day: ingest the first day once (`dppca-dask ingest SRC --out STORE --timestamp DATE "
                           "--n-features D`), and append the next ones with [data.append]")
    if not entry.appends and append is not None:
        appending = ", ".join(name for kind in entry_names() if get_entry(kind).appends
                              for name in job_mechanisms(kind))
        raise JobSpecError(f"{_where(source, 'data.append')} applies to {appending} jobs only; a {mechanism!r} job "
                           "reads its store as it is (refresh it with [data.ingest])")
    misplaced = sorted(set(mech) & set(_ELSEWHERE))
    if misplaced:
        key = misplaced[0]
        raise JobSpecError(f"{_where(source, 'mechanism', key)} does not belong in [mechanism]: {_ELSEWHERE[key]}")
    allowed = _mechanism_parameters(entry)
    extra = sorted(set(mech) - allowed)
    if extra:
        why = ""
        if set(extra) & {"seed", "calibration", "noise"}:
            why = (" (a job always draws its noise from the operating system's entropy with the standard "
                   "calibration: seeded or paper-calibrated runs are for `dppca-dask pca`/`lowrank`)")
        raise JobSpecError(f"{_where(source, 'mechanism')}: unknown parameter(s) {', '.join(extra)} for "
                           f"{mechanism!r}{why}; valid: {', '.join(sorted(allowed))}")
    if entry.check_spec is not None:  # the entry's own checks (and defaults written into the parameters)
        entry.check_spec(source, mechanism, mech, ingest=ingest, n_features=n_features)
    return mechanism, mech


def _not_private_hint(mechanism: str) -> str:
    """Why a registered mechanism that is not differentially private is no job's, and where it runs."""
    for kind in entry_names():
        try:
            found = get_mechanism(mechanism, kind)
        except InvalidParameterError:
            continue
        if not found.private:
            return (f" (not differentially private: run it with `dppca-dask {kind} --mechanism {mechanism}`, never "
                    "as a job)")
    return ""


def _parse_privacy(source: str, privacy: Mapping[str, Any]) -> tuple[float, float]:
    """``[privacy]``: (epsilon, delta)."""
    for key in ("epsilon", "delta"):
        if key not in privacy:
            raise JobSpecError(f"{_where(source, 'privacy', key)} is required")
    epsilon = _number(source, "privacy", "epsilon", privacy["epsilon"])
    delta = _number(source, "privacy", "delta", privacy["delta"])
    if delta >= 1:
        raise JobSpecError(f"{_where(source, 'privacy', 'delta')} must be in (0, 1); got {delta}")
    return epsilon, delta


def _parse_budget(source: str, base: str, budget: Mapping[str, Any], *, epsilon: float, delta: float) -> BudgetSpec:
    """``[budget]``, checked against the job's (epsilon, delta)."""
    for key in ("ledger", "dataset"):
        if key not in budget:
            raise JobSpecError(f"{_where(source, 'budget', key)} is required")
    if ("total_epsilon" in budget) != ("total_delta" in budget):
        raise JobSpecError(f"{_where(source, 'budget')}: give both total_epsilon and total_delta (checked against "
                           "the ledger's recorded total), or neither")
    total_epsilon = total_delta = None
    if "total_epsilon" in budget:
        total_epsilon = _number(source, "budget", "total_epsilon", budget["total_epsilon"])
        total_delta = _number(source, "budget", "total_delta", budget["total_delta"])
        if total_delta >= 1:
            raise JobSpecError(f"{_where(source, 'budget', 'total_delta')} must be in (0, 1); got {total_delta}")
        if epsilon > total_epsilon or delta >= total_delta:
            raise JobSpecError(
                f"{source}: the job asks (epsilon={epsilon:g}, delta={delta:g}), more than the dataset's whole "
                f"budget (total_epsilon={total_epsilon:g}, total_delta={total_delta:g}; delta must stay below "
                "total_delta)"
            )
    allow_new_store = budget.get("allow_new_store", False)
    if not isinstance(allow_new_store, bool):
        raise JobSpecError(f"{_where(source, 'budget', 'allow_new_store')} must be true or false; got "
                           f"{allow_new_store!r}")
    dataset = _string(source, "budget", "dataset", budget["dataset"])
    ledger = _string(source, "budget", "ledger", budget["ledger"])
    if not ledger.startswith(("postgresql://", "postgres://")):  # a PostgreSQL ledger's URL is taken as it is
        ledger = _path(base, ledger)
    return BudgetSpec(ledger=ledger, dataset=dataset, total_epsilon=total_epsilon, total_delta=total_delta,
                      allow_new_store=allow_new_store)


def _parse_cluster(source: str, base: str, cluster_raw: Mapping[str, Any]) -> ClusterSpec:
    """``[cluster]``."""
    address = _string(source, "cluster", "address", cluster_raw.get("address", ""), empty=True)
    executor = _executor(source, cluster_raw, address)
    n_workers = cluster_raw.get("n_workers")
    if n_workers is not None and (isinstance(n_workers, bool) or not isinstance(n_workers, int) or n_workers < 1):
        raise JobSpecError(f"{_where(source, 'cluster', 'n_workers')} must be an integer >= 1; got {n_workers!r}")
    memory_limit = cluster_raw.get("memory_limit")
    if memory_limit is not None:
        memory_limit = _string(source, "cluster", "memory_limit", memory_limit)
    tls = {k: cluster_raw.get(k) for k in ("tls_ca_file", "tls_cert", "tls_key")}
    given = [k for k, v in tls.items() if v is not None]
    if given and len(given) != 3:
        raise JobSpecError(f"{_where(source, 'cluster')}: TLS needs all of tls_ca_file, tls_cert and tls_key; got "
                           f"{', '.join(given)}")
    if given:
        tls = {k: _path(base, _string(source, "cluster", k, v)) for k, v in tls.items()}
        if address and not address.startswith("tls://"):
            raise JobSpecError(f"{_where(source, 'cluster', 'address')} must start with tls:// when TLS files are "
                               f"given; got {address!r}")
    if address and (n_workers is not None or memory_limit is not None):
        raise JobSpecError(f"{_where(source, 'cluster')}: n_workers and memory_limit apply to the embedded cluster "
                           "only (address empty)")
    if executor == "local" and (n_workers is not None or memory_limit is not None):
        raise JobSpecError(f"{_where(source, 'cluster')}: n_workers and memory_limit shape the embedded cluster, and "
                           "executor = \"local\" runs in this process without one; drop them, or use executor = "
                           "\"cluster\" or \"auto\"")
    return ClusterSpec(address=address, executor=executor, n_workers=n_workers, memory_limit=memory_limit, **tls)


def _set(doc: dict[str, Any], assignment: str) -> None:
    """Apply one ``table.key=value`` override (the value is read as TOML, else taken as a string)."""
    if "=" not in assignment:
        raise JobSpecError(f"--set needs TABLE.KEY=VALUE; got {assignment!r}")
    dotted, raw = assignment.split("=", 1)
    parts = [p.strip() for p in dotted.strip().split(".")]
    if len(parts) < 2 or not all(parts):
        raise JobSpecError(f"--set needs TABLE.KEY=VALUE; got {assignment!r}")
    try:
        value = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw
    node = doc
    for part in parts[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise JobSpecError(f"--set {assignment!r}: {part} is not a table")
        node = child
    node[parts[-1]] = value


def load_job(path: str | os.PathLike[str], *, overrides: Sequence[str] = ()) -> JobSpec:
    """Read and validate a job spec file; ``overrides`` are ``table.key=value`` strings applied first."""
    path = os.fspath(path)
    try:
        with open(path, "rb") as handle:
            doc = tomllib.load(handle)
    except FileNotFoundError as exc:
        raise JobSpecError(f"job spec '{path}' not found") from exc
    except tomllib.TOMLDecodeError as exc:
        raise JobSpecError(f"job spec '{path}' is not valid TOML: {exc}") from exc
    for assignment in overrides:
        _set(doc, assignment)
    return parse_job(doc, source=path, base_dir=os.path.dirname(os.path.abspath(path)))
