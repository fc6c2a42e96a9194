"""Deploy examples that cannot run here (SLURM, Kubernetes, docker compose): parsed and checked statically."""

from __future__ import annotations

import importlib.util
import py_compile
import re
import signal
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml
from _local_cluster import CLUSTER_DIR, REPO, local_sh

from dppca_dask.coordinator.client import cluster_dask_config

OLD_COMMANDS = re.compile(r"(?<![\w.])dask-(scheduler|worker)(?![\w-])")
THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
#: The heap settings every deployment gives its workers: the embedded cluster's (the package's defaults).
HEAP_VARS = {str(k): str(v) for k, v in yaml.safe_load(
    (REPO / "dppca_dask" / "dppca_dask.yaml").read_text())["dppca_dask"]["cluster"]["worker-environ"].items()}
#: The Dask settings every deployment gives its workers: the embedded cluster's (no statistical profiler, whose
#: dashboard page shows which code paths a step took; event-loop checks once a second), as the environment
#: variables Dask reads them from.
DASK_VARS = {"DASK_" + key.upper().replace("-", "_").replace(".", "__"): str(value)
             for key, value in cluster_dask_config().items()}
assert DASK_VARS  # (the checks below would pass on an empty dict)


@pytest.fixture(autouse=True)
def _sigint_handler_kept() -> Iterator[None]:
    """Importing dask-jobqueue (the SLURM example does) replaces this process's SIGINT handler with one calling
    ``sys.exit()`` (``dask_jobqueue/runner.py``, at import): put the test process's back."""
    handler = signal.getsignal(signal.SIGINT)
    yield
    if handler is not None:
        signal.signal(signal.SIGINT, handler)


def _no_old_command(args: list[str]) -> None:
    for arg in args:
        assert not OLD_COMMANDS.search(str(arg)), f"removed console script in {args}"


# ---------------------------------------------------------------------------------------------- docker compose


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load((CLUSTER_DIR / "docker-compose.yml").read_text())


