"""Nothing the confined child can write may steer the unconfined server (issue 20, item 3). The
confined agent-browser may write all of /tmp: an agent-browser binary, a trampoline or a policy
file there stops the start with a message naming the file and the operator flag that accepts it;
with the flag the server starts, works, and names each such file in a warning on stderr;
`hardening check` reports every trusted file. Which trampoline every child starts as is on the
`started` record."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

import harness
from server import BlockingServer, ServerConfig

pytestmark = pytest.mark.chromium

FLAG = "--allow-child-writable-inputs"


def start_strict(cfg: ServerConfig) -> subprocess.CompletedProcess[str]:
    """The server with cfg, without the flag (also in a checkout under /tmp, where the suite's
    servers get it: the refusal then names browser-shell's own binary too)."""
    cfg.allow_child_writable_inputs = False
    cfg.base.mkdir(parents=True, exist_ok=True)
    cfg.write_policy()
    return subprocess.run(cfg.argv(), input="", capture_output=True, text=True, timeout=60, env=cfg.env())


def assert_refused_naming(run: subprocess.CompletedProcess[str], what: str, path: Path) -> None:
    assert run.returncode == 2 and run.stdout == "", (run.returncode, run.stdout, run.stderr)
    assert f"{what} {path} lies under /tmp" in run.stderr, run.stderr
    assert "the confined agent-browser may write" in run.stderr and FLAG in run.stderr, run.stderr


def assert_starts_with_warning(cfg: ServerConfig, web: harness.WebServer, sid: str, what: str, path: Path) -> None:
    """With the flag: the server starts and serves a call, and its stderr names the file."""
    cfg.allow_child_writable_inputs = True
    srv = BlockingServer(cfg).start()
    try:
        assert srv.ok(sid, ["open", web.url("/form")])["url"] == web.url("/form")
    finally:
        srv.stop()
    warning = rf"WARN .*{re.escape(what)} lies where the confined agent-browser may write.*file={re.escape(str(path))}"
    assert re.search(warning, cfg.stderr_log.read_text()), harness.tail(cfg.stderr_log)


def test_an_agent_browser_copied_under_tmp_stops_the_start_naming_it_and_the_flag(
    server_config, scratch, agent_browser_bin: Path, web: harness.WebServer
) -> None:
    copy = scratch("bs-abcopy-") / "agent-browser"
    shutil.copy2(agent_browser_bin, copy)
    cfg = server_config(tag="bsab", agent_browser=copy)
    assert_refused_naming(start_strict(cfg), "the agent-browser binary", copy)
    assert_starts_with_warning(cfg, web, "abtmp", "the agent-browser binary", copy)


def started_record(cfg: ServerConfig) -> dict:
    return next(r for r in map(json.loads, cfg.audit_log.read_text().splitlines()) if r.get("outcome") == "started")


def test_a_trampoline_under_tmp_stops_the_start_naming_it_and_the_flag(
    server_config, scratch, server_bin: Path, web: harness.WebServer
) -> None:
    copy = scratch("bs-trcopy-") / "hardening-trampoline"
    shutil.copy2(server_bin.parent / "hardening-trampoline", copy)
    cfg = server_config(tag="bstr")
    cfg.extra_args = ["--trampoline", str(copy)]
    assert_refused_naming(start_strict(cfg), "the confinement trampoline", copy)
    assert_starts_with_warning(cfg, web, "trtmp", "the confinement trampoline", copy)
    assert started_record(cfg)["detail"]["trampoline"] == {"path": str(copy), "sha256": harness.sha256_of(copy)}


def test_a_missing_trampoline_stops_the_start_saying_what_to_set(server_config, scratch) -> None:
    missing = scratch("bs-notr-") / "hardening-trampoline"
    cfg = server_config(tag="bsnotr")
    cfg.extra_args = ["--trampoline", str(missing)]
    cfg.allow_child_writable_inputs = True
    cfg.base.mkdir(parents=True, exist_ok=True)
    cfg.write_policy()
    run = subprocess.run(cfg.argv(), input="", capture_output=True, text=True, timeout=60, env=cfg.env())
    assert run.returncode == 2 and run.stdout == "", (run.returncode, run.stderr)
    assert f"the trampoline {missing} is not there" in run.stderr and "--trampoline" in run.stderr, run.stderr


def test_a_server_binary_without_the_trampoline_beside_it_is_its_own(
    server_config, scratch, server_bin: Path, web: harness.WebServer
) -> None:
    """Installed alone (no hardening-trampoline beside it), the server's own binary confines each
    child, and the record says so."""
    alone = scratch("bs-alone-") / "browser-shell"
    shutil.copy2(server_bin, alone)
    cfg = server_config(tag="bsalone")
    cfg.server_bin = alone
    cfg.allow_child_writable_inputs = True
    srv = BlockingServer(cfg).start()
    try:
        assert srv.ok("alone", ["open", web.url("/form")])["url"] == web.url("/form")
    finally:
        srv.stop()
    detail = started_record(cfg)["detail"]
    assert detail["trampoline"] == {"path": None, "sha256": detail["browser_shell"]["sha256"]}, detail
    assert detail["browser_shell"]["sha256"] == harness.sha256_of(alone)


def test_a_policy_file_under_tmp_stops_the_start_naming_it_and_the_flag(
    server_config, scratch, web: harness.WebServer
) -> None:
    policy = scratch("bs-policy-") / "policy.json"
    cfg = server_config(tag="bspol")
    cfg.policy_path = policy
    assert_refused_naming(start_strict(cfg), "the policy file", policy)
    assert_starts_with_warning(cfg, web, "poltmp", "the policy file", policy)


def test_a_missing_policy_path_under_tmp_is_refused_too(server_config, scratch) -> None:
    """A missing policy file means the built-in default, until the child creates one there for the
    next start to load."""
    policy = scratch("bs-nopolicy-") / "policy.json"
    cfg = server_config(tag="bsnop")
    cfg.policy_path, cfg.policy_json = policy, None
    run = start_strict(cfg)
    assert_refused_naming(run, "the policy file", policy)
    assert "could rewrite (or create) the URL policy" in run.stderr, run.stderr
    assert not policy.exists()


def test_hardening_check_reports_each_trusted_file(server_config, scratch) -> None:
    policy = scratch("bs-hcpolicy-") / "policy.json"
    cfg = server_config(tag="bshc")
    cfg.policy_path = policy
    cfg.allow_child_writable_inputs = True
    cfg.base.mkdir(parents=True, exist_ok=True)
    cfg.write_policy()
    argv = [str(cfg.server_bin), "hardening", "check", *cfg.args()[1:]]
    run = subprocess.run(argv, input="", capture_output=True, text=True, timeout=120, env=cfg.env())
    assert "files the child must not write" in run.stdout, run.stdout + run.stderr
    assert f"the policy file {policy}: UNDER /tmp (accepted by {FLAG})" in run.stdout, run.stdout
    assert f"the audit key {cfg.audit_log}.key: ok" in run.stdout, run.stdout
    for what in ("the agent-browser binary", "browser-shell's own binary", "the confinement trampoline"):
        assert re.search(rf"^  {re.escape(what)} \S+: (ok|UNDER /tmp)", run.stdout, re.M), run.stdout
