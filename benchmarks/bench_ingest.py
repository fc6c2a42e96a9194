"""Ingest a large Parquet triplet table and measure time and peak memory.

Generates a warehouse-style table of ``(row_id, col_id, value)`` triplets (several files, rows in random order,
sparse 62-bit integer row ids, string column ids, float64 values) in bounded memory, ingests it with
``dppca_dask.ingest.ingest`` in a child process, and reports wall time, triplets per second and the peak resident
memory of the ingesting process (including its children). The last line is ``ratio <peak RSS / Parquet bytes>``.

    python benchmarks/bench_ingest.py --quick            # about 200 MB of Parquet, well under a minute
    python benchmarks/bench_ingest.py --workdir /tmp/bench_ingest   # full: at least 2 GB of Parquet

The generated data and the store go to ``--workdir`` (a new temporary directory by default) and are removed
afterwards unless ``--keep`` is given.

``--svmlight W8A.svm`` instead compares the two svmlight parsers side by side: it writes a file of about
``--svmlight-mb`` MB (default 70) by repeating the given file with perturbed values, ingests it with
``parser="numpy"`` and ``parser="sklearn"`` in the same process, interleaved (``--repeats`` each), checks that the
stores are equal, and prints the median times and their ratio (numpy / sklearn: above 1 means scikit-learn's
parser is faster)::

    python benchmarks/bench_ingest.py --svmlight shared/data/w8a.svm
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any

import numpy as np

#: Triplets per Parquet row group (and per generated batch).
BATCH = 2**20
#: Bytes of Parquet per triplet with this generator (measured); used to size the table.
BYTES_PER_TRIPLET = 25.6


def generate(directory: str, *, n_triplets: int, n_rows: int, n_cols: int, n_files: int, seed: int) -> dict[str, Any]:
    """Write ``n_triplets`` random triplets into ``n_files`` Parquet files, one batch at a time."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    os.makedirs(directory, exist_ok=True)
    rng = np.random.default_rng(seed)
    vocabulary = pa.array([f"item-{(j * 2654435761) % 2**32:08x}" for j in range(n_cols)])
    # Sparse, distinct 62-bit row ids: an odd multiplier is a bijection modulo 2**62.
    multiplier, offset = np.uint64(0x9E3779B97F4A7C15 | 1), np.uint64(12345)
    total = 0.0
    per_file = -(-n_triplets // n_files)
    start = time.perf_counter()
    for k in range(n_files):
        count = min(per_file, n_triplets - k * per_file)
        path = os.path.join(directory, f"part-{k:03d}.parquet")
        with pq.ParquetWriter(path, pa.schema([("row_id", pa.int64()), ("col_id", pa.string()),
                                               ("value", pa.float64())])) as writer:
            for lo in range(0, count, BATCH):
                n = min(BATCH, count - lo)
                rows = rng.integers(0, n_rows, size=n).astype(np.uint64)
                ids = ((rows * multiplier + offset) & np.uint64(2**62 - 1)).astype(np.int64)
                cols = rng.integers(0, n_cols, size=n)
                values = rng.standard_normal(n)
                total += float(values.sum())
                writer.write_table(pa.table({"row_id": ids, "col_id": vocabulary.take(cols), "value": values}),
                                   row_group_size=BATCH)
    size = sum(os.path.getsize(os.path.join(directory, f)) for f in os.listdir(directory))
    return {"files": n_files, "triplets": n_triplets, "bytes": size, "value_sum": total,
            "seconds": time.perf_counter() - start}


def peak_rss_bytes() -> int:
    """Peak resident memory of this process and of its waited-for children (bytes)."""
    own = children = 0
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    own = int(line.split()[1]) * 1024
    except OSError:  # not Linux
        pass
    own = max(own, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    return max(own, children)


def child_ingest(src: str, out: str) -> None:
    """Run in a fresh process: ingest, then print timings and this process's peak memory as JSON."""
    import scipy.sparse as sp

    from dppca_dask.ingest import ingest

    start = time.perf_counter()
    store = ingest(src, out, overwrite=True)
    seconds = time.perf_counter() - start
    peak = peak_rss_bytes()
    total = 0.0
    for part in store.partitions:  # check: the stored values add up to the generated ones
        block = store.read_partition(part.index)
        total += float(sp.csr_array(block).data.sum())
    print(json.dumps({"seconds": seconds, "peak_rss": peak, "n_rows": store.n_rows, "n_cols": store.n_cols,
                      "nnz": store.nnz, "n_partitions": store.n_partitions, "store_bytes": store.size_on_disk(),
                      "value_sum": total}))


def generate_svmlight(source: str, target: str, *, megabytes: float, seed: int) -> tuple[int, int]:
    """Repeat the rows of ``source`` with perturbed values until ``target`` has about ``megabytes`` MB; return its
    rows and bytes."""
    rng = np.random.default_rng(seed)
    with open(source, "rb") as handle:
        lines = [line for line in handle.read().splitlines() if line.strip()]
    rows = written = 0
    with open(target, "wb") as out:
        while written < megabytes * 1e6:
            scale = rng.uniform(0.5, 2.0, len(lines))
            for line, factor in zip(lines, scale):
                label, *pairs = line.split()
                text = b" ".join([label] + [b"%s:%.6g" % (i, float(v) * factor)
                                            for i, v in (p.split(b":") for p in pairs)]) + b"\n"
                out.write(text)
                written += len(text)
                rows += 1
    return rows, written


def compare_svmlight_parsers(source: str, workdir: str, *, megabytes: float, repeats: int, seed: int) -> int:
    """Ingest one generated file with both parsers, interleaved; print medians and the ratio."""
    import statistics

    from dppca_dask.ingest import _common
    from dppca_dask.ingest.svmlight import ingest_svmlight

    os.makedirs(workdir, exist_ok=True)
    src = os.path.join(workdir, "replicated.svm")
    start = time.perf_counter()
    rows, size = generate_svmlight(source, src, megabytes=megabytes, seed=seed)
    print(f"generated {rows:,} rows, {size / 1e6:.1f} MB of svmlight in {time.perf_counter() - start:.1f} s")
    times: dict[str, list[float]] = {"numpy": [], "sklearn": []}
    stores: dict[str, object] = {}
    for repeat in range(repeats):
        for parser in ("numpy", "sklearn") if repeat % 2 == 0 else ("sklearn", "numpy"):
            out = os.path.join(workdir, f"{parser}.zarr")
            shutil.rmtree(out, ignore_errors=True)
            options = _common.IngestOptions(out=out, progress=False)
            t0 = time.perf_counter()
            stores[parser] = ingest_svmlight(src, options, n_features=300, parser=parser)
            times[parser].append(time.perf_counter() - t0)
    a, b = (stores[p].to_scipy() for p in ("numpy", "sklearn"))  # type: ignore[attr-defined]
    same = a.shape == b.shape and (a != b).nnz == 0
    numpy_s, sklearn_s = statistics.median(times["numpy"]), statistics.median(times["sklearn"])
    print(f"numpy parser:   median {numpy_s:.2f} s over {repeats} ingests ({size / 1e6 / numpy_s:.0f} MB/s)")
    print(f"sklearn parser: median {sklearn_s:.2f} s over {repeats} ingests ({size / 1e6 / sklearn_s:.0f} MB/s)")
    print(f"stores equal: {'yes' if same else 'NO'}")
    print(f"ratio {numpy_s / sklearn_s:.2f}")
    return 0 if same else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="about 200 MB of Parquet instead of 2 GB")
    parser.add_argument("--size-gb", type=float, default=None, help="Parquet size to generate (default 2.1)")
    parser.add_argument("--files", type=int, default=8, help="number of Parquet files")
    parser.add_argument("--workdir", default=None, help="where data and store go (default: a new temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the generated data and the store")
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument("--child-ingest", nargs=2, metavar=("SRC", "OUT"), help=argparse.SUPPRESS)
    parser.add_argument("--svmlight", default=None, metavar="FILE.svm",
                        help="compare the svmlight parsers on a file generated from this one")
    parser.add_argument("--svmlight-mb", type=float, default=70.0, help="size of the generated svmlight file")
    parser.add_argument("--repeats", type=int, default=3, help="ingests per parser (--svmlight)")
    args = parser.parse_args(argv)
    if args.child_ingest:
        child_ingest(*args.child_ingest)
        return 0
    if args.svmlight:
        workdir = args.workdir or tempfile.mkdtemp(prefix="bench_ingest-")
        try:
            return compare_svmlight_parsers(args.svmlight, workdir, megabytes=args.svmlight_mb,
                                            repeats=args.repeats, seed=args.seed)
        finally:
            if not args.keep:
                shutil.rmtree(workdir, ignore_errors=True)

    size_gb = args.size_gb if args.size_gb is not None else (0.25 if args.quick else 2.1)
    n_triplets = int(size_gb * 2**30 / BYTES_PER_TRIPLET)
    n_rows = max(n_triplets // 25, 1)  # about 25 entries per row
    n_cols = 20_000 if args.quick else 100_000
    workdir = args.workdir or tempfile.mkdtemp(prefix="bench_ingest-")
    data, out = os.path.join(workdir, "triplets"), os.path.join(workdir, "store.zarr")
    try:
        if os.path.exists(data):
            shutil.rmtree(data)
        gen = generate(data, n_triplets=n_triplets, n_rows=n_rows, n_cols=n_cols, n_files=args.files,
                       seed=args.seed)
        print(f"generated {gen['triplets']:,} triplets in {gen['files']} files: {gen['bytes'] / 2**30:.2f} GiB of "
              f"Parquet in {gen['seconds']:.1f} s ({workdir})")
        env = dict(os.environ, OMP_NUM_THREADS="1")
        start = time.perf_counter()
        proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--child-ingest", data, out],
                                stdout=subprocess.PIPE, env=env)
        assert proc.stdout is not None
        output = proc.stdout.read()
        _pid, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - start
        if proc.returncode != 0:
            print(f"ingest failed with exit code {proc.returncode}", file=sys.stderr)
            return 1
        result = json.loads(output.decode().strip().splitlines()[-1])
        peak = max(result["peak_rss"], usage.ru_maxrss * 1024)
        print(f"ingested into {result['n_rows']:,} x {result['n_cols']:,} with {result['nnz']:,} stored entries, "
              f"{result['n_partitions']} partitions, store {result['store_bytes'] / 2**30:.2f} GiB")
        print(f"ingest time {result['seconds']:.1f} s ({gen['triplets'] / result['seconds'] / 1e6:.2f} M triplets/s); "
              f"process wall time with start-up and check {wall:.1f} s")
        print(f"peak RSS of the ingest process {peak / 2**20:.0f} MiB for {gen['bytes'] / 2**20:.0f} MiB of Parquet")
        ok = abs(result["value_sum"] - gen["value_sum"]) <= 1e-6 * max(1.0, abs(gen["value_sum"])) + 1e-6 * n_triplets
        print(f"check: sum of stored values {result['value_sum']:.6g} vs generated {gen['value_sum']:.6g}: "
              f"{'ok' if ok else 'MISMATCH'}")
        print(f"ratio {peak / gen['bytes']:.4f}")
        return 0 if ok else 1
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