def _env_dict(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment", {})
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {str(k): str(v) for k, v in env.items()}


def _volume_paths(volume: str) -> tuple[str, str]:
    """``"SRC:DST[:MODE]"`` -> ``(SRC, DST)``; SRC may hold ``${VAR:-default}``."""
    head, _, mode = volume.rpartition(":")
    if mode in ("ro", "rw"):
        volume = head
    source, _, target = volume.rpartition(":")
    return source, target


def test_compose_has_a_scheduler_two_workers_and_a_client(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert set(services) == {"scheduler", "worker-1", "worker-2", "client"}
    for name, service in services.items():
        assert service["image"] == "dppca-dask:0.1.0", name
        assert service["build"] == {"context": "..", "dockerfile": "cluster/Dockerfile"}, name
        assert isinstance(service["command"], list), name
        _no_old_command(service["command"])
        env = _env_dict(service)
        assert all(env.get(var) == "1" for var in THREAD_VARS), (name, env)
        assert {k: env.get(k) for k in HEAP_VARS} == HEAP_VARS, (name, env)
        assert {k: env.get(k) for k in DASK_VARS} == DASK_VARS, (name, env)
        for dependency in service.get("depends_on", {}):
            assert dependency in services, (name, dependency)

    scheduler = services["scheduler"]
    assert scheduler["command"][:2] == ["dask", "scheduler"]
    assert "8786" in scheduler["command"]
    assert all(port.startswith("127.0.0.1:") for port in scheduler["ports"]), "publish on the host's loopback only"
    assert "/health" in " ".join(scheduler["healthcheck"]["test"])

    for name in ("worker-1", "worker-2"):
        command = services[name]["command"]
        assert command[:3] == ["dask", "worker", "tcp://scheduler:8786"], command
        for option in ("--nthreads", "--memory-limit", "--name"):
            assert option in command, (name, option)
        assert command[command.index("--name") + 1] == name
        assert services[name]["depends_on"]["scheduler"]["condition"] == "service_healthy"
        assert any(v.endswith(":/data:ro") for v in services[name]["volumes"])

    client = services["client"]
    assert client["command"][:3] == ["dppca-dask", "run", "/jobs/compose-demo.toml"]
    assert (REPO / "jobs" / "compose-demo.toml").is_file()
    assert client["profiles"] == ["job"]
    assert _env_dict(client)["DASK_SCHEDULER_ADDRESS"] == "tcp://scheduler:8786"
    mounts = {_volume_paths(v)[1] for v in client["volumes"]}
    assert {"/jobs", "/data"} <= mounts


def test_compose_paths_exist(compose: dict[str, Any]) -> None:
    build = compose["services"]["scheduler"]["build"]
    context = (CLUSTER_DIR / build["context"]).resolve()
    assert context == REPO
    assert (context / build["dockerfile"]).is_file()
    for volume in compose["services"]["client"]["volumes"]:
        source = _volume_paths(volume)[0]
        if source.startswith(".") and "$" not in source:
            assert (CLUSTER_DIR / source).resolve().is_dir(), source


def _dockerfile_instructions(text: str) -> list[tuple[str, str]]:
    """``[(INSTRUCTION, arguments)]`` with comments dropped and continuation lines joined."""
    out: list[tuple[str, str]] = []
    pending = ""
    for line in text.splitlines():
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        op, _, rest = (pending + line).strip().partition(" ")
        out.append((op, rest.strip()))
        pending = ""
    assert not pending, "dangling line continuation"
    return out


def test_dockerfile_installs_the_package_and_starts_the_scheduler() -> None:
    text = (CLUSTER_DIR / "Dockerfile").read_text()
    instructions = _dockerfile_instructions(text)
    assert all(op.isupper() for op, _ in instructions), instructions
    assert instructions[0][0] == "FROM" and instructions[0][1].startswith("python:3.")
    env = [rest for op, rest in instructions if op == "ENV"]
    copied = [src for op, rest in instructions if op == "COPY" for src in rest.split()[:-1]]
    # The package sources exist, and the readme copied is the one pyproject names (pip needs it to build).
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    for src in copied:
        if src == pyproject["project"]["readme"]:
            continue
        assert (REPO / src).exists(), src
    assert pyproject["project"]["readme"] in copied
    assert any(op == "RUN" and "pip install" in rest for op, rest in instructions)
    # The extras it installs exist (pip only warns about an unknown one); numba's compiled loops come with the
    # package (a dependency), object storage with the s3 extra.
    extras = {name for op, rest in instructions if op == "RUN"
              for group in re.findall(r'"\.\[([^\]]*)\]"', rest) for name in group.split(",")}
    assert "s3" in extras and extras <= set(pyproject["project"]["optional-dependencies"]), extras
    assert any(dependency.startswith("numba") for dependency in pyproject["project"]["dependencies"])
    assert any(op == "USER" and rest.strip() != "root" for op, rest in instructions), "run as a non-root user"
    for var in THREAD_VARS:
        assert any(re.search(rf"\b{var}=1\b", rest) for rest in env), var
    for var, value in {**HEAP_VARS, **DASK_VARS}.items():
        assert any(re.search(rf"\b{var}={value}(\s|$)", rest) for rest in env), var
    cmd = [rest for op, rest in instructions if op == "CMD"][-1]
    assert cmd.startswith('["dask", "scheduler"')
    _no_old_command([rest for _, rest in instructions])
    # The ignore file next to the Dockerfile lets every copied path through.
    ignore = (CLUSTER_DIR / "Dockerfile.dockerignore").read_text().splitlines()
    assert "*" in ignore
    for src in copied:
        assert f"!{src.rstrip('/')}" in ignore or f"!{src.rstrip('/')}/" in ignore, src


# ---------------------------------------------------------------------------------------------- Kubernetes


def _k8s(name: str) -> list[dict[str, Any]]:
    docs = [doc for doc in yaml.safe_load_all((CLUSTER_DIR / "kubernetes" / name).read_text()) if doc]
    assert docs, name
    return docs


def _check_pod_spec(spec: dict[str, Any], role: str) -> dict[str, Any]:
    """Checks shared by every pod spec; returns its first container."""
    containers = spec["containers"]
    assert containers, role
    container = containers[0]
    assert container["image"] and container["name"]
    args = [str(a) for a in container["args"]]
    _no_old_command(args)
    volumes = {v["name"] for v in spec.get("volumes", [])}
    for mount in container.get("volumeMounts", []):
        assert mount["name"] in volumes, (role, mount)
    return container


def _check_dask_cluster_spec(spec: dict[str, Any], cluster_name: str) -> None:
    worker = spec["worker"]
    assert isinstance(worker["replicas"], int) and worker["replicas"] >= 1
    container = _check_pod_spec(worker["spec"], "worker")
    args = [str(a) for a in container["args"]]
    assert args[:2] == ["dask", "worker"]
    assert "$(DASK_WORKER_NAME)" in args
    for option in ("--nthreads", "--memory-limit"):
        assert option in args, option
    env = {e["name"]: e["value"] for e in container["env"]}
    assert all(env.get(var) == "1" for var in THREAD_VARS), env
    assert {k: env.get(k) for k in HEAP_VARS} == HEAP_VARS, env
    assert {k: env.get(k) for k in DASK_VARS} == DASK_VARS, env
    # The Dask memory limit fits in the pod's memory limit.
    limit = container["resources"]["limits"]["memory"]
    assert limit.endswith("Gi") and args[args.index("--memory-limit") + 1].endswith("GiB")
    assert int(args[args.index("--memory-limit") + 1][:-3]) < int(limit[:-2])

    scheduler = spec["scheduler"]
    container = _check_pod_spec(scheduler["spec"], "scheduler")
    assert [str(a) for a in container["args"]][:2] == ["dask", "scheduler"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"tcp-comm": 8786, "http-dashboard": 8787}
    assert container["readinessProbe"]["httpGet"]["path"] == "/health"
    service = scheduler["service"]
    assert service["selector"] == {"dask.org/cluster-name": cluster_name, "dask.org/component": "scheduler"}
    assert {p["name"]: p["port"] for p in service["ports"]}["tcp-comm"] == 8786


def test_daskcluster_resource() -> None:
    (doc,) = _k8s("daskcluster.yaml")
    assert doc["apiVersion"] == "kubernetes.dask.org/v1"
    assert doc["kind"] == "DaskCluster"
    _check_dask_cluster_spec(doc["spec"], doc["metadata"]["name"])


def test_daskjob_resource_runs_a_dppca_job() -> None:
    (doc,) = _k8s("daskjob.yaml")
    assert doc["apiVersion"] == "kubernetes.dask.org/v1"
    assert doc["kind"] == "DaskJob"
    job_pod = doc["spec"]["job"]["spec"]
    container = _check_pod_spec(job_pod, "job")
    assert container["args"] == ["dppca-dask", "run", "/jobs/example.toml"]
    assert job_pod["restartPolicy"] == "Never"
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in job_pod["volumes"]}
    assert volumes[mounts["/jobs"]]["configMap"]["name"] == "dppca-jobs"
    # The operator names the job's cluster after the job.
    _check_dask_cluster_spec(doc["spec"]["cluster"]["spec"], doc["metadata"]["name"])


# ---------------------------------------------------------------------------------------------- SLURM

SLURM_EXAMPLE = CLUSTER_DIR / "slurm" / "slurm_cluster.py"


def _load_slurm_example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("dppca_slurm_cluster_example", SLURM_EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_slurm_example_compiles_and_shows_help(tmp_path: Path) -> None:
    py_compile.compile(str(SLURM_EXAMPLE), cfile=str(tmp_path / "x.pyc"), doraise=True)
    proc = subprocess.run([sys.executable, str(SLURM_EXAMPLE), "--help"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    for option in ("--jobs", "--cores", "--memory", "--walltime", "--tls-dir", "--print-job-script"):
        assert option in proc.stdout


def test_slurm_example_environment_for_the_job_command(tmp_path: Path) -> None:
    module = _load_slurm_example()
    args = module.build_parser().parse_args(["--tls-dir", str(tmp_path), "--", "dppca-dask", "run", "job.toml"])
    assert args.command[-3:] == ["dppca-dask", "run", "job.toml"]
    env = module.client_environment("tls://10.0.0.1:8786", args)
    assert env["DASK_SCHEDULER_ADDRESS"] == "tls://10.0.0.1:8786"
    assert env["DASK_DISTRIBUTED__COMM__TLS__CA_FILE"] == str(tmp_path.resolve() / "ca.pem")
    assert env["DASK_DISTRIBUTED__COMM__REQUIRE_ENCRYPTION"] == "True"


@pytest.mark.skipif(
    importlib.util.find_spec("dask_jobqueue") is not None, reason="dask-jobqueue is installed: no error to check"
)
def test_slurm_example_says_how_to_install_dask_jobqueue() -> None:
    proc = subprocess.run(
        [sys.executable, str(SLURM_EXAMPLE), "--print-job-script"], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 1
    assert "pip install 'dask-jobqueue>=0.8.3'" in proc.stderr


def test_slurm_example_renders_its_job_script(tmp_path: Path) -> None:
    if importlib.util.find_spec("dask_jobqueue") is None:
        pytest.skip("dask-jobqueue is not installed; the SLURM job script cannot be rendered")
    module = _load_slurm_example()
    args = module.build_parser().parse_args(
        ["--jobs", "2", "--cores", "4", "--processes", "2", "--memory", "16GiB", "--walltime", "00:20:00",
         "--queue", "normal", "--account", "proj", "--interface", "lo", "--dashboard-address", ":0",
         "--prologue", "source /shared/venv/bin/activate", "--python", "/shared/venv/bin/python"]
    )  # fmt: skip
    with module.make_cluster(args) as cluster:
        script = cluster.job_script()
        assert cluster.scheduler._tick_interval == 1.0  # (seconds) the scheduler, in this process, as the workers
    lines = script.splitlines()
    assert lines[0].startswith("#!")
    for directive in ("#SBATCH -p normal", "#SBATCH -A proj", "#SBATCH -t 00:20:00", "#SBATCH --cpus-per-task=4"):
        assert directive in lines, directive
    worker_line = next(line for line in lines if "distributed.cli.dask_worker" in line)
    assert worker_line.startswith("/shared/venv/bin/python -m distributed.cli.dask_worker ")
    for option in ("--nthreads 2", "--nworkers 2", "--memory-limit 8.00GiB", "--nanny"):
        assert option in worker_line, option
    prologue = lines[: lines.index(worker_line)]
    for var in THREAD_VARS:
        assert f"export {var}=1" in prologue, var
    for var, value in {**HEAP_VARS, **DASK_VARS}.items():
        assert f"export {var}={value}" in prologue, var
    assert prologue.index("export OMP_NUM_THREADS=1") < prologue.index("source /shared/venv/bin/activate")
    _no_old_command(lines)


# ---------------------------------------------------------------------------------------------- README


def test_readme_documents_every_start_option_and_target() -> None:
    readme = (CLUSTER_DIR / "README.md").read_text()
    help_text = local_sh("--help", timeout=30).stdout
    documented = set(re.findall(r"^\| `(--[a-z-]+)", readme, flags=re.MULTILINE))
    offered = set(re.findall(r"^\s+(--[a-z-]+)", help_text, flags=re.MULTILINE))
    assert offered - {"--help"} <= documented | {"--dask", "--cert-dir"}, offered - documented
    assert documented <= offered, documented - offered
    for heading in ("## Submitting a job", "## TLS", "## SLURM", "## Kubernetes", "## Docker compose",
                    "## Troubleshooting"):  # fmt: skip
        assert heading in readme, heading
    for words in ("dppca-dask run", "dppca-dask pca", "[cluster]", "Address already in use", "OMP_NUM_THREADS",
                  "--memory-limit"):  # fmt: skip
        assert words in readme, words


# ------------------------------------------------------------------------------------------ object storage
AWS_VARS = ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_DEFAULT_REGION")


def test_compose_passes_the_object_storage_variables_through(compose: dict[str, Any]) -> None:
    """Every container (workers read a bucket themselves) gets the host's AWS variables when they are set there:
    a key without a value, which compose fills from its own environment and leaves unset otherwise."""
    for name, service in compose["services"].items():
        env = service["environment"]
        for var in AWS_VARS:
            assert var in env and env[var] is None, (name, var, env.get(var))


def test_kubernetes_workers_and_job_read_the_object_storage_secret() -> None:
    def secret_refs(container: dict[str, Any]) -> list[dict[str, Any]]:
        return [e["secretRef"] for e in container.get("envFrom", []) if "secretRef" in e]

    (cluster,) = _k8s("daskcluster.yaml")
    (job,) = _k8s("daskjob.yaml")
    containers = [cluster["spec"]["worker"]["spec"]["containers"][0], job["spec"]["job"]["spec"]["containers"][0],
                  job["spec"]["cluster"]["spec"]["worker"]["spec"]["containers"][0]]
    for container in containers:
        assert {"name": "dppca-object-storage", "optional": True} in secret_refs(container), container["name"]


def test_the_image_reads_object_storage() -> None:
    assert ".[anndata,s3]" in (CLUSTER_DIR / "Dockerfile").read_text()
