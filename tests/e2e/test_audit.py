"""Audit-first: nothing runs unless its intent is on disk; the chain survives kills and many
writers; `audit verify` and `audit report` tell a reviewer what happened."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

import harness
from server import Binaries, BlockingServer, describe, make_canary

pytestmark = pytest.mark.chromium


def run_cli(binaries: Binaries, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(binaries.server), *args], capture_output=True, text=True, timeout=60)


def verify(binaries: Binaries, log: Path) -> subprocess.CompletedProcess[str]:
    return run_cli(binaries, "audit", "verify", str(log))


def records(log: Path) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines()]


def canary_on(start_server, scratch, prefix: str, **kwargs):
    canary = make_canary(scratch(prefix) / "canary", scratch(f"{prefix}-bin-", under="/var/tmp"))
    srv = start_server(agent_browser=canary.script, extra_read_exec=["/usr"], **kwargs)
    return srv, canary


# --------------------------------------------------------------------------- unwritable audit log


def test_a_full_disk_refuses_the_call_and_nothing_runs(start_server, scratch) -> None:
    tmp = scratch("bs-full-", under="/var/tmp")
    srv, canary = canary_on(
        start_server, scratch, "bsf",
        audit_log=Path("/dev/full"), extra_args=["--audit-key", str(tmp / "audit.key")],
    )
    before = canary.lines()  # the confined start-up self-test ran the canary once
    is_error, reply = srv.call("full", ["get", "url"])
    assert is_error and reply["exit_code"] == 125, describe(reply)
    assert "audit unavailable" in reply["stderr"] and "No space left" in reply["stderr"], reply["stderr"]
    assert canary.lines() == before, "a process was spawned although its intent was not recorded"
    # A refusal cannot be recorded either, so it is answered as an audit failure too.
    is_error, reply = srv.call("full", ["eval", "1"])
    assert is_error and reply["exit_code"] == 125 and "audit unavailable" in reply["stderr"], describe(reply)


def test_an_intent_that_cannot_be_synced_never_reaches_agent_browser(start_server, scratch) -> None:
    """The intent is written, then synced while agent-browser starts; the batch goes to its stdin
    only after the sync. /dev/null takes the write but fails the fdatasync (EINVAL): the process
    that was starting must be killed without ever reading a command, and the call refused. (The
    EINVAL comes back at once, usually before the stand-in even starts; the ordering itself, with a
    gate held closed while the child runs, is proven in src/runner/tests.rs.)"""
    tmp = scratch("bsn")
    tmp.chmod(0o1777)  # each session's stand-in, under a uid of its own, leaves a file here
    canary = make_canary(tmp / "canary", scratch("bsn-bin-", under="/var/tmp"))
    # This stand-in also keeps whatever reaches its stdin, one file per process.
    canary.script.write_text(f'#!/bin/sh\necho "$$ $*" >> {canary.marker}\nexec cat > {tmp}/stdin-$$\n')
    srv = start_server(
        agent_browser=canary.script, extra_read_exec=["/usr"],
        # The child may write /dev/null (agent-browser needs it); there is no evidence to protect on it.
        audit_log=Path("/dev/null"),
        extra_args=["--audit-key", str(scratch("bsn-key-", under="/var/tmp") / "audit.key"), "--allow-writable-audit-log"],
    )
    is_error, reply = srv.call("nosync", ["get", "url"])
    assert is_error and reply["exit_code"] == 125, describe(reply)
    assert "audit unavailable, nothing was run" in reply["stderr"], reply["stderr"]
    assert "Invalid argument" in reply["stderr"], reply["stderr"]
    time.sleep(0.3)  # a child that had been fed would have copied its batch by now
    fed = {p.name: p.read_bytes() for p in tmp.glob("stdin-*") if p.read_bytes()}
    assert not fed, f"a command reached agent-browser although its intent was not durable: {fed}"
    # The failed sync latches: every later call is refused before anything is spawned.
    spawned = canary.lines()
    is_error, reply = srv.call("nosync", ["get", "url"])
    assert is_error and reply["exit_code"] == 125 and "an earlier sync failed" in reply["stderr"], describe(reply)
    assert canary.lines() == spawned
    # Control: with a log that syncs, the same stand-in does get its batch, and it is seen this way.
    healthy = start_server(agent_browser=canary.script, extra_read_exec=["/usr"])
    healthy.call("synced", ["get", "url"])  # its reply does not matter: the stand-in prints nothing
    fed = [p.read_bytes() for p in tmp.glob("stdin-*") if p.read_bytes()]
    assert any(json.loads(batch) == [["get", "url"]] for batch in fed), f"no stand-in got the batch: {fed}"


def test_an_intent_that_cannot_be_synced_never_reaches_the_sessions_waiting_standby(start_server, scratch) -> None:
    """A session's later calls take a standby that is already running (src/runner/standby.rs) and write
    their intent synced, before the standby gets anything. Here the session has its standby, then
    the log's path is made to fail its syncs (/dev/null bind-mounted over it: the sink takes the
    new file for a rotation and reopens it): the call is refused and the waiting standby, whose
    stdin this stand-in keeps, never receives a byte."""
    tmp = scratch("bsw")
    tmp.chmod(0o1777)  # each session's stand-in, under a uid of its own, leaves a file here
    canary = make_canary(tmp / "canary", scratch("bsw-bin-", under="/var/tmp"))
    canary.script.write_text(f'#!/bin/sh\necho "$$ $*" >> {canary.marker}\nexec cat > {tmp}/stdin-$$\n')
    srv = start_server(agent_browser=canary.script, extra_read_exec=["/usr"])
    before = canary.lines()
    srv.call("standby", ["get", "url"])  # its reply does not matter: the stand-in prints nothing
    after = canary.settle_after_allowed_call(before)
    called, standby = (line.split()[0] for line in after[-2:])
    # Control: the call's own process got its batch, so a fed standby would be seen the same way.
    assert json.loads((tmp / f"stdin-{called}").read_bytes()) == [["get", "url"]]
    log = srv.cfg.audit_log
    subprocess.run(["mount", "--bind", "/dev/null", str(log)], check=True)
    try:
        is_error, reply = srv.call("standby", ["get", "url"])
        time.sleep(0.3)  # a standby that had been fed would have copied its batch by now
        fed = (tmp / f"stdin-{standby}").read_bytes()
    finally:
        subprocess.run(["umount", "--lazy", str(log)], check=True)  # the server still holds it open
    assert is_error and reply["exit_code"] == 125, describe(reply)
    assert "audit unavailable, nothing was run" in reply["stderr"], reply["stderr"]
    assert fed == b"", f"a command reached the session's standby although its intent was not durable: {fed!r}"
    assert canary.lines() == after, "a process was spawned although the intent was not durable"


def test_room_for_a_screenshot_is_made_only_once_its_intent_is_durable(start_server, scratch) -> None:
    """Making room for a screenshot deletes the session's oldest ones: a side effect of the call, so
    it waits for the intent's sync. With a log whose sync fails (/dev/null), nothing is deleted.
    (That room is made at all is test_lifecycle's quota test.)"""
    key = scratch("bsq-key-", under="/var/tmp") / "audit.key"
    srv = start_server(
        audit_log=Path("/dev/null"),
        extra_args=["--audit-key", str(key), "--allow-writable-audit-log",
                    "--child-max-file-bytes", "200000", "--output-quota-session-bytes", "200001"],
    )
    old = srv.cfg.output_dir / "quota3" / "old.png"
    old.parent.mkdir(parents=True, exist_ok=True)
    old.write_bytes(b"x" * 1000)  # with a 200 kB screenshot to come, the quota wants it gone
    is_error, reply = srv.call("quota3", ["screenshot", "new.png"])
    assert is_error and reply["exit_code"] == 125 and "audit unavailable" in reply["stderr"], describe(reply)
    assert old.exists(), "room was made (a file deleted) before the call's intent was durable"


def test_a_log_gone_read_only_refuses_the_call_and_nothing_runs(start_server, scratch, binaries: Binaries) -> None:
    srv, canary = canary_on(start_server, scratch, "bsr")
    before = canary.lines()
    assert srv.call("ro", ["get", "url"])[1]["exit_code"] != 125  # audited and spawned
    log = srv.cfg.audit_log
    before = canary.settle_after_allowed_call(before)
    subprocess.run(["chattr", "+i", str(log)], check=True)
    try:
        is_error, reply = srv.call("ro", ["get", "url"])
    finally:
        subprocess.run(["chattr", "-i", str(log)], check=True)
    assert is_error and reply["exit_code"] == 125, describe(reply)
    assert "audit unavailable" in reply["stderr"] and "Operation not permitted" in reply["stderr"], reply["stderr"]
    assert canary.lines() == before, "a process was spawned although its intent was not recorded"
    # Healthy again: calls run and the chain is intact.
    assert srv.call("ro", ["get", "url"])[1]["exit_code"] != 125
    run = verify(binaries, log)
    assert run.returncode == 0 and "INTACT" in run.stdout, run.stdout


def test_an_audit_dir_without_permission_refuses_to_start(server_config, scratch) -> None:
    """As an unprivileged user, a root-only audit directory cannot be opened: the server refuses to
    start, before reading any JSON-RPC, and says why."""
    locked = scratch("bs-locked-", under="/var/tmp")
    os.chmod(locked, 0o700)  # root-owned
    cfg = server_config(tag="bsu")
    cfg.audit_log_path = locked / "audit.jsonl"
    for d in (cfg.base, cfg.evidence):  # the evidence dir holds the policy path
        os.chown(d, 65534, 65534)
    cmd = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *cfg.argv()]
    run = subprocess.run(cmd, input="", capture_output=True, text=True, timeout=30, env=cfg.env())
    assert run.returncode != 0 and run.stdout == "", (run.returncode, run.stdout)
    assert "Permission denied" in run.stderr and str(locked) in run.stderr, run.stderr


