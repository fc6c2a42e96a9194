"""Which processes a test session started, and killing what is left of them (Linux ``/proc``).

The root ``conftest.py`` marks the session: ``DPPCA_TEST_SESSION=<pid>-<random>`` in this process's environment,
which every process started afterwards inherits, directly or not, also when it runs in a session of its own (the
scheduler and workers of ``cluster/local.sh``) or is re-parented after its parent exits. A process carries the mark
exactly when the session started it, so it is safe to signal even when its pid was recorded long ago.

A reaper (``start_reaper``) waits, in a session of its own and without the mark, for this process to close a pipe:
when this process ends in any way (also SIGKILL, or SIGTERM without cleanup), it kills every process with the mark.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid

__all__ = [
    "SESSION_MARK",
    "deaf_to_sigint",
    "describe",
    "handles_sigint",
    "kill_processes",
    "mark_this_session",
    "session_mark",
    "session_processes",
    "start_reaper",
    "started_here",
    "stop_reaper",
    "this_process_deaf_to_sigint",
]

#: The environment variable that marks the processes of a test session.
SESSION_MARK = "DPPCA_TEST_SESSION"


def mark_this_session() -> str:
    """Set this process's mark (a fresh one, so that a test session started by a test has its own)."""
    os.environ[SESSION_MARK] = f"{os.getpid()}-{uuid.uuid4().hex[:12]}"
    return session_mark()


def session_mark() -> str:
    """``NAME=VALUE`` of this session's mark."""
    return f"{SESSION_MARK}={os.environ[SESSION_MARK]}"


def _carries(pid: int, mark: bytes) -> bool:
    """Whether process ``pid`` runs (not a zombie) with ``mark`` in its environment."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as environ:
            if mark not in environ.read().split(b"\0"):
                return False
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rpartition(b")")[2].split()[0] != b"Z"
    except (OSError, IndexError):
        return False


def started_here(pid: int) -> bool:
    """Whether process ``pid`` runs and was started by this test session (without a mark: whether it runs a Dask
    command). Check before signalling a recorded pid: it may name another program by now."""
    if SESSION_MARK in os.environ:
        return _carries(pid, session_mark().encode())
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            return b"dask" in cmdline.read()
    except OSError:
        return False


def session_processes(*, exclude: tuple[int, ...] = ()) -> list[int]:
    """Running processes started by this test session (this process and ``exclude`` aside); empty without
    ``/proc``."""
    mark = session_mark().encode()
    skip = {os.getpid(), *exclude}
    try:
        pids = [int(name) for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return []
    return [pid for pid in pids if pid not in skip and _carries(pid, mark)]


def describe(pid: int) -> str:
    """``PID (pgid G): COMMAND LINE`` for a report."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            command = cmdline.read().replace(b"\0", b" ").decode(errors="replace").strip()
        return f"{pid} (pgid {os.getpgid(pid)}): {command[:200]}"
    except OSError:
        return f"{pid} (gone)"


def kill_processes(pids: list[int]) -> None:
    """SIGKILL ``pids`` and the process groups among them lead (a pid names a group only while it leads it)."""
    for pid in pids:
        for kill in (os.killpg, os.kill):
            try:
                kill(pid, signal.SIGKILL)
            except OSError:
                pass


#: The reaper: when its standard input closes, kill every process with the mark given as argument, a few rounds (a
#: nanny may start a worker meanwhile).
_REAPER = r"""
import os, signal, sys, time
mark = sys.argv[1].encode()
sys.stdin.buffer.read()
for _ in range(5):
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                if mark in f.read().split(b"\0"):
                    found.append(int(name))
        except OSError:
            pass
    if not found:
        break
    for pid in found:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    time.sleep(0.5)
"""


def start_reaper(mark: str) -> subprocess.Popen[bytes]:
    """Start a reaper of the processes that carry ``mark`` (``NAME=VALUE``): it acts when this process closes its
    standard input (``stop_reaper``) or ends. It runs without the mark, in a session of its own (a Ctrl-C to the
    test's process group leaves it running)."""
    name = mark.partition("=")[0]
    env = {key: value for key, value in os.environ.items() if key != name}
    return subprocess.Popen([sys.executable, "-c", _REAPER, mark], stdin=subprocess.PIPE, env=env,
                            start_new_session=True)


def stop_reaper(reaper: subprocess.Popen[bytes], timeout: float = 30) -> None:
    """Let the reaper act now, and wait for it."""
    if reaper.stdin is not None:
        reaper.stdin.close()
    reaper.wait(timeout)


# --------------------------------------------------------------------------------------------------- SIGINT
def _sigint_masks(pid: int) -> tuple[bool, list[bool]]:
    """Whether process ``pid`` ignores SIGINT, and for each of its threads (the main thread first) whether it blocks
    it. A signal sent to a process is delivered to any one of its threads that does not block it."""
    bit = 1 << (signal.SIGINT - 1)

    def field(path: str, name: str) -> int:
        with open(path) as status:
            return next(int(line.split()[1], 16) for line in status if line.startswith(name))

    try:
        ignored = bool(field(f"/proc/{pid}/status", "SigIgn:") & bit)
        tids = sorted(os.listdir(f"/proc/{pid}/task"), key=lambda tid: (tid != str(pid), tid))
    except (OSError, StopIteration, ValueError):
        return False, []
    blocked = []
    for tid in tids:
        try:
            blocked.append(bool(field(f"/proc/{pid}/task/{tid}/status", "SigBlk:") & bit))
        except (OSError, StopIteration, ValueError):  # the thread ended meanwhile
            pass
    return ignored, blocked


def deaf_to_sigint(pid: int) -> bool:
    """Whether process ``pid`` ignores SIGINT or every one of its threads blocks it: Ctrl-C never reaches it."""
    ignored, blocked = _sigint_masks(pid)
    return ignored or (bool(blocked) and all(blocked))


def handles_sigint(pid: int) -> bool:
    """Whether process ``pid`` does not ignore SIGINT and its main thread accepts it (Linux delivers a signal sent to
    a process to its main thread when that thread accepts it)."""
    ignored, blocked = _sigint_masks(pid)
    return not ignored and bool(blocked) and not blocked[0]


def this_process_deaf_to_sigint() -> bool:
    """``deaf_to_sigint`` of the calling process (to run on a Dask worker)."""
    return deaf_to_sigint(os.getpid())
