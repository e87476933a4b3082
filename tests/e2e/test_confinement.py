"""The spawned agent-browser (and the daemon it forks) runs confined: proven through the real
spawn path, on the real daemon, and by the kernel alone with browser-shell's validation bypassed."""

from __future__ import annotations

import json
import subprocess
import tempfile
from pathlib import Path

import pytest

import harness
from server import describe

pytestmark = pytest.mark.chromium

REPO = Path(__file__).resolve().parents[2]
PROBE = REPO / "target" / "debug" / "hardening-probe"
ZERO = "0000000000000000"

# What the probe must see when spawned exactly as agent-browser is (a subset of the Rust
# crate's list that covers every layer; the Rust tests check the full list).
EXPECTED = {
    "append_protected_0": "EACCES",  # the audit log
    "write_in_writable_dir": "ok",  # /tmp
    "write_root_home": "EACCES",
    "append_etc_passwd": "EACCES",
    "write_through_symlink_into_etc": "EACCES",
    "tcp_connect_allowed_port": "ok",  # the browser gate's port
    "tcp_connect_other_port": "EACCES",
    "tcp_bind": "EACCES",
    "socket_packet": "EPERM",
    "ptrace_traceme": "EPERM",
    "mount_tmpfs": "EPERM",
    "unshare_newuser": "EPERM",
    "bpf": "EPERM",
    "io_uring_setup": "EPERM",
    "keyctl": "EPERM",
    "perf_event_open": "EPERM",
    "clone3": "ENOSYS",
    "thread_spawn": "ok",
    "kill_parent": "EPERM",
    "prlimit_parent": "EPERM",  # the server: its RLIMIT_FSIZE must stay out of reach
    "prlimit_self": "ok",
    "udp_sendto": "EPERM",
    "mptcp_connect_other_port": "EPERM",
    "exec_written_file": "EACCES",
    "exec_memfd": "EPERM",
    "status_CapEff": ZERO,
    "status_CapPrm": ZERO,
    "status_CapBnd": ZERO,
    "status_NoNewPrivs": "1",
    "status_Seccomp": "2",
}


def test_the_shipped_binaries_as_built_for_the_tests_start_without_a_dynamic_loader(binaries) -> None:
    """tests/run links both as they ship (deploy/static-link): every confined spawn in this suite goes
    through the static trampoline, and every server is the static one that runs in production."""
    trampoline = binaries.server.parent / "hardening-trampoline"
    # The check can fail: the probe, built by plain `cargo build`, is dynamically linked.
    assert (harness.elf_interpreter(PROBE) or "").startswith("/lib"), PROBE
    for binary in (binaries.server, trampoline):
        assert harness.elf_interpreter(binary) is None, (
            f"{binary} is dynamically linked: run deploy/static-link after cargo build")


def test_probe_spawned_like_agent_browser_cannot_escape_or_touch_the_audit_log(start_server) -> None:
    assert PROBE.is_file(), f"{PROBE} missing: run `cargo build --workspace`"
    # The probe is dynamically linked; agent-browser (static musl) needs no such extra.
    srv = start_server(agent_browser=PROBE, extra_read_exec=["/usr", "/lib", "/lib64"])
    audit_log = srv.cfg.audit_log
    is_error, reply = srv.call("probe", ["fill", "#x", str(audit_log)])
    assert not is_error, describe(reply)
    probes = json.loads(reply["stdout"])["probes"]
    wrong = {k: (want, probes.get(k)) for k, want in EXPECTED.items() if probes.get(k) != want}
    assert not wrong, f"confinement gaps (expected, got): {wrong}\nall: {probes}"
    # Chromium's DevTools port is out of reach: what CDP can do there, the child cannot ask.
    is_error, reply = srv.call("probe", ["fill", "#port", str(srv.cfg.cdp_port)])
    assert not is_error, describe(reply)
    probes = json.loads(reply["stdout"])["probes"]
    assert probes.get("tcp_connect_forbidden_0") == "EACCES", probes
    # The failed append did not touch the evidence: the chain still verifies line by line.
    records = [json.loads(line) for line in audit_log.read_text().splitlines()]
    assert records and all(r["prev_hash"] == p["hash"] for p, r in zip(records, records[1:]))


def test_real_daemon_runs_confined_and_audit_records_say_so(server, web: harness.WebServer) -> None:
    server.ok("conf-1", ["open", web.url("/form")])
    pid = int((server.cfg.state_dir / "sock" / "conf-1.pid").read_text().strip())
    status = dict(
        line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line
    )
    status = {k: v.strip() for k, v in status.items()}
    for key in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
        assert status[key] == ZERO, (key, status[key])
    assert status["NoNewPrivs"] == "1" and status["Seccomp"] == "2", status
    limits = Path(f"/proc/{pid}/limits").read_text()

    def limit(name: str) -> list[str]:
        line = next(l for l in limits.splitlines() if l.startswith(name))
        return line[len(name):].split()[:2]

    assert limit("Max core file size") == ["0", "0"], limits
    assert limit("Max file size") == [str(64 * 1024 * 1024)] * 2, limits
    assert limit("Max open files") == ["1024", "1024"], limits
    records = [json.loads(line) for line in server.cfg.audit_log.read_text().splitlines()]
    spawned = [r for r in records if r.get("session_id") == "conf-1" and r["phase"] in ("intent", "outcome")]
    assert spawned, records
    for record in spawned:
        confinement = record["confinement"]
        assert confinement["landlock"] == "enforced" and confinement["seccomp"] == "enforced", confinement
        assert confinement["degraded"] is False and confinement["no_new_privs"] is True, confinement
        assert confinement["rlimits"]["Max core file size"] == 0, confinement