# --------------------------------------------------------------------------- crash and concurrency


def test_sigkill_mid_call_leaves_a_dangling_intent_and_an_intact_chain(
    binaries: Binaries, server_config, web: harness.WebServer
) -> None:
    cfg = server_config(tag="bsk")
    srv = BlockingServer(cfg).start()
    try:
        srv.ok("k1", ["open", web.url("/form")])
        def call_until_killed() -> None:
            # The server dies mid-call on purpose: the client sees its connection close.
            with contextlib.suppress(Exception):
                srv.call("k1", ["wait", "20000"], 60)

        caller = threading.Thread(target=call_until_killed, daemon=True)
        caller.start()
        deadline = time.monotonic() + 10
        while not any(r["phase"] == "intent" and r["argv"][0] == "wait" for r in records(cfg.audit_log)):
            assert time.monotonic() < deadline, "the wait never got its intent record"
            time.sleep(0.05)
        os.kill(srv.pid, signal.SIGKILL)
    finally:
        try:
            srv.stop()
        except BaseException:  # the session died with the server
            pass
    run = verify(binaries, cfg.audit_log)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "chain: intact" in run.stdout and "dangling intents" in run.stdout, run.stdout
    # Said plainly, and only a warning: the checkpoint vouches for the tail.
    assert "has no `stopped` record and no server started after it: it was killed or crashed" in run.stdout, run.stdout
    dangling = [r for r in records(cfg.audit_log) if r["phase"] == "intent" and r["argv"][0] == "wait"]
    assert dangling[0]["call_id"] in run.stdout, run.stdout

    # A new server appends correctly after the crash.
    srv2 = BlockingServer(cfg).start()
    try:
        srv2.ok("k2", ["get", "title"])
    finally:
        srv2.stop()
    run = verify(binaries, cfg.audit_log)
    assert run.returncode == 0 and "INTACT" in run.stdout, run.stdout


