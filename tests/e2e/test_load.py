"""Load: many sessions × many calls at once against real Chromium. Checks correctness under load —
0 lost audit events, 0 cross-session answers, bounded server memory, no daemon left behind — not
speed (figures are printed; the benchmark owns targets).

CI runs a small configuration; the full run is
`BROWSER_SHELL_LOAD_SESSIONS=32 BROWSER_SHELL_LOAD_CALLS=50 pytest -s tests/e2e/test_load.py`."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

import harness
from server import Binaries, call

pytestmark = pytest.mark.chromium

SESSIONS = int(os.environ.get("BROWSER_SHELL_LOAD_SESSIONS", "8"))
CALLS = int(os.environ.get("BROWSER_SHELL_LOAD_CALLS", "12"))


def rss_kib(pid: int) -> int:
    line = next(l for l in Path(f"/proc/{pid}/status").read_text().splitlines() if l.startswith("VmRSS:"))
    return int(line.split()[1])


def daemons_of(sock_dir: Path) -> list[int]:
    needle = f"AGENT_BROWSER_SOCKET_DIR={sock_dir}"
    return [pid for pid in harness.proc_cmdlines() if needle in "\n".join(f"{k}={v}" for k, v in harness.proc_environ(pid).items())]


def test_many_sessions_many_calls_lose_nothing_and_never_cross(
    start_server, binaries: Binaries, web: harness.WebServer
) -> None:
    srv = start_server(extra_args=["--max-sessions", str(SESSIONS * 2), "--busy-wait-sec", "120"])
    sids = [f"ld{i}" for i in range(SESSIONS)]
    # Each session gets its own page, so an answer for the wrong session is visible.
    own = {sid: web.url(f"/next?owner={sid}") for sid in sids}
    refused = [["eval", "1"], ["open", "file:///etc/passwd"], ["snapshot", "--cdp=1"]]
    plan: list[tuple[str, list[Any], bool]] = []  # (session, argv, allowed?)
    for sid in sids:
        plan.append((sid, ["open", own[sid]], True))
        for n in range(CALLS - 1):
            plan.append((sid, refused[n % 3], False) if n % 4 == 3 else (sid, ["get", "url"], True))

    async def scenario(session) -> list[Any]:
        results: list[Any] = [None] * len(plan)

        async def run_session(sid: str) -> None:
            # Calls of one session in order (its first call opens its page); sessions in parallel.
            for i, (s, argv, _) in enumerate(plan):
                if s == sid:
                    t = time.monotonic()
                    results[i] = (await call(session, sid, argv, 60), time.monotonic() - t)

        with anyio.fail_after(600):
            async with anyio.create_task_group() as tg:
                for sid in sids:
                    tg.start_soon(run_session, sid)
        return results

    rss_before = rss_kib(srv.pid)
    started = time.monotonic()
    results = srv.run(scenario)
    elapsed = time.monotonic() - started
    rss_after = rss_kib(srv.pid)

    crossed, failed, latencies = [], [], []
    for (sid, argv, allowed), ((is_error, reply), seconds) in zip(plan, results):
        assert reply["session_id"] == sid
        latencies.append(seconds)
        if not allowed:
            if not (is_error and reply["exit_code"] == 126):
                failed.append((sid, argv, reply))
        elif argv == ["get", "url"]:
            if is_error or json.loads(reply["stdout"]) != {"url": own[sid]}:
                crossed.append((sid, reply))
        elif is_error:
            failed.append((sid, argv, reply))
    assert not failed, failed[:3]
    assert not crossed, f"{len(crossed)} answers from the wrong page: {crossed[:3]}"

    # Every call is on the record, exactly: one record per refusal, two per allowed call, and one
    # evidence record for each allowed call that can change the page (`open` here).
    allowed = sum(1 for _, _, ok in plan if ok)
    records = [json.loads(l) for l in srv.cfg.audit_log.read_text().splitlines()]
    # (The browser gate's own refusals — requests a page made, CDP messages — are not calls.)
    gate = [r for r in records if r.get("rule") == "request.blocked" or r.get("rule", "").startswith("cdp.")]
    calls_records = [r for r in records if r.get("session_id") in own and r["phase"] != "lifecycle" and r not in gate]
    opened = sum(1 for _, argv, ok in plan if ok and argv[0] == "open")
    evidence = [r for r in calls_records if r["phase"] == "evidence"]
    assert len(evidence) == opened, (len(evidence), opened)
    assert len(calls_records) - len(evidence) == 2 * allowed + (len(plan) - allowed)
    assert not gate, f"the gate refused something agent-browser does in normal use: {gate[:3]}"
    run = subprocess.run([str(binaries.server), "audit", "verify", str(srv.cfg.audit_log)], capture_output=True, text=True)
    assert run.returncode == 0 and "INTACT" in run.stdout, run.stdout

    # Memory stays bounded (a leak per call would show at this scale).
    assert rss_after < 200 * 1024, f"server RSS {rss_after} KiB"

    # Closing every session leaves no daemon behind.
    for sid in sids:
        srv.ok(sid, ["close"])
    sock = srv.cfg.state_dir / "sock"
    deadline = time.monotonic() + 15
    while daemons_of(sock):
        assert time.monotonic() < deadline, f"daemons left: {daemons_of(sock)}"
        time.sleep(0.2)

    latencies.sort()
    print(
        f"\n[load] {SESSIONS} sessions x {CALLS} calls = {len(plan)} calls in {elapsed:.1f} s "
        f"({len(plan) / elapsed:.0f} calls/s); p50 {statistics.median(latencies) * 1000:.0f} ms, "
        f"p95 {latencies[int(len(latencies) * 0.95)] * 1000:.0f} ms; server RSS {rss_before} -> {rss_after} KiB"
    )
