#!/usr/bin/env bash
# Start, stop and inspect a Dask scheduler and workers on 127.0.0.1. Run `local.sh --help` for usage.
set -euo pipefail

readonly PROG=${0##*/}
SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
readonly SCRIPT_DIR
readonly HOST=127.0.0.1
# Certificates, keys, scheduler files, logs and worker scratch space are owner-only (files 600, directories 700);
# the scheduler and the workers inherit this umask for what they write.
umask 077

usage() {
    cat <<EOF
Usage: $PROG start  [options]   start a scheduler and N workers on $HOST; print the scheduler address last
       $PROG stop   [options]   stop the workers, then the scheduler (SIGTERM, then SIGKILL after --timeout)
       $PROG status [options]   print the address and whether each process is alive

Options for every command:
  --run-dir DIR          where pid files, logs and the scheduler file live (default: .run/cluster, relative to the
                         current directory); one cluster per run directory
  --timeout SECONDS      start: how long to wait for the scheduler and all workers (default 60);
                         stop: how long to wait after SIGTERM before SIGKILL (default 10)

Options for start:
  --scheduler-port PORT  scheduler port (default 8786; 0 picks a free port, read it from the output,
                         DIR/address or DIR/scheduler.json)
  --dashboard-port PORT  serve the scheduler dashboard on $HOST:PORT (default: no dashboard; the scheduler's and
                         the workers' HTTP servers (/health, /metrics) still listen, on $HOST, free ports)
  --workers N            number of worker processes (default 2)
  --nthreads T           threads per worker (default 1)
  --memory-limit M       memory limit per worker, e.g. 2GiB, 500MB, 0 for none (default 2GiB)
  --no-nanny             run workers without a nanny process (default: each worker has a nanny that restarts it
                         and enforces the memory limit)
  --death-timeout S      a worker that has lost its scheduler for S seconds exits (default 60)
  --tls                  TLS on every connection, with the certificates in --cert-dir; the HTTP servers (dashboard,
                         /health, /metrics) of the scheduler and the workers serve HTTPS with the node certificate
  --cert-dir DIR         ca.pem, node.pem, node-key.pem (default: RUN_DIR/certs, made with make-certs.sh if absent)
  --python PATH          Python used for the readiness check (default: the Python of an active virtual
                         environment, else ./.venv/bin/python, else the project's .venv, else python3 on PATH)
  --dask PATH            the dask command (default: the dask next to --python, else dask on PATH,
                         else PYTHON -m dask)

Files in RUN_DIR:
  scheduler.json         Dask scheduler file (clients: Client(scheduler_file=...), dppca-dask pca --scheduler FILE)
  address                the scheduler address, one line
  client.env             shell variables for clients: DASK_SCHEDULER_ADDRESS and, with --tls, the Dask TLS settings
                         (set -a; . RUN_DIR/client.env; set +a)
  pids/NAME.pid          one per process group: scheduler, worker-0, worker-1, ...
  logs/NAME.log          their output
  work/                  worker scratch space (removed by stop)

Workers run with OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1: Dask provides the parallelism.
Everything listens on $HOST only: the RPC ports and every HTTP server. Files and directories in RUN_DIR are
owner-only (umask 077).

Exit status: 0 success; 1 failure (start prints the log tail); 2 usage error.
status: 0 running (scheduler and every worker alive), 1 degraded (some process dead), 3 not running.
EOF
}

die() {
    printf '%s: error: %s\n' "$PROG" "$*" >&2
    exit 1
}

usage_error() {
    printf '%s: error: %s\nTry %s --help.\n' "$PROG" "$*" "$PROG" >&2
    exit 2
}

note() { printf '%s: %s\n' "$PROG" "$*" >&2; }

have() { command -v "$1" >/dev/null 2>&1; }

# ---------------------------------------------------------------------------------------------------- options

command=""
run_dir=.run/cluster
timeout=""
scheduler_port=8786
dashboard_port=""
workers=2
nthreads=1
memory_limit=2GiB
nanny=1
death_timeout=60
tls=0
cert_dir=""
python=""
dask_exe=""

need_value() { (($1 >= 2)) || usage_error "$2 needs a value"; }

while (($#)); do
    opt=$1
    value=""
    has_inline=0
    if [[ $opt == --*=* ]]; then
        value=${opt#*=}
        opt=${opt%%=*}
        has_inline=1
    fi
    case $opt in
        -h | --help) usage; exit 0 ;;
        --tls | --no-nanny)
            ((!has_inline)) || usage_error "$opt takes no value"
            [[ $opt == --tls ]] && tls=1 || nanny=0
            shift
            continue
            ;;
        --run-dir | --timeout | --scheduler-port | --dashboard-port | --workers | --nthreads | --memory-limit | \
            --death-timeout | --cert-dir | --python | --dask)
            if ((!has_inline)); then
                need_value $# "$opt"
                value=$2
                shift
            fi
            shift
            case $opt in
                --run-dir) run_dir=$value ;;
                --timeout) timeout=$value ;;
                --scheduler-port) scheduler_port=$value ;;
                --dashboard-port) dashboard_port=$value ;;
                --workers) workers=$value ;;
                --nthreads) nthreads=$value ;;
                --memory-limit) memory_limit=$value ;;
                --death-timeout) death_timeout=$value ;;
                --cert-dir) cert_dir=$value ;;
                --python) python=$value ;;
                --dask) dask_exe=$value ;;
            esac
            continue
            ;;
        -*) usage_error "unknown option '$opt'" ;;
        start | stop | status)
            [[ -z $command ]] || usage_error "one command expected; got '$command' and '$opt'"
            command=$opt
            shift
            ;;
        *) usage_error "unknown command '$opt' (expected start, stop or status)" ;;
    esac
