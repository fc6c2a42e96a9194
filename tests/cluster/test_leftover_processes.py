"""Processes started by the tests are found and reaped, also after their parent exited or the test session died
(see ``_processes`` and the session guard in the root ``conftest.py``)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid

import pytest

from _processes import (
    SESSION_MARK,
    kill_processes,
    session_processes,
    start_reaper,
    started_here,
    stop_reaper,
)

SLEEPER = "import time; time.sleep(120)"

#: Starts a sleeper in a session of its own, prints its pid and exits: the sleeper is re-parented, as the scheduler
#: and workers of ``cluster/local.sh`` are.
DETACHED = (
    "import subprocess, sys; "
    f"p = subprocess.Popen([sys.executable, '-c', {SLEEPER!r}], start_new_session=True, "
    "stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL); "
    "print(p.pid)"
)


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rpartition(b")")[2].split()[0] != b"Z"
    except OSError:
        return False


def _wait_gone(pid: int, timeout: float = 10) -> bool:
    deadline = time.monotonic() + timeout
    while _running(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not _running(pid)


def test_a_detached_process_of_the_session_is_found_and_killed() -> None:
    out = subprocess.run([sys.executable, "-c", DETACHED], capture_output=True, text=True, timeout=60, check=True)
    pid = int(out.stdout)
    try:
        assert os.getppid() != pid and os.getsid(pid) == pid  # in a session of its own, its parent gone
        assert started_here(pid)
        assert pid in session_processes()
    finally:
        kill_processes([pid])
    assert _wait_gone(pid)
    assert not started_here(pid) and pid not in session_processes()


def test_a_process_of_another_session_is_not_ours() -> None:
    env = dict(os.environ, **{SESSION_MARK: f"another-{uuid.uuid4().hex}"})
    other = subprocess.Popen([sys.executable, "-c", SLEEPER], env=env)
    try:
        time.sleep(0.2)  # its environment is readable once it runs
        assert not started_here(other.pid)
        assert other.pid not in session_processes()
    finally:
        other.kill()
        other.wait()


@pytest.mark.parametrize("how", ["closed", "parent-killed"])
def test_the_reaper_kills_the_marked_processes_when_the_session_ends(how: str) -> None:
    mark = f"reaper-test-{uuid.uuid4().hex}"
    env = dict(os.environ, **{SESSION_MARK: mark})
    marked = subprocess.Popen([sys.executable, "-c", SLEEPER], env=env, start_new_session=True)
    if how == "closed":
        reaper = start_reaper(f"{SESSION_MARK}={mark}")
        time.sleep(0.2)
        assert marked.poll() is None and reaper.poll() is None  # nothing happens while the session runs
        stop_reaper(reaper)
    else:
        # A test session killed outright (SIGKILL: no teardown, no atexit): its end closes the reaper's pipe.
        session = subprocess.Popen(
            [sys.executable, "-c",
             "import os, signal, sys; sys.path.insert(0, sys.argv[1]); from _processes import start_reaper; "
             "start_reaper(sys.argv[2]); os.kill(os.getpid(), signal.SIGKILL)",
             os.path.dirname(os.path.abspath(__file__)), f"{SESSION_MARK}={mark}"])
        assert session.wait(60) == -9
    assert marked.wait(30) == -9