def test_eight_processes_appending_to_one_log_keep_one_exact_chain(binaries: Binaries, server_config, scratch) -> None:
    evidence = scratch("bs-8p-", under="/var/tmp")
    log = evidence / "audit.jsonl"
    servers = []
    for i in range(8):
        cfg = server_config(tag=f"bs8{i}")
        cfg.audit_log_path = log
        servers.append(BlockingServer(cfg).start())
    calls_per_server = 50
    try:
        def drive(srv: BlockingServer, i: int) -> None:
            for n in range(calls_per_server):
                # Every 5th call is allowed (intent + outcome), the rest are refused (one record).
                argv = ["get", "url"] if n % 5 == 0 else ["eval", str(n)]
                srv.call(f"p{i}", argv, 30)

        threads = [threading.Thread(target=drive, args=(s, i)) for i, s in enumerate(servers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=300)
    finally:
        for srv in servers:
            srv.stop()
    allowed = 8 * calls_per_server // 5
    denied = 8 * calls_per_server - allowed
    recs = records(log)
    # Each server also records its own start and stop.
    own = [r["outcome"] for r in recs if r["phase"] == "lifecycle"]
    assert sorted(own) == ["started"] * 8 + ["stopped"] * 8, own
    assert len(recs) == 2 * allowed + denied + 16, len(recs)
    assert [r["seq"] for r in recs] == list(range(1, len(recs) + 1))
    assert len({r["pid"] for r in recs}) == 8
    run = verify(binaries, log)
    assert run.returncode == 0 and "INTACT" in run.stdout, run.stdout


# --------------------------------------------------------------------------- redaction and review


def test_a_filled_password_never_reaches_the_log_or_the_server_stderr(server, web: harness.WebServer) -> None:
    password = "pw-" + os.urandom(8).hex()
    server.ok("pw", ["open", web.url("/form")])
    server.ok("pw", ["fill", "#free", password])
    server.ok("pw", ["type", "#q", password])
    assert password not in server.cfg.audit_log.read_text()
    assert password not in server.cfg.stderr_log.read_text()


def test_outcome_records_carry_digests_of_the_reply_and_the_redacted_page_url(server, web: harness.WebServer) -> None:
    """Evidence of what the agent was shown, never the contents: each outcome names the SHA-256 and
    size of the reply's stdout and the page URL the guard read when the command ended, redacted."""
    url = web.url("/next?token=s3cret&q=1")
    replies = {}
    for argv in (["open", url], ["get", "title"], ["close"]):
        is_error, replies[argv[0]] = server.call("dig1", argv)
        assert not is_error, describe(replies[argv[0]])
    log = records(server.cfg.audit_log)
    argv_of = {r["call_id"]: r["argv"][0] for r in log if r["phase"] == "intent"}
    outcomes = {argv_of[r["call_id"]]: r for r in log if r["phase"] == "outcome" and r["call_id"] in argv_of}
    for subcommand, reply in replies.items():
        stdout = reply["stdout"].encode()
        record = outcomes[subcommand]
        assert record["reply_stdout_bytes"] == len(stdout), record
        assert record["reply_stdout_sha256"] == hashlib.sha256(stdout).hexdigest(), record
    redacted = url.replace("token=s3cret", "token=***")
    assert outcomes["open"]["page_url"] == redacted and outcomes["get"]["page_url"] == redacted
    assert "page_url" not in outcomes["close"], "close ends the session: the guard reads no page"
    assert "s3cret" not in server.cfg.audit_log.read_text()


def test_report_summarises_sessions_denials_and_latency(binaries: Binaries, server, web: harness.WebServer) -> None:
    server.ok("rep", ["open", web.url("/form")])
    server.ok("rep", ["get", "url"])
    server.call("rep", ["eval", "1"])
    log = str(server.cfg.audit_log)
    table = run_cli(binaries, "audit", "report", log, "--session", "rep")
    assert table.returncode == 0, table.stderr
    assert table.stdout.startswith("verification: INTACT"), table.stdout
    assert "session rep" in table.stdout and "subcommand.denied=1" in table.stdout and "p50" in table.stdout, table.stdout
    data = json.loads(run_cli(binaries, "audit", "report", log, "--format", "json", "--session", "rep").stdout)
    assert data["totals"]["allowed"] == 2 and data["totals"]["denied"] == 1, data["totals"]
    html = run_cli(binaries, "audit", "report", log, "--format", "html").stdout
    # Self-contained: its own inline script only, no external resources (test_report.py renders it).
    assert html.startswith("<!doctype html>") and html.count("<script") == 1, html[:200]
    assert "src=" not in html and "href=" not in html and "session rep" in html, html[:300]
    ocsf = [json.loads(line) for line in run_cli(binaries, "audit", "report", log, "--format", "ocsf").stdout.splitlines()]
    # The `open`'s evidence record (the default `--evidence digests`) is a sixth event of the session.
    calls = [e for e in ocsf if e["class_uid"] == 6003 and e["unmapped"].get("phase") != "evidence"]
    assert len(calls) == 5 and all(e["type_uid"] == 600399 and e["actor"]["session"]["uid"] == "rep" for e in calls)
    # The server's own start is Application Lifecycle (Start).
    assert ocsf[0]["class_uid"] == 6002 and ocsf[0]["type_uid"] == 600203, ocsf[0]


def test_the_policy_file_can_add_secret_query_parameters(start_server, web: harness.WebServer) -> None:
    srv = start_server(
        policy_json={"open": {"allow_private_cidrs": ["127.0.0.1/32"]}, "redact": {"secret_query_params": ["x-custom"]}}
    )
    secret = "s-" + os.urandom(6).hex()
    srv.ok("red", ["open", web.url(f"/form?x-custom={secret}&q=visible")])
    intent = [r for r in records(srv.cfg.audit_log) if r["phase"] == "intent"][-1]
    assert intent["argv"][1].endswith("/form?x-custom=***&q=visible"), intent["argv"]
    assert secret not in srv.cfg.audit_log.read_text()


def test_diagnostics_can_also_go_to_a_rolling_file(start_server, scratch) -> None:
    logs = scratch("bs-diag-", under="/var/tmp")
    srv = start_server(extra_args=["--diagnostics-dir", str(logs)])
    srv.call("diag", ["fill", "#x", "typed-secret-123"])
    files = list(logs.glob("browser-shell.log*"))
    assert files, list(logs.iterdir())
    text = "".join(f.read_text() for f in files)
    assert "browser-shell ready on stdio" in text, text[:500]
    assert "typed-secret-123" not in text


def test_the_readmes_verify_command_takes_the_logs_glob_with_its_siblings(binaries: Binaries, server) -> None:
    """README's `audit verify …/audit.jsonl*` also matches the key, lock, checkpoint and pid file
    beside the log: run through a shell, it must still call a healthy log intact, quietly."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    assert "browser-shell audit verify /var/log/browser-shell/audit.jsonl*" in readme
    server.ok("glob", ["get", "url"])
    server.stop()
    log = server.cfg.audit_log
    # A running stack's server keeps its pid file there too.
    (log.parent / (log.name + ".pid")).write_text("4242\n")
    siblings = sorted(p.name for p in log.parent.glob(log.name + ".*"))
    assert {"audit.jsonl.key", "audit.jsonl.lock", "audit.jsonl.pid"} <= set(siblings), siblings
    run = subprocess.run(
        ["bash", "-c", f'"$0" audit verify {log.parent}/{log.name}*', str(binaries.server)],
        capture_output=True, text=True, timeout=60,
    )
    assert run.returncode == 0 and "INTACT" in run.stdout.upper(), run.stdout + run.stderr
    # The log's own side files are passed over without a word (naming them on every run is noise).
    assert "skipped" not in run.stderr, run.stderr
    # A file that is neither a log nor one of its side files is still named.
    (log.parent / (log.name + ".notes")).write_text("reviewed\n")
    run = subprocess.run(
        ["bash", "-c", f'"$0" audit verify {log.parent}/{log.name}*', str(binaries.server)],
        capture_output=True, text=True, timeout=60,
    )
    assert run.returncode == 0 and "skipped: " in run.stderr and "audit.jsonl.notes" in run.stderr, run.stderr
    assert "audit.jsonl.key" not in run.stderr, run.stderr
    report = subprocess.run(
        ["bash", "-c", f'"$0" audit report --format table {log.parent}/{log.name}*', str(binaries.server)],
        capture_output=True, text=True, timeout=60,
    )
    assert report.returncode == 0 and "glob" in report.stdout, report.stdout + report.stderr


# --------------------------------------------------------------------------- a tail nothing vouches for


def canonical(record: dict) -> bytes:
    """The chain's canonical form: keys sorted at every level, compact, UTF-8 as is."""
    return json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def rechained(lines: list[str], start: int) -> list[str]:
    """`lines` with every record from index `start` on hashed and chained again: what a forger who
    cannot forge the checkpoint does, before deleting it."""
    out = lines[:start]
    prev = json.loads(lines[start - 1])["hash"]
    for line in lines[start:]:
        record = json.loads(line)
        record["prev_hash"] = prev
        record.pop("hash")
        record["hash"] = prev = hashlib.sha256(canonical(record)).hexdigest()
        out.append(canonical(record).decode())
    return out


def test_a_cut_or_rewritten_log_is_unvouched_once_its_checkpoint_and_key_are_gone(
    binaries: Binaries, start_server, scratch, web: harness.WebServer
) -> None:
    """Cut by 5 records, or rewritten, then its checkpoint and key deleted: the chain holds, but the
    server's `started` record said a checkpoint is kept under a key it names, so the log is not
    INTACT: its own verdict, UNVOUCHED, exit 3 (amber in the report). An OTLP anchor still decides."""
    srv = start_server()
    srv.ok("cut", ["open", web.url("/form")])
    for _ in range(3):
        srv.ok("cut", ["get", "title"])
    srv.call("cut", ["eval", "1"])
    srv.stop()
    log = srv.cfg.audit_log
    lines = log.read_text().splitlines()
    logged = [json.loads(line) for line in lines]
    started = next(r for r in logged if r.get("outcome") == "started")
    promise = started["detail"]["checkpoint"]
    assert promise["kept"] is True and len(promise["key_fingerprint"]) == 32, promise
    assert verify(binaries, log).returncode == 0, "the untouched log, with its checkpoint and key"
    assert started["seq"] < len(lines) - 5, "the start survives the cut"

    copies = scratch("bs-unvouched-", under="/var/tmp")
    cut = copies / "cut" / "audit.jsonl"
    cut.parent.mkdir()
    cut.write_text("\n".join(lines[:-5]) + "\n")
    denial = next(i for i, r in enumerate(logged) if r["phase"] == "denied")
    rewritten = copies / "rewritten" / "audit.jsonl"
    rewritten.parent.mkdir()
    forged = json.loads(lines[denial])
    forged["reason"] = "nothing to see here"
    rewritten.write_text("\n".join(rechained([*lines[:denial], canonical(forged).decode(), *lines[denial + 1:]], denial)) + "\n")
    for copy in (cut, rewritten):
        assert not (copy.parent / "audit.jsonl.checkpoint").exists() and not (copy.parent / "audit.jsonl.key").exists()
        run = verify(binaries, copy)
        assert run.returncode == 3, (copy, run.returncode, run.stdout)
        assert run.stdout.splitlines()[-1] == "result: UNVOUCHED", run.stdout
        assert "chain: intact" in run.stdout and promise["key_fingerprint"] in run.stdout, run.stdout
        assert "INTACT" not in run.stdout.replace("NOT INTACT", "").replace("chain: intact", ""), run.stdout
        html = run_cli(binaries, "audit", "report", str(copy), "--format", "html")
        assert html.returncode == 3, html.stderr
        assert 'class="banner warn"' in html.stdout and "⚠ UNVOUCHED: " in html.stdout, html.stdout[:2000]
        assert "✔ INTACT" not in html.stdout
        table = run_cli(binaries, "audit", "report", str(copy))
        assert table.returncode == 3 and table.stdout.startswith("verification: UNVOUCHED: "), table.stdout[:300]

    # The newest record the OTLP copy holds decides: the cut log no longer reaches it, and the
    # whole log, checkpoint and key gone, is vouched for by it.
    last = logged[-1]
    anchor = f"{last['seq']}:{last['hash']}"
    run = run_cli(binaries, "audit", "verify", str(cut), "--against", anchor)
    assert run.returncode == 1 and "records were removed from the end" in run.stdout, run.stdout
    whole = copies / "whole" / "audit.jsonl"
    whole.parent.mkdir()
    shutil.copy(log, whole)
    assert verify(binaries, whole).returncode == 3
    run = run_cli(binaries, "audit", "verify", str(whole), "--against", anchor)
    assert run.returncode == 0 and run.stdout.splitlines()[-1] == "result: INTACT", run.stdout


def test_verify_on_a_live_log_says_its_server_is_running_not_that_it_vanished(
    binaries: Binaries, server, web: harness.WebServer
) -> None:
    """A running server has no `stopped` record yet: verify on its live log is INTACT and says the
    server is running, without the warning a killed one gets."""
    server.ok("live", ["get", "url"])
    log = server.cfg.audit_log
    deadline = time.monotonic() + 10
    while not any(r.get("outcome") == "started" for r in records(log)):
        assert time.monotonic() < deadline, "no started record"
        time.sleep(0.05)
    run = verify(binaries, log)
    assert run.returncode == 0 and run.stdout.splitlines()[-1] == "result: INTACT", run.stdout
    assert f"server: pid {server.pid} " in run.stdout and "is running on this host" in run.stdout, run.stdout
    assert "killed or crashed" not in run.stdout, run.stdout
