"""Every script answers `--help` with its usage and does nothing else, and refuses an argument it does
not take (exit 2) instead of running its job anyway. `down --help` leaves a running stack alone: a
recorded process of a stand-in stack outlives it."""

from __future__ import annotations

import subprocess
import tempfile
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.static

ROOT = Path(__file__).resolve().parents[2]
NO_ARGS = [
    "deploy/local/down",
    "deploy/local/vnc-url",
    "deploy/local/fetch-nginx",
    "deploy/local/install-deps",
    "deploy/local/install-stack-deps",
    "tests/inspector/install",
    "tests/conformance/install",
]
# Scripts that take options: the same for `--help` and an argument they do not take.
WITH_OPTIONS = [
    "deploy/local/chromium",
    "deploy/local/demo-site",
]


def first_comment_line(script: str) -> str:
    return (ROOT / script).read_text().splitlines()[1].removeprefix("#").strip()


@pytest.mark.parametrize("script", NO_ARGS + WITH_OPTIONS)
def test_help_prints_the_usage_and_an_unknown_argument_is_refused(script: str) -> None:
    done = subprocess.run([ROOT / script, "--help"], capture_output=True, text=True, timeout=20)
    assert done.returncode == 0, done.stderr
    assert first_comment_line(script) in done.stdout, done.stdout
    refused = subprocess.run([ROOT / script, "--bogus"], capture_output=True, text=True, timeout=20)
    assert refused.returncode == 2 and "unknown argument" in refused.stderr, (refused.returncode, refused.stderr)


def test_down_help_leaves_a_running_stack_alone() -> None:
    run = Path(tempfile.mkdtemp(prefix="bs-fake-stack-", dir="/var/tmp"))
    recorded = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        started = Path(f"/proc/{recorded.pid}/stat").read_text().rsplit(") ", 1)[1].split()[19]
        (run / "pids").write_text(f"fake {recorded.pid} {started}\n")
        env = {"PATH": "/usr/bin:/bin", "STACK_RUN_DIR": str(run), "HOME": str(run)}
        done = subprocess.run([ROOT / "deploy/local/down", "--help"], capture_output=True, text=True, timeout=20, env=env)
        assert done.returncode == 0, done.stderr
        time.sleep(0.3)
        assert recorded.poll() is None, "down --help stopped the recorded process"
        assert (run / "pids").exists()
    finally:
        recorded.kill()
        recorded.wait()
