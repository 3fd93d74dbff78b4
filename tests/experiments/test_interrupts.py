"""Interrupts and concurrency, with real ``pagesim run`` subprocesses (issue #15).

Each test starts ``python -m pagesim run`` in its own session (so every process it
starts can be found by session id afterwards) and bounds every wait, by
:data:`PATIENCE_S`: a bound against a hang only, far beyond what a loaded machine takes
(waits end as soon as what they wait for has happened). What the tests check does not
depend on the machine's speed: a Ctrl-C is checked to stop the sweep before it ends,
with no run stored after it, not to stop within a number of seconds.
"""

from __future__ import annotations

import math
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

SWEEP = {
    "name": "faults",
    "base": {
        "hardware": {"kv_slots": 4000},
        "workload": {
            "name": "synthetic",
            "num_requests": 60,
            "prompt": {"dist": "uniform", "low": 10, "high": 200},
            "output": {"dist": "uniform", "low": 10, "high": 200},
        },
        "arrivals": {"process": "poisson", "rate_req_s": 20.0},
    },
    "sweep": {"grid": {"arrivals.rate_req_s": [5.0, 10.0, 20.0, 40.0], "allocator.block_size": [8, 16, 32]}},
    "seeds": [0, 1],
}  # fmt: skip
#: the longest any wait here may take: a guard against a hang, not a speed requirement
PATIENCE_S = 1800.0


def _long_runs() -> dict:
    """SWEEP with runs of a few seconds each, so that it is still running when a test
    interrupts it after 6 s (the whole sweep: about a minute on 2 jobs on the 2-core
    development machine; with 8,000 requests a run it had come down to about 10 s)."""
    doc = {**SWEEP, "base": {**SWEEP["base"]}}
    doc["base"]["workload"] = {**SWEEP["base"]["workload"], "num_requests": 50_000}
    return doc


