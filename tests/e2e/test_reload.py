"""The policy reloads without a restart (SIGHUP or `browser-shell policy reload`), and the server's
own life is on the record: a `started` record (binaries' digests, the policy in full), `reloaded` /
`reload_refused` with the old and new digests, `stopped` with the calls served; every call record
names the policy it was decided under. Real server, real Chromium, loopback only."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import harness
import pytest
from server import describe

pytestmark = pytest.mark.chromium


def records(log: Path) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


def lifecycle(log: Path, outcome: str) -> list[dict]:
    return [r for r in records(log) if r["phase"] == "lifecycle" and r.get("outcome") == outcome]


def wait_for(log: Path, outcome: str, count: int, within: float = 10.0) -> list[dict]:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        found = lifecycle(log, outcome)
        if len(found) >= count:
            return found
        time.sleep(0.05)
    raise AssertionError(f"no {count}th {outcome!r} record within {within} s: {records(log)[-3:]}")


def reload_cli(server_bin: Path, audit_log: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(server_bin), "policy", "reload", "--audit-log", str(audit_log)],
        capture_output=True, text=True, timeout=30,
    )


def test_a_reload_changes_the_verdict_of_the_next_call_and_records_both_digests(
    start_server, server_bin: Path, web: harness.WebServer
) -> None:
    with harness.run_web_server("127.0.0.1") as other:
        srv = start_server(policy_json={"open": {"allow_private_cidrs": [f"127.0.0.1:{web.port}"]}})
        is_error, reply = srv.call("rl-1", ["open", other.url("/form")])
        assert is_error and reply["stderr"].startswith("refused [address.private]"), describe(reply)
        before = [r for r in records(srv.cfg.audit_log) if r["phase"] == "denied"][-1]["policy_sha256"]

        srv.cfg.policy.write_text(json.dumps(
            {"open": {"allow_private_cidrs": [f"127.0.0.1:{web.port}", f"127.0.0.1:{other.port}"]}}
        ))
        run = reload_cli(server_bin, srv.cfg.audit_log)
        assert run.returncode == 0 and run.stdout.startswith("reloaded"), run.stdout + run.stderr
        assert str(srv.cfg.policy) in run.stderr, run.stderr

        assert srv.ok("rl-1", ["open", other.url("/form")])["url"] == other.url("/form")
        assert "/form" in other.seen_paths()

    (reloaded,) = lifecycle(srv.cfg.audit_log, "reloaded")
    after = reloaded["policy_sha256"]
    assert reloaded["detail"]["previous_policy_sha256"] == before != after
    assert reloaded["detail"]["policy"]["file_sha256"] == harness.sha256_of(srv.cfg.policy)
    assert f"127.0.0.1/32:{other.port}" in reloaded["detail"]["policy"]["effective"]["allow_private_cidrs"]
    assert before in run.stdout and after in run.stdout, run.stdout
    intent = [r for r in records(srv.cfg.audit_log) if r["phase"] == "intent"][-1]
    assert intent["policy_sha256"] == after


def test_a_broken_file_keeps_the_policy_in_force_and_says_why(
    start_server, server_bin: Path, web: harness.WebServer
) -> None:
    with harness.run_web_server("127.0.0.1") as other:
        srv = start_server(policy_json={"open": {"allow_private_cidrs": [f"127.0.0.1:{web.port}"]}})
        # Written once the binaries are hashed, beside the start.
        in_force = wait_for(srv.cfg.audit_log, "started", 1)[0]["policy_sha256"]
        srv.cfg.policy.write_text('{"open": {"allow_private_cidrs": ["127.0.0.1/32"], "allow_hostz": []}}')

        assert srv.pid is not None
        os.kill(srv.pid, signal.SIGHUP)
        (refused,) = wait_for(srv.cfg.audit_log, "reload_refused", 1)
        assert refused["policy_sha256"] == in_force
        assert "allow_hostz" in refused["reason"] and "stays" in refused["reason"], refused["reason"]
        assert "policy NOT reloaded" in srv.cfg.stderr_log.read_text()

        run = reload_cli(server_bin, srv.cfg.audit_log)
        assert run.returncode == 1 and "NOT reloaded" in run.stderr and "allow_hostz" in run.stderr, run.stderr
        assert in_force in run.stderr

        # The broken file would have allowed all of 127.0.0.1; the policy in force still refuses.
        is_error, reply = srv.call("rl-2", ["open", other.url("/form")])
        assert is_error and reply["stderr"].startswith("refused [address.private]"), describe(reply)
        assert other.seen_paths() == []
        assert srv.alive()


def test_the_servers_start_and_stop_are_on_the_record_and_verify_in_the_chain(
    start_server, server_bin: Path, agent_browser_bin: Path, web: harness.WebServer
) -> None:
    srv = start_server()
    srv.ok("rl-3", ["open", web.url("/form")])
    srv.call("rl-3", ["eval", "1"])  # refused: a denied record
    srv.stop()

    log = srv.cfg.audit_log
    all_records = records(log)
    started, stopped = all_records[0], all_records[-1]
    assert (started["phase"], started["outcome"]) == ("lifecycle", "started")
    assert (stopped["phase"], stopped["outcome"]) == ("lifecycle", "stopped")
    facts = started["detail"]
    assert facts["browser_shell"]["sha256"] == harness.sha256_of(server_bin)
    assert facts["agent_browser"]["sha256"] == harness.sha256_of(agent_browser_bin.resolve())
    assert facts["agent_browser"]["version"]
    # Every child started as the small trampoline built beside the server, hashed as opened.
    trampoline = server_bin.parent / "hardening-trampoline"
    assert facts["trampoline"] == {"path": str(trampoline), "sha256": harness.sha256_of(trampoline)}, facts["trampoline"]
    assert facts["policy"]["file"] == str(srv.cfg.policy)
    assert facts["policy"]["file_sha256"] == harness.sha256_of(srv.cfg.policy)
    assert facts["policy"]["effective"]["allow_private_cidrs"] == ["127.0.0.1/32"]
    assert facts["confinement"]["landlock"] and facts["otlp"] is False
    assert facts["limits"]["max_sessions"] > 0
    assert "client closed" in stopped["reason"]
    assert stopped["detail"]["calls_served"] == 2

    calls = [r for r in all_records if r["phase"] in ("intent", "outcome", "denied")]
    assert len(calls) == 3
    assert {r["policy_sha256"] for r in calls} == {started["policy_sha256"]}

    verify = subprocess.run([str(server_bin), "audit", "verify", str(log)], capture_output=True, text=True)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert not Path(f"{log}.pid").exists(), "the pid file outlived the server"


def test_reload_without_a_running_server_says_how_to_find_it(server_bin: Path, scratch) -> None:
    log = scratch("bs-noserver-", under="/var/tmp") / "audit.jsonl"
    run = reload_cli(server_bin, log)
    assert run.returncode == 2, run.stderr
    assert "no running browser-shell server" in run.stderr and "--audit-log" in run.stderr, run.stderr