def test_screenshot_outside_the_output_dir_is_refused_by_validation(server, web: harness.WebServer) -> None:
    server.ok("conf-2", ["open", web.url("/form")])
    is_error, reply = server.call("conf-2", ["screenshot", "/var/tmp/escape.png"])
    assert is_error and reply["exit_code"] == 126 and "output.path" in reply["stderr"], describe(reply)


def test_kernel_refuses_a_write_outside_the_writable_roots_when_validation_is_bypassed(
    server, web: harness.WebServer
) -> None:
    """`hardening exec` runs agent-browser confined exactly as a call would, minus validation."""
    cfg = server.cfg
    escape = cfg.evidence / "escape.png"
    # /tmp is a writable root; the output dir's root is no child's (each session writes in its own
    # directory there, handed to its uid).
    inside = Path(tempfile.mkdtemp(prefix="bs-inside-", dir="/tmp")) / "inside.png"
    inside.parent.chmod(0o1777)
    batch = json.dumps([["open", web.url("/form")], ["screenshot", str(escape)]])
    flags = cfg.args()[1:]  # the same operator flags, without `serve`
    cmd = [str(cfg.server_bin), "hardening", "exec", *flags, "--",
           "--json", "--session", "bypass", "--pin-tab", "batch", "--bail"]
    run = subprocess.run(cmd, input=batch, capture_output=True, text=True, timeout=60)
    results = json.loads(run.stdout)
    assert results[0]["success"], results
    assert not results[1]["success"] and "Permission denied" in results[1]["error"], results
    assert not escape.exists()
    # The same confined path can write where it is allowed to. (A new session: each `hardening
    # exec` has a gate of its own, so the first one's daemon cannot reach Chromium any more.)
    cmd[cmd.index("bypass")] = "bypass-2"
    run = subprocess.run(cmd, input=json.dumps([["screenshot", str(inside)]]), capture_output=True, text=True, timeout=60)
    assert json.loads(run.stdout)[0]["success"], run.stdout
    assert inside.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_hardening_check_verifies_the_confinement_on_this_machine(server) -> None:
    cfg = server.cfg
    run = subprocess.run(
        [str(cfg.server_bin), "hardening", "check", *cfg.args()[1:]],
        capture_output=True, text=True, timeout=60,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "confinement verified" in run.stdout and "FAIL" not in run.stdout, run.stdout
    # The CDP abuse a child could try through the gate, and Chromium's own port, are covered; a page in
    # the probe's browser context goes out through the egress proxy, which refused what no policy allows.
    # The probe runs as a session's uid would, and the gate refuses it under another session's name.
    probes = ("gate_download_behavior", "gate_file_target", "gate_http_new_tab", "tcp_connect_forbidden_0",
              "egress_forbidden_connection", "gate_other_session")
    for probe in probes:
        assert f"ok   {probe}" in run.stdout, run.stdout
    assert "session separation: each session's daemon runs as a uid of its own" in run.stdout, run.stdout


def test_hardening_check_says_when_sessions_share_one_uid(server) -> None:
    cfg = server.cfg
    run = subprocess.run(
        [str(cfg.server_bin), "hardening", "check", *cfg.args()[1:], "--child-uids", "off"],
        capture_output=True, text=True, timeout=60,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "session separation: OFF" in run.stdout, run.stdout
    assert "gate_other_session" in run.stdout and "unchecked" in run.stdout, run.stdout


def _status(pid: int) -> dict[str, str]:
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return {k: v.strip() for k, v in (line.split(":", 1) for line in lines if ":" in line)}


def test_an_unconfined_daemon_on_a_session_socket_is_never_reused(server, web: harness.WebServer) -> None:
    """An agent-browser daemon started by hand (unconfined) on browser-shell's socket dir would
    serve the session's calls unconfined. browser-shell asks the kernel who listens on the
    socket before each call and kills that daemon if it is not confined."""
    cfg = server.cfg
    sock = cfg.state_dir / "sock"
    env = cfg.agent_browser_env()
    planted = subprocess.run(
        [str(cfg.agent_browser), "--cdp", str(cfg.cdp_port), "--json", "--session", "rogue", "--pin-tab", "get", "url"],
        env=env, capture_output=True, text=True, timeout=30,
    )
    assert planted.returncode == 0, planted.stdout + planted.stderr
    rogue = int((sock / "rogue.pid").read_text().strip())
    assert _status(rogue)["Seccomp"] == "0", "the planted daemon should be unconfined"

    assert server.ok("rogue", ["open", web.url("/form")])["url"] == web.url("/form")

    assert not Path(f"/proc/{rogue}").exists() or harness.is_zombie(rogue), "unconfined daemon survived"
    fresh = int((sock / "rogue.pid").read_text().strip())
    assert fresh != rogue
    status = _status(fresh)
    assert status["Seccomp"] == "2" and status["NoNewPrivs"] == "1" and status["CapEff"] == ZERO, status


def test_the_npm_node_shim_as_agent_browser_is_refused_at_start_naming_the_native_binary(
    server_config, agent_browser_bin: Path
) -> None:
    """`--agent-browser node_modules/.bin/agent-browser` is a Node script whose interpreter the
    confinement does not reach: the server must not start, and must say which binary to use."""
    shim = agent_browser_bin.parent / "agent-browser.js"
    assert shim.read_bytes().startswith(b"#!"), shim
    cfg = server_config(tag="bss", agent_browser=shim)
    run = subprocess.run(cfg.argv(), input="", capture_output=True, text=True, timeout=60, env=cfg.env())
    assert run.returncode != 0 and run.stdout == "", (run.returncode, run.stdout)
    assert "agent-browser-linux-musl-" in run.stderr and "Node shim" in run.stderr, run.stderr
