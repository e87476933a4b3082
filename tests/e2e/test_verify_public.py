"""A reviewer verifies the log with the chain's public material alone: the checkpoint is signed by a
key of its own, whose public half is all `audit verify` needs. The redaction key (which lets its
holder test guesses of short typed values) is neither needed nor tied to it: rotating or losing one
leaves the other's guarantees as they were."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from server import Binaries
from test_audit import canary_on, canonical, records, rechained, run_cli

pytestmark = pytest.mark.chromium


def reviewer_copy(log: Path, into: Path, lines: list[str] | None = None) -> Path:
    """What a reviewer is handed: the log, its checkpoint and the checkpoint's public key. No
    secret key of any kind."""
    into.mkdir(parents=True, exist_ok=True)
    copy = into / "audit.jsonl"
    if lines is None:
        shutil.copy(log, copy)
    else:
        copy.write_text("\n".join(lines) + "\n")
    shutil.copy(f"{log}.checkpoint", f"{copy}.checkpoint")
    shutil.copy(f"{log}.checkpoint-key.pub", f"{copy}.checkpoint-key.pub")
    return copy


def verify_public(binaries: Binaries, copy: Path) -> subprocess.CompletedProcess[str]:
    return run_cli(binaries, "audit", "verify", str(copy))


def test_verify_says_intact_with_the_public_key_alone_and_not_intact_when_tampered(
    binaries: Binaries, start_server, scratch
) -> None:
    srv, _ = canary_on(start_server, scratch, "bspub")
    for i in range(8):
        srv.call("pub", ["get", "title"] if i % 2 else ["eval", "1"])
    srv.stop()
    log = srv.cfg.audit_log
    secret = Path(f"{log}.checkpoint-key")
    assert secret.is_file() and secret.stat().st_mode & 0o077 == 0, "the signing key is private"
    public = Path(f"{log}.checkpoint-key.pub")
    assert public.stat().st_mode & 0o044 == 0o044, "its public half is readable by reviewers"
    assert secret.read_text().strip() != Path(f"{log}.key").read_text().strip()

    reviewer = scratch("bspub-review-", under="/var/tmp")
    copy = reviewer_copy(log, reviewer / "whole")
    assert not any(p.name.endswith((".key", "checkpoint-key")) for p in copy.parent.iterdir())
    run = verify_public(binaries, copy)
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.splitlines()[-1] == "result: INTACT", run.stdout
    assert "checkpoint: ok" in run.stdout, run.stdout

    lines = log.read_text().splitlines()
    cut = reviewer_copy(log, reviewer / "cut", lines[:-3])
    run = verify_public(binaries, cut)
    assert run.returncode == 1 and "records were removed from the end" in run.stdout, run.stdout

    # Rewritten and re-chained from a record on, the tail's hash no longer matches the signed head.
    at = len(lines) // 2
    forged = json.loads(lines[at])
    forged["reason"] = "nothing to see here"
    rewritten = reviewer_copy(
        log, reviewer / "rewritten", rechained([*lines[:at], canonical(forged).decode(), *lines[at + 1:]], at)
    )
    run = verify_public(binaries, rewritten)
    assert run.returncode == 1 and run.stdout.splitlines()[-1] == "result: NOT INTACT", run.stdout

    # A checkpoint moved back to vouch for less: its signature no longer holds.
    other = reviewer_copy(log, reviewer / "edited-checkpoint")
    checkpoint = json.loads(Path(f"{other}.checkpoint").read_text())
    checkpoint["seq"] -= 1
    Path(f"{other}.checkpoint").write_text(json.dumps(checkpoint))
    run = verify_public(binaries, other)
    assert run.returncode == 1 and "signature" in run.stdout, run.stdout


def test_a_broken_hash_says_which_value_is_stored_and_which_was_computed(
    binaries: Binaries, start_server, scratch
) -> None:
    srv, _ = canary_on(start_server, scratch, "bspubh")
    srv.call("h", ["get", "title"])
    srv.stop()
    log = srv.cfg.audit_log
    lines = log.read_text().splitlines()
    edited = json.loads(lines[1])
    stored = edited["hash"]
    edited["call_id"] = "edited"
    copy = reviewer_copy(log, scratch("bspubh-review-", under="/var/tmp"), [lines[0], canonical(edited).decode(), *lines[2:]])
    run = verify_public(binaries, copy)
    assert run.returncode == 1, run.stdout
    broken = next(line for line in run.stdout.splitlines() if "hash" in line and stored in line)
    assert f"the record stores {stored}" in broken, broken
    assert "its content hashes to " in broken, broken


def test_rotating_or_losing_one_key_leaves_the_other_as_it_was(
    binaries: Binaries, start_server, scratch
) -> None:
    log = scratch("bspubr-", under="/var/tmp") / "audit.jsonl"
    srv, _ = canary_on(start_server, scratch, "bspubr", audit_log=log)
    srv.call("r", ["fill", "#q", "abc"])
    srv.stop()
    public_before = Path(f"{log}.checkpoint-key.pub").read_text()
    mac_before = [r for r in records(log) if r.get("phase") == "intent"][-1]["argv"]

    # Lose the redaction key: the next server makes a new one; the chain's signing key is untouched,
    # so the whole log still verifies with the public half the reviewer already holds.
    Path(f"{log}.key").unlink()
    srv, _ = canary_on(start_server, scratch, "bspubr2", audit_log=log)
    srv.call("r", ["fill", "#q", "abc"])
    srv.stop()
    assert Path(f"{log}.checkpoint-key.pub").read_text() == public_before
    mac_after = [r for r in records(log) if r.get("phase") == "intent"][-1]["argv"]
    assert mac_after != mac_before, "a new redaction key gives new digests of typed text"
    run = verify_public(binaries, reviewer_copy(log, scratch("bspubr-review-", under="/var/tmp") / "a"))
    assert run.returncode == 0, run.stdout

    # Lose the signing key: a new pair, named in the next `started` record; the redaction key (and
    # with it the digests a reviewer may correlate) stays.
    redaction_key = Path(f"{log}.key").read_text()
    Path(f"{log}.checkpoint-key").unlink()
    srv, _ = canary_on(start_server, scratch, "bspubr3", audit_log=log)
    srv.call("r", ["fill", "#q", "abc"])
    srv.stop()
    assert Path(f"{log}.key").read_text() == redaction_key
    assert Path(f"{log}.checkpoint-key.pub").read_text() != public_before
    fills = [r["argv"] for r in records(log) if r.get("phase") == "intent"]
    assert fills[-1] == mac_after, "same redaction key, same digest"
    started = [r for r in records(log) if r.get("outcome") == "started"]
    assert started[-1]["detail"]["checkpoint"]["key_fingerprint"] != started[-2]["detail"]["checkpoint"]["key_fingerprint"]
    run = verify_public(binaries, reviewer_copy(log, scratch("bspubr-review-", under="/var/tmp") / "b"))
    assert run.returncode == 0, run.stdout
    # The old public half does not vouch for the new signer's checkpoint.
    old = reviewer_copy(log, scratch("bspubr-review-", under="/var/tmp") / "c")
    Path(f"{old}.checkpoint-key.pub").write_text(public_before)
    run = verify_public(binaries, old)
    assert run.returncode != 0 and "INTACT" != run.stdout.splitlines()[-1].removeprefix("result: "), run.stdout