def _write(tmp_path: Path, doc: dict, name: str = "sweep.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _start(path: Path, out: Path, *extra: str) -> subprocess.Popen:
    """``pagesim run`` with Ctrl-C as at a terminal: a test suite started as a background
    job (``cmd &`` in a script) has SIGINT ignored, and a child inherits that, so the
    child's SIGINT is set back to the default before it starts."""
    return subprocess.Popen(
        [sys.executable, "-m", "pagesim", "run", str(path), "--out", str(out), *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
        preexec_fn=_default_sigint,
    )


def _session_pids(sid: int) -> list[int]:
    """Live processes of session ``sid`` (zombies excluded)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[3]) == sid and fields[0] != "Z":
            pids.append(int(entry.name))
    return pids


def _wait_session_gone(sid: int, timeout_s: float = PATIENCE_S) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        left = _session_pids(sid)
        if not left:
            return []
        time.sleep(0.05)
    return _session_pids(sid)


def _run_to_end(path: Path, out: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pagesim", "run", str(path), "--out", str(out), *extra],
        capture_output=True,
        text=True,
        timeout=PATIENCE_S,
    )


pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")


def test_ctrl_c_stops_within_seconds_keeps_finished_runs_exit_130(tmp_path):
    doc = _long_runs()
    path = _write(tmp_path, doc)
    proc = _start(path, tmp_path / "out", "--jobs", "2")
    runs = tmp_path / "out" / "runs"
    time.sleep(6.0)
    assert proc.poll() is None, "the sweep ended before the interrupt"
    os.kill(proc.pid, signal.SIGINT)
    stored_before = _stored(runs)
    time.sleep(0.3)
    os.kill(proc.pid, signal.SIGINT)  # a second and a third Ctrl-C change nothing
    os.kill(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=PATIENCE_S)
    assert proc.returncode == 130, (out, err)
    assert b"Traceback" not in err and b"Exception ignored" not in err, err
    assert _wait_session_gone(proc.pid) == []
    # it stopped at once: the runs running then were ended, not finished and stored (at
    # most one per job may have been arriving as the signal came), and no other started
    kept = _stored(runs)
    assert len(kept) <= len(stored_before) + 2, (stored_before, kept)
    num_runs = len(SWEEP["seeds"]) * math.prod(len(v) for v in SWEEP["sweep"]["grid"].values())
    assert len(kept) < num_runs, "the sweep ran to its end"
    assert all((p / "summary.json").is_file() for p in kept)
    assert not list(runs.glob(".tmp-*")) if runs.is_dir() else True


def _stored(runs: Path) -> list[Path]:
    """The runs the cache holds (finished and stored whole)."""
    return [p for p in runs.iterdir() if not p.name.startswith(".")] if runs.is_dir() else []


def test_workers_exit_when_the_main_process_is_killed(tmp_path):
    doc = _long_runs()
    proc = _start(_write(tmp_path, doc), tmp_path / "out", "--jobs", "2")
    deadline = time.monotonic() + PATIENCE_S
    while len(_session_pids(proc.pid)) < 3 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert len(_session_pids(proc.pid)) >= 3, "the pool never started"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=PATIENCE_S)
    assert _wait_session_gone(proc.pid) == []


def test_fault_injection_rerun_is_byte_identical(tmp_path):
    """Kill a sweep at random points 20 times (SIGINT, SIGKILL of the main process,
    SIGKILL of the group); the final rerun's results.csv equals an uninterrupted run's."""
    path = _write(tmp_path, SWEEP)
    start = time.monotonic()
    reference = _run_to_end(path, tmp_path / "reference", "--jobs", "2")
    reference_s = time.monotonic() - start  # kill times scale with this machine's speed
    assert reference.returncode == 0, reference.stderr
    rng = random.Random(15)
    out = tmp_path / "out"
    kinds = ["sigint", "kill_main", "kill_group"] * 7
    num_cached = []
    for kind in kinds[:20]:
        proc = _start(path, out, "--jobs", "2")
        time.sleep(rng.uniform(0.2, 0.9) * reference_s)
        if kind == "sigint":
            os.kill(proc.pid, signal.SIGINT)
        elif kind == "kill_main":
            os.kill(proc.pid, signal.SIGKILL)
        else:
            os.killpg(proc.pid, signal.SIGKILL)
        _, err = proc.communicate(timeout=PATIENCE_S)
        assert proc.returncode in (0, 130, -signal.SIGKILL, -signal.SIGINT), (
            kind,
            proc.returncode,
            err.decode(errors="replace")[-3000:],  # what the run said: the cause, if any
        )
        assert _wait_session_gone(proc.pid) == [], f"processes left after {kind}"
        runs = out / "runs"
        num_cached.append(len(list(runs.glob("[0-9a-f]*"))) if runs.is_dir() else 0)
    # some kills landed after runs had finished, not all before the sweep started
    assert max(num_cached) > 0, num_cached
    final = _run_to_end(path, out, "--jobs", "2")
    assert final.returncode == 0, final.stderr
    assert (out / "results.csv").read_bytes() == (
        tmp_path / "reference" / "results.csv"
    ).read_bytes()
    assert not list(out.rglob(".tmp-*"))


def test_two_runs_on_one_folder_do_not_collide(tmp_path):
    path = _write(tmp_path, SWEEP)
    first = _start(path, tmp_path / "out", "--jobs", "1")
    second = _start(path, tmp_path / "out", "--jobs", "1")
    _, err1 = first.communicate(timeout=PATIENCE_S)
    _, err2 = second.communicate(timeout=PATIENCE_S)
    assert first.returncode == 0 and second.returncode == 0, (err1, err2)
    assert b"waiting for it" in err1 + err2
    reference = _run_to_end(path, tmp_path / "reference", "--jobs", "2")
    assert reference.returncode == 0, reference.stderr
    assert (tmp_path / "out" / "results.csv").read_bytes() == (
        tmp_path / "reference" / "results.csv"
    ).read_bytes()
    assert not list((tmp_path / "out").rglob(".tmp-*"))