done

[[ -n $command ]] || usage_error "missing command (start, stop or status)"
[[ -n $run_dir ]] || usage_error "--run-dir must not be empty"

is_uint() { [[ $1 =~ ^[0-9]+$ ]]; }
is_port() { is_uint "$1" && ((10#$1 <= 65535)); }

if [[ -z $timeout ]]; then
    [[ $command == start ]] && timeout=60 || timeout=10
fi
is_uint "$timeout" || usage_error "--timeout must be a whole number of seconds; got '$timeout'"
timeout=$((10#$timeout))

if [[ $command == start ]]; then
    is_port "$scheduler_port" || usage_error "--scheduler-port must be 0-65535; got '$scheduler_port'"
    [[ -z $dashboard_port ]] || is_port "$dashboard_port" ||
        usage_error "--dashboard-port must be 0-65535; got '$dashboard_port'"
    [[ $workers =~ ^[1-9][0-9]*$ ]] || usage_error "--workers must be a positive integer; got '$workers'"
    [[ $nthreads =~ ^[1-9][0-9]*$ ]] || usage_error "--nthreads must be a positive integer; got '$nthreads'"
    [[ -n $memory_limit && $memory_limit != -* ]] ||
        usage_error "--memory-limit must be a size like 2GiB or 0; got '$memory_limit'"
    is_uint "$death_timeout" || usage_error "--death-timeout must be a whole number of seconds; got '$death_timeout'"
fi

# ---------------------------------------------------------------------------------------------------- run dir

pid_dir() { printf '%s/pids' "$run_dir"; }
log_dir() { printf '%s/logs' "$run_dir"; }

absolute_run_dir() {
    # Make RUN_DIR absolute; create it when $1 is "create".
    if [[ ${1-} == create ]]; then
        mkdir -p -- "$run_dir" "$run_dir/pids" "$run_dir/logs" || die "cannot create run directory '$run_dir'"
        # Owner-only even when they existed before with looser modes (umask 077 covers what is new).
        chmod 700 -- "$run_dir" "$run_dir/pids" "$run_dir/logs" || die "cannot make '$run_dir' owner-only"
        chmod 600 -- "$run_dir"/logs/*.log 2>/dev/null || true
    fi
    if [[ -d $run_dir ]]; then
        run_dir=$(cd -- "$run_dir" && pwd)
    fi
}

lock_run_dir() {
    # One start or stop at a time per run directory (fd 9 is closed for the processes we start).
    have flock || return 0
    exec 9>"$run_dir/.lock"
    flock -w 120 9 || die "another '$PROG' start or stop holds $run_dir/.lock"
}

# ---------------------------------------------------------------------------------------------------- processes

proc_state() {
    # What pid $1 is: "none" (no such process), "zombie", "dask" (runs a Dask command) or "other".
    local pid=$1 stat rest cmdline
    [[ $pid =~ ^[1-9][0-9]*$ ]] && kill -0 "$pid" 2>/dev/null || { echo none; return; }
    if [[ -r /proc/$pid/stat ]]; then
        { stat=$(<"/proc/$pid/stat"); } 2>/dev/null || { echo none; return; }
        rest=${stat##*) }
        [[ ${rest%% *} != Z ]] || { echo zombie; return; }
        cmdline=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null) || { echo none; return; }
        # A process just started may still be this script's subshell, before it execs setsid and dask.
        [[ $cmdline == *dask* || $cmdline == *"$0"* ]] || { echo other; return; }
    fi
    echo dask
}

alive() {
    # True when process $1 exists, is not a zombie and, where /proc tells, runs a Dask command.
    [[ $(proc_state "$1") == dask ]]
}

running() {
    # True when process $1, which this invocation started, exists and is not a zombie.
    case $(proc_state "$1") in
        none | zombie) return 1 ;;
    esac
    return 0
}

group_pids() {
    # Live (non-zombie) processes in process group $1, one pid a line.
    ps -e -o pid= -o pgid= -o stat= 2>/dev/null | awk -v g="$1" '$2 == g && $3 !~ /^Z/ { print $1 }'
}

group_alive() {
    # True when the process $1 we started, or any process of the group it leads, is alive. A live leader that
    # does not run Dask means the pid was reused by another program: not ours. A pid stays allocated while it
    # names a process group, so members of a group whose leader is gone are ours.
    case $(proc_state "$1") in
        dask) return 0 ;;
        other) return 1 ;;
    esac
    [[ -n $(group_pids "$1") ]]
}

now_ms() {
    # Milliseconds on a monotonic-enough clock (EPOCHREALTIME in bash 5, else whole seconds).
    if [[ -n ${EPOCHREALTIME-} ]]; then
        local t=${EPOCHREALTIME/[.,]/}
        printf '%s' "$((10#$t / 1000))"
    else
        printf '%s' "$((SECONDS * 1000))"
    fi
}

read_pid() {
    local file=$1 pid=""
    [[ -f $file ]] && { pid=$(<"$file"); } 2>/dev/null || true
    [[ $pid =~ ^[1-9][0-9]*$ ]] && printf '%s' "$pid"
    return 0
}

worker_pid_files() {
    local f
    for f in "$(pid_dir)"/worker-*.pid; do
        [[ -e $f ]] && printf '%s\n' "$f"
    done | sort -V
}

spawn() {
    # Run "$@" in the background in its own session (so stop can reach its children through the process group),
    # with output to logs/$1.log, and record its pid in pids/$1.pid.
    local name=$1 pid
    shift
    local log
    log="$(log_dir)/$name.log"
    printf '%s: %s\n' "$(date '+%Y-%m-%d %H:%M:%S')" "$*" >>"$log"
    if have setsid; then
        setsid "$@" </dev/null >>"$log" 2>&1 9>&- &
    else
        "$@" </dev/null >>"$log" 2>&1 9>&- &
    fi
    pid=$!
    printf '%s\n' "$pid" >"$(pid_dir)/$name.pid"
}

terminate() {
    # Send SIGTERM to each pid, wait up to $timeout seconds for them and their process groups to end, then SIGKILL
    # whatever is left. Arguments: pids.
    local pid deadline left
    (($#)) || return 0
    for pid in "$@"; do
        if alive "$pid"; then
            kill -TERM "$pid" 2>/dev/null || true
        else
            # The leader is gone but processes of its group are left (a nanny's worker): ask them.
            kill -TERM -- "-$pid" 2>/dev/null || true
        fi
    done
    deadline=$(($(now_ms) + timeout * 1000))
    while :; do
        left=()
        for pid in "$@"; do
            group_alive "$pid" && left+=("$pid")
        done
        ((${#left[@]})) || return 0
        (($(now_ms) < deadline)) || break
        sleep 0.2
    done
    note "still running after ${timeout}s, sending SIGKILL: ${left[*]}"
    for pid in "${left[@]}"; do
        kill -KILL -- "-$pid" 2>/dev/null || true
        alive "$pid" && kill -KILL "$pid" 2>/dev/null || true
    done
    deadline=$(($(now_ms) + 5000))
    while (($(now_ms) < deadline)); do
        left=()
        for pid in "$@"; do
            group_alive "$pid" && left+=("$pid")
        done
        ((${#left[@]})) || return 0
        sleep 0.1
    done
    note "warning: processes survived SIGKILL: ${left[*]}"
    return 1
}

stop_all() {
    # Workers first (their nannies close the worker processes), then the scheduler; remove pid files.
    local f pid pids=() files=() rc=0
    while IFS= read -r f; do
        files+=("$f")
        pid=$(read_pid "$f")
        [[ -n $pid ]] && group_alive "$pid" && pids+=("$pid")
    done < <(worker_pid_files)
    terminate "${pids[@]+"${pids[@]}"}" || rc=1

    f="$(pid_dir)/scheduler.pid"
    files+=("$f")
    pid=$(read_pid "$f")
    if [[ -n $pid ]] && group_alive "$pid"; then
        terminate "$pid" || rc=1
    fi
    # Pid files stay while a process survives, so that a later stop can try again.
    ((rc)) && return "$rc"
    rm -f -- "${files[@]}" "$run_dir/address" "$run_dir/client.env" "$run_dir/scheduler.json"
    rm -rf -- "$run_dir/work"
    return 0
}

# ---------------------------------------------------------------------------------------------------- start

resolve_executables() {
    local candidate dir
    if [[ -z $python && -n $dask_exe ]]; then
        dir=$(dirname -- "$(command -v -- "$dask_exe" 2>/dev/null || printf '%s' "$dask_exe")")
        for candidate in "$dir/python" "$dir/python3"; do
            [[ -x $candidate ]] && { python=$candidate; break; }
        done
    fi
    if [[ -z $python ]]; then
        for candidate in ${VIRTUAL_ENV:+"$VIRTUAL_ENV/bin/python"} ./.venv/bin/python \
            "$SCRIPT_DIR/../.venv/bin/python"; do
            [[ -x $candidate ]] && { python=$candidate; break; }
        done
    fi
    if [[ -z $python ]]; then
        python=$(command -v python3 || command -v python || true)
    fi
    [[ -n $python ]] || die "no Python found; pass --python PATH"
    python=$(command -v -- "$python" 2>/dev/null) || die "--python '$python' is not an executable"
    "$python" -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec("distributed") is None)' 2>/dev/null ||
        die "$python cannot import distributed; pass --python with a Python that has dask[distributed]"

    if [[ -n $dask_exe ]]; then
        local exe
        exe=$(command -v -- "$dask_exe" 2>/dev/null) || die "--dask '$dask_exe' is not an executable"
        dask_cmd=("$exe")
    elif [[ -x $(dirname -- "$python")/dask ]]; then
        dask_cmd=("$(dirname -- "$python")/dask")
    elif have dask; then
        dask_cmd=("$(command -v dask)")
    else
        dask_cmd=("$python" -m dask)
    fi
}

log_tail() {
    # The exception lines and the last lines of each named log, and hints for the usual causes.
    local name log errors
    for name in "$@"; do
        log="$(log_dir)/$name.log"
        [[ -s $log ]] || continue
        errors=$(grep -E '^[A-Za-z_][A-Za-z0-9_.]*(Error|Exception)(:|$)' "$log" | head -n 5 || true)
        if [[ -n $errors ]]; then
            printf '\n--- errors in %s ---\n%s\n' "$log" "$errors" >&2
        fi
        printf '\n--- last lines of %s ---\n' "$log" >&2
        tail -n 20 "$log" >&2
        if grep -q 'Address already in use' "$log"; then
            printf '\nhint: port %s on %s is taken (another cluster?); use --scheduler-port 0 for a free one\n' \
                "$scheduler_port" "$HOST" >&2
        fi
    done
}

start_failed() {
    # $1: message; remaining arguments: names of the logs to show.
    local message=$1
    shift
    printf '%s: error: %s\n' "$PROG" "$message" >&2
    log_tail "$@"
    note "stopping what was started"
    timeout=10
    stop_all >/dev/null 2>&1 || true
    started=0
    exit 1
}

on_start_exit() {
    # An interrupted or failed start leaves nothing running.
    local rc=$?
    if ((started)) && ((!start_done)); then
        # The readiness check runs in the background (SIGINT ignored there): it would wait out its timeout.
        [[ -n $waiter ]] && kill "$waiter" 2>/dev/null || true
        timeout=10
        stop_all >/dev/null 2>&1 || true
    fi
    return "$rc"
}

# Python run by start: connect a client and wait until N workers are connected.
# shellcheck disable=SC2016
readonly WAIT_FOR_WORKERS='
import sys
from distributed import Client
from distributed.security import Security

address, n, timeout, ca, cert, key = sys.argv[1:7]
n, timeout = int(n), float(timeout)
security = None
if ca:
    security = Security(tls_ca_file=ca, tls_client_cert=cert, tls_client_key=key, require_encryption=True)
with Client(address, security=security, timeout=timeout, set_as_default=False) as client:
    try:
        client.wait_for_workers(n, timeout=timeout)
    except TimeoutError:
        print(f"{len(client.nthreads())} of {n} workers connected after {timeout:g}s", file=sys.stderr)
        sys.exit(1)
    print(len(client.nthreads()))
'

cmd_start() {
    local pid f existing=() ca="" cert="" key="" address="" deadline dead

    absolute_run_dir create
    lock_run_dir

    # Refuse a second start; clear what a crashed cluster left behind.
    for f in "$(pid_dir)"/*.pid; do
        [[ -e $f ]] || continue
        pid=$(read_pid "$f")
        if [[ -n $pid ]] && group_alive "$pid"; then
            existing+=("$(basename "$f" .pid)=$pid")
        fi
    done
    if ((${#existing[@]})); then
        local running_at
        running_at=$(cat "$run_dir/address" 2>/dev/null || echo unknown)
        die "a cluster is already running in $run_dir (${existing[*]}; address $running_at);" \
            "run '$PROG stop --run-dir $run_dir' first"
    fi
    if compgen -G "$(pid_dir)/*.pid" >/dev/null; then
        note "removing stale pid files of a cluster that is no longer running"
        rm -f -- "$(pid_dir)"/*.pid
    fi
    rm -f -- "$run_dir/scheduler.json" "$run_dir/address" "$run_dir/client.env"

    resolve_executables

    local tls_args=()
    if ((tls)); then
        [[ -n $cert_dir ]] || cert_dir=$run_dir/certs
        if [[ ! -s $cert_dir/ca.pem || ! -s $cert_dir/node.pem || ! -s $cert_dir/node-key.pem ]]; then
            note "no certificates in $cert_dir; making them with make-certs.sh"
            bash "$SCRIPT_DIR/make-certs.sh" "$cert_dir" 9>&- >&2 || die "could not make certificates in $cert_dir"
        fi
        cert_dir=$(cd -- "$cert_dir" && pwd)
        ca=$cert_dir/ca.pem
        cert=$cert_dir/node.pem
        key=$cert_dir/node-key.pem
        for f in "$ca" "$cert" "$key"; do
            [[ -r $f ]] || die "cannot read $f (TLS needs ca.pem, node.pem and node-key.pem in --cert-dir)"
        done
        tls_args=(--tls-ca-file "$ca" --tls-cert "$cert" --tls-key "$key")
        # distributed serves the HTTP server of every scheduler and worker over TLS when these are set
        # (distributed/node.py reads distributed.scheduler.dashboard.tls.* for both); --tls-* do not cover it.
        export DASK_DISTRIBUTED__SCHEDULER__DASHBOARD__TLS__CA_FILE=$ca
        export DASK_DISTRIBUTED__SCHEDULER__DASHBOARD__TLS__CERT=$cert
        export DASK_DISTRIBUTED__SCHEDULER__DASHBOARD__TLS__KEY=$key
    fi

    # One BLAS/OpenMP thread per process: the workers' threads are the parallelism.
    export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1
    # glibc's heap as the embedded cluster's workers have it (dppca_dask.cluster.worker-environ): a step's
    # temporaries reuse heap memory instead of fresh zero-filled mappings (the private step 10-17% faster).
    export MALLOC_MMAP_THRESHOLD_=33554432 MALLOC_TRIM_THRESHOLD_=67108864
    # Dask settings as the embedded cluster has them (dppca_dask.cluster.dask-config): no statistical profiler on
    # the workers (its dashboard page shows which code paths a step took, which depend on the data) and event-loop
    # checks once a second instead of every 20 ms. Values already in the environment are kept (to profile a run).
    export DASK_DISTRIBUTED__WORKER__PROFILE__ENABLED="${DASK_DISTRIBUTED__WORKER__PROFILE__ENABLED:-False}"
    export DASK_DISTRIBUTED__ADMIN__TICK__INTERVAL="${DASK_DISTRIBUTED__ADMIN__TICK__INTERVAL:-1s}"

    started=1
    start_done=0
    trap on_start_exit EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM

    local scheduler_args=(scheduler --host "$HOST" --port "$scheduler_port" --scheduler-file "$run_dir/scheduler.json")
    ((tls)) && scheduler_args+=(--protocol tls "${tls_args[@]}")
    # The scheduler starts its HTTP server even with --no-dashboard, on its default ":8787" (every interface)
    # unless told where: always give it $HOST.
    if [[ -n $dashboard_port ]]; then
        scheduler_args+=(--dashboard --dashboard-address "$HOST:$dashboard_port")
    else
        scheduler_args+=(--no-dashboard --dashboard-address "$HOST:0")
    fi
    : >"$(log_dir)/scheduler.log"
    spawn scheduler "${dask_cmd[@]}" "${scheduler_args[@]}"
    local scheduler_pid
    scheduler_pid=$(read_pid "$(pid_dir)/scheduler.pid")

    # The scheduler writes its file once it listens; port 0 becomes the chosen port there.
    deadline=$(($(now_ms) + timeout * 1000))
    while :; do
        if [[ -s $run_dir/scheduler.json ]]; then
            address=$("$python" -c 'import json, sys; print(json.load(open(sys.argv[1]))["address"])' \
                "$run_dir/scheduler.json" 2>/dev/null) || address=""
            [[ -n $address ]] && break
        fi
        running "$scheduler_pid" || start_failed "the scheduler exited during startup" scheduler
        (($(now_ms) < deadline)) || start_failed "the scheduler did not start within ${timeout}s" scheduler
        sleep 0.1
    done
    note "scheduler $address (pid $scheduler_pid), log $(log_dir)/scheduler.log"

    local worker_args=(worker "$address" --host "$HOST" --nthreads "$nthreads" --memory-limit "$memory_limit"
        --no-dashboard --dashboard-address "$HOST:0" --local-directory "$run_dir/work")
    ((nanny)) && worker_args+=(--nanny) || worker_args+=(--no-nanny)
    ((10#$death_timeout > 0)) && worker_args+=(--death-timeout "$death_timeout")
    ((tls)) && worker_args+=("${tls_args[@]}")
    mkdir -p -- "$run_dir/work"
    local i worker_pids=()
    for ((i = 0; i < workers; i++)); do
        : >"$(log_dir)/worker-$i.log"
        spawn "worker-$i" "${dask_cmd[@]}" "${worker_args[@]}" --name "worker-$i"
        worker_pids+=("$(read_pid "$(pid_dir)/worker-$i.pid")")
    done

    # Wait until every worker is connected, watching that no process dies meanwhile.
    local remaining=$(((deadline - $(now_ms)) / 1000))
    ((remaining > 1)) || remaining=1
    : >"$(log_dir)/start.log"
    "$python" -c "$WAIT_FOR_WORKERS" "$address" "$workers" "$remaining" "$ca" "$cert" "$key" \
        </dev/null >"$(log_dir)/start.log" 2>&1 9>&- &
    waiter=$!
    while kill -0 "$waiter" 2>/dev/null; do
        dead=()
        running "$scheduler_pid" || dead+=(scheduler)
        for ((i = 0; i < workers; i++)); do
            running "${worker_pids[$i]}" || dead+=("worker-$i")
        done
        if ((${#dead[@]})); then
            kill "$waiter" 2>/dev/null || true
            wait "$waiter" 2>/dev/null || true
            start_failed "exited during startup: ${dead[*]}" "${dead[@]}"
        fi
        if (($(now_ms) > deadline + 15000)); then
            kill "$waiter" 2>/dev/null || true
            wait "$waiter" 2>/dev/null || true
            start_failed "the readiness check did not finish" start
        fi
        sleep 0.2
    done
    if ! wait "$waiter"; then
        local names=(start scheduler)
        for ((i = 0; i < workers; i++)); do names+=("worker-$i"); done
        start_failed "not all $workers workers connected to $address within ${timeout}s" "${names[@]}"
    fi

    printf '%s\n' "$address" >"$run_dir/address"
    {
        printf '# Dask client settings for the cluster in %s (set -a; . client.env; set +a)\n' "$run_dir"
        printf 'DASK_SCHEDULER_ADDRESS=%q\n' "$address"
        if ((tls)); then
            printf 'DASK_DISTRIBUTED__COMM__REQUIRE_ENCRYPTION=True\n'
            printf 'DASK_DISTRIBUTED__COMM__TLS__CA_FILE=%q\n' "$ca"
            printf 'DASK_DISTRIBUTED__COMM__TLS__CLIENT__CERT=%q\n' "$cert"
            printf 'DASK_DISTRIBUTED__COMM__TLS__CLIENT__KEY=%q\n' "$key"
        fi
    } >"$run_dir/client.env"

    local mode="with a nanny each"
    ((nanny)) || mode="without nannies"
    note "$workers workers connected (pids ${worker_pids[*]})," \
        "$nthreads thread(s) and memory limit $memory_limit each, $mode"
    if [[ -n $dashboard_port ]]; then
        local dash
        dash=$("$python" -c 'import json, sys; print(json.load(open(sys.argv[1]))["services"]["dashboard"])' \
            "$run_dir/scheduler.json" 2>/dev/null) || dash=$dashboard_port
        local scheme=http
        ((tls)) && scheme=https
        if "$python" -c 'import importlib.util as u, sys; sys.exit(u.find_spec("bokeh") is None)' 2>/dev/null; then
            note "dashboard $scheme://$HOST:$dash/status"
        else
            note "dashboard port $HOST:$dash serves $scheme /health; its pages need bokeh installed"
        fi
    fi
    start_done=1
    printf '%s\n' "$address"
}

# ---------------------------------------------------------------------------------------------------- stop, status

cmd_stop() {
    absolute_run_dir
    if [[ ! -d $run_dir/pids ]] || ! compgen -G "$run_dir/pids/*.pid" >/dev/null; then
        note "no cluster in $run_dir; nothing to stop"
        return 0
    fi
    lock_run_dir
    if stop_all; then
        note "stopped the cluster in $run_dir"
    else
        die "some processes of the cluster in $run_dir could not be stopped"
    fi
}

cmd_status() {
    absolute_run_dir
    local f pid name total=0 up=0 address
    address=$(cat "$run_dir/address" 2>/dev/null || true)
    if [[ ! -d $run_dir/pids ]] || ! compgen -G "$run_dir/pids/*.pid" >/dev/null; then
        printf 'address: none\nstate: stopped (no cluster in %s)\n' "$run_dir"
        return 3
    fi
    printf 'address: %s\n' "${address:-unknown}"
    local files=("$run_dir/pids/scheduler.pid")
    while IFS= read -r f; do files+=("$f"); done < <(worker_pid_files)
    for f in "${files[@]}"; do
        [[ -e $f ]] || continue
        name=$(basename "$f" .pid)
        pid=$(read_pid "$f")
        total=$((total + 1))
        if [[ -n $pid ]] && alive "$pid"; then
            up=$((up + 1))
            printf '%-12s pid %-8s alive\n' "$name" "$pid"
        else
            printf '%-12s pid %-8s dead\n' "$name" "${pid:-?}"
        fi
    done
    if ((up == total)) && [[ -e $run_dir/pids/scheduler.pid ]]; then
        printf 'state: running (%d workers)\n' "$((total - 1))"
        return 0
    elif ((up == 0)); then
        printf 'state: stopped (stale pid files; %s stop --run-dir %s removes them)\n' "$PROG" "$run_dir"
        return 3
    fi
    printf 'state: degraded (%d of %d processes alive)\n' "$up" "$total"
    return 1
}

started=0
start_done=0
waiter=""  # pid of start's readiness check while it runs
dask_cmd=()
case $command in
    start) cmd_start ;;
    stop) cmd_stop ;;
    status) cmd_status ;;
esac
