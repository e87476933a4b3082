"""Session lifecycle: idle sessions are reaped, the session cap holds, and daemons left running by
a previous server are adopted (confined) or closed (unconfined) at start — each audited."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

import harness
from server import BlockingServer, describe

pytestmark = pytest.mark.chromium


def lifecycle(cfg) -> list[dict]:
    """The lifecycle records of sessions (not the server's own: started, stopped, reloads)."""
    return [
        r for r in map(json.loads, cfg.audit_log.read_text().splitlines())
        if r["phase"] == "lifecycle" and "session_id" in r
    ]


def tab_ids(port: int) -> set[str]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=5) as r:
        return {t["id"] for t in json.load(r)}


def alive(pid: int) -> bool:
    return Path(f"/proc/{pid}").exists() and not harness.is_zombie(pid)


def test_an_idle_session_is_reaped_with_its_daemon_tab_and_files(
    start_server, chromium: harness.Chromium, web: harness.WebServer
) -> None:
    srv = start_server(extra_args=["--session-idle-sec", "1"])
    srv.ok("reap", ["open", web.url("/form")])
    srv.ok("reap2", ["open", web.url("/next")])  # a second idle session: each tick retires all it finds
    sock = srv.cfg.state_dir / "sock"
    # Read at once: on a busy machine the next call may outlast reap2's 1 s of idleness.
    pid2 = int((sock / "reap2.pid").read_text())
    shot = Path(srv.ok("reap", ["screenshot", "r.png"])["path"])
    pid = int((sock / "reap.pid").read_text())
    target = json.loads((sock / "reap.target").read_text())["targetId"]
    assert shot.exists() and alive(pid) and target in tab_ids(chromium.port)
    deadline = time.monotonic() + 15
    while not any(r["outcome"] == "reaped" and r["session_id"] == "reap" for r in lifecycle(srv.cfg)):
        assert time.monotonic() < deadline, "the idle session was never reaped"
        time.sleep(0.2)
    # The record comes first (audit before acting); the retirement follows it.
    while alive(pid) or list(sock.glob("reap.*")) or shot.parent.exists():
        assert time.monotonic() < deadline, "the reaped session was not retired"
        time.sleep(0.1)
    assert not alive(pid), "the reaped session's daemon is still running"
    assert not list(sock.glob("reap.*")), list(sock.iterdir())
    assert not shot.exists() and not shot.parent.exists()
    assert target not in tab_ids(chromium.port), "the reaped session's tab is still open"
    record = next(r for r in lifecycle(srv.cfg) if r["outcome"] == "reaped" and r["session_id"] == "reap")
    assert "idle for more than 1 s" in record["reason"], record
    assert not [r for r in lifecycle(srv.cfg) if r["outcome"] == "retire_incomplete"], lifecycle(srv.cfg)
    assert not harness.session_cli_processes("reap"), "the reaped session's standby is still running"
    while not {r["session_id"] for r in lifecycle(srv.cfg) if r["outcome"] == "reaped"} >= {"reap", "reap2"}:
        assert time.monotonic() < deadline, "the second idle session was never reaped"
        time.sleep(0.1)
    while alive(pid2) or list(sock.glob("reap2.*")):
        assert time.monotonic() < deadline, "the second reaped session was not retired"
        time.sleep(0.1)


def test_a_standby_touches_nothing_until_a_call_gives_it_a_command(start_server, web: harness.WebServer) -> None:
    """After a call, browser-shell spawns the session's next agent-browser ahead of time
    (src/runner/standby.rs), before that call's intent exists. It must do nothing until a call feeds it:
    with the session's daemon gone, no new daemon appears while it waits; the next call is then
    served by it."""
    srv = start_server()
    form = web.url("/form")
    srv.ok("standby", ["open", form])
    standby = harness.wait_for("a standby for the session", lambda: harness.session_cli_processes("standby"), within=10)
    assert len(standby) == 1, standby
    daemon = int((srv.cfg.state_dir / "sock" / "standby.pid").read_text())
    os.kill(daemon, signal.SIGKILL)
    harness.wait_for("the daemon to be gone", lambda: not alive(daemon), within=10)
    time.sleep(1.0)  # time enough to start a daemon, had the standby wanted to
    assert all(alive(pid) for pid in standby), "the standby did not wait for its command"
    others = [pid for pid in harness.daemons_under([srv.cfg.base]) if pid not in standby]
    assert not others, f"a standby with no command started something: {others}"
    assert srv.ok("standby", ["get", "url"]) == {"url": form}
    assert not any(alive(pid) for pid in standby), "the call was not served by the standby"


def test_the_session_cap_refuses_a_new_session_until_one_closes(start_server, web: harness.WebServer) -> None:
    srv = start_server(extra_args=["--max-sessions", "2"])
    srv.ok("cap-1", ["open", web.url("/form")])
    srv.ok("cap-2", ["open", web.url("/form")])
    is_error, reply = srv.call("cap-3", ["get", "url"])
    assert is_error and "refused [limits.sessions]" in reply["stderr"], describe(reply)
    srv.ok("cap-1", ["close"])
    assert srv.ok("cap-3", ["get", "url"])["url"] == "about:blank"


def test_evict_lru_makes_room_by_retiring_the_least_recently_used_idle_session(
    start_server, web: harness.WebServer
) -> None:
    srv = start_server(extra_args=["--max-sessions", "2", "--session-overflow", "evict-lru"])
    srv.ok("lru-1", ["open", web.url("/form")])
    srv.ok("lru-2", ["open", web.url("/form")])
    pid = int((srv.cfg.state_dir / "sock" / "lru-1.pid").read_text())
    srv.ok("lru-2", ["get", "url"])  # lru-1 is now the least recently used
    assert srv.ok("lru-3", ["get", "url"])["url"] == "about:blank"
    evicted = [r for r in lifecycle(srv.cfg) if r["outcome"] == "evicted"]
    assert [r["session_id"] for r in evicted] == ["lru-1"], evicted
    assert not alive(pid)


def test_a_pin_file_naming_another_sessions_tab_closes_nothing_of_that_session(
    start_server, chromium, web: harness.WebServer
) -> None:
    # The pin file is the child's to write: a compromised child can name any tab in it, and retiring
    # its session used to close that tab.
    srv = start_server(extra_args=["--max-sessions", "2", "--session-overflow", "evict-lru"])
    srv.ok("pin-evil", ["open", web.url("/form")])
    srv.ok("pin-victim", ["open", web.url("/form")])
    sock = srv.cfg.state_dir / "sock"
    victim_tab = json.loads((sock / "pin-victim.target").read_text())["targetId"]
    (sock / "pin-evil.target").write_text(json.dumps({"targetId": victim_tab}))
    srv.ok("pin-victim", ["get", "url"])  # pin-evil is now the least recently used
    srv.ok("pin-new", ["get", "url"])  # evicts pin-evil: its daemon stops, its own tab closes
    evicted = [r["session_id"] for r in lifecycle(srv.cfg) if r["outcome"] == "evicted"]
    assert evicted == ["pin-evil"], evicted
    assert victim_tab in tab_ids(chromium.port)
    assert srv.ok("pin-victim", ["get", "url"])["url"] == web.url("/form")


def test_daemons_from_a_previous_server_are_adopted_or_closed(server_config, web: harness.WebServer) -> None:
    cfg = server_config(tag="bso")
    first = BlockingServer(cfg).start()
    try:
        first.ok("orph", ["open", web.url("/form")])
    finally:
        first.stop()  # stdin EOF: the session's daemon outlives the server
    sock = cfg.state_dir / "sock"
    kept = int((sock / "orph.pid").read_text())
    assert alive(kept)
    # An unconfined daemon planted on the same socket dir.
    env = cfg.agent_browser_env()
    subprocess.run([str(cfg.agent_browser), "--cdp", str(cfg.cdp_port), "--json", "--session", "rogue2", "--pin-tab", "get", "url"],
                   env=env, capture_output=True, timeout=30, check=True)
    rogue = int((sock / "rogue2.pid").read_text())
    second = BlockingServer(cfg).start()
    try:
        events = {r["session_id"]: r["outcome"] for r in lifecycle(cfg)}
        assert events.get("orph") == "adopted" and events.get("rogue2") == "closed", events
        assert alive(kept) and not alive(rogue)
        assert second.ok("orph", ["get", "url"])["url"] == web.url("/form")
    finally:
        second.stop()


def test_daemons_of_a_server_whose_gate_was_on_another_port_are_closed(
    server_config, web: harness.WebServer
) -> None:
    # A daemon reconnects to the gate URL it was started with; on another port that URL is dead.
    cfg = server_config(tag="bsg")
    ports = []
    for _ in range(2):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            ports.append(probe.getsockname()[1])
    cfg.extra_args = [*cfg.extra_args, "--gate-port", str(ports[0])]
    first = BlockingServer(cfg).start()
    try:
        first.ok("moved", ["open", web.url("/form")])
    finally:
        first.stop()
    kept = int((cfg.state_dir / "sock" / "moved.pid").read_text())
    assert alive(kept)
    cfg.extra_args = [*cfg.extra_args[:-2], "--gate-port", str(ports[1])]
    second = BlockingServer(cfg).start()
    try:
        closed = [r for r in lifecycle(cfg) if r["session_id"] == "moved"]
        assert [r["outcome"] for r in closed] == ["closed"], closed
        assert "another port" in closed[0]["reason"], closed
        assert not alive(kept)
        # The session works again, through the new gate, on its own tab.
        assert second.ok("moved", ["get", "url"])["url"] == web.url("/form")
    finally:
        second.stop()


def test_screenshots_stay_within_the_output_quota_oldest_first(start_server, web: harness.WebServer) -> None:
    # Room for exactly one file of up to 200 kB: before each screenshot every older one must go.
    srv = start_server(extra_args=["--child-max-file-bytes", "200000", "--output-quota-session-bytes", "200001"])
    srv.ok("quota", ["open", web.url("/form")])
    paths = [Path(srv.ok("quota", ["screenshot", f"{i}.png"])["path"]) for i in range(5)]
    kept = sorted(p.name for p in paths[-1].parent.iterdir())
    assert kept == ["4.png"], kept


def test_a_quota_that_cannot_hold_one_screenshot_refuses_before_it_runs(start_server, web: harness.WebServer) -> None:
    srv = start_server(extra_args=["--child-max-file-bytes", "200000", "--output-quota-session-bytes", "100000"])
    srv.ok("quota2", ["open", web.url("/form")])
    is_error, reply = srv.call("quota2", ["screenshot"])
    assert is_error and "refused [limits.output_quota]" in reply["stderr"], describe(reply)


def test_on_exit_end_closes_every_session_as_the_server_stops(server_config, chromium, web: harness.WebServer) -> None:
    # The stdio client's "down": with --on-exit end, a client that leaves takes its sessions with it,
    # and the next server starts with none (refs from e1, as SKILL.md shows).
    cfg = server_config(tag="bsx")
    cfg.extra_args = [*cfg.extra_args, "--on-exit", "end"]
    first = BlockingServer(cfg).start()
    try:
        first.ok("ends", ["open", web.url("/form")])
        sock = cfg.state_dir / "sock"
        pid = int((sock / "ends.pid").read_text())
        target = json.loads((sock / "ends.target").read_text())["targetId"]
        shot = Path(first.ok("ends", ["screenshot", "e.png"])["path"])
    finally:
        first.stop()  # stdin EOF
    closed = [r for r in lifecycle(cfg) if r["session_id"] == "ends"]
    assert [r["outcome"] for r in closed] == ["closed"] and "--on-exit end" in closed[0]["reason"], closed
    harness.wait_for("the daemon to exit", lambda: not alive(pid), within=10)
    assert target not in tab_ids(chromium.port), "the ended session's tab is still open"
    assert not shot.exists() and not list(sock.glob("ends.*")), list(sock.iterdir())
    second = BlockingServer(cfg).start()
    try:
        assert not [r for r in lifecycle(cfg) if r["outcome"] == "adopted"], lifecycle(cfg)
        second.ok("ends", ["open", web.url("/form")])
        assert "e1" in second.ok("ends", ["snapshot", "-i"])["refs"]
    finally:
        second.stop()
