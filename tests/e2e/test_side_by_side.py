"""Two servers with identical flags on one Chromium (two MCP clients on one machine, each starting
its own): each keeps to its own daemons, tabs, contexts and output files, and a restarted server
adopts the daemons its predecessor left, never those of a server that is still live."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

import harness
from server import BlockingServer

pytestmark = pytest.mark.chromium


def lifecycle(cfg) -> list[dict]:
    return [
        r for r in map(json.loads, cfg.audit_log.read_text().splitlines())
        if r["phase"] == "lifecycle" and "session_id" in r
    ]


def acts_on_daemons(cfg) -> list[tuple[str, str]]:
    """What a starting server did to daemons it found: adopted or closed them."""
    return [(r["session_id"], r["outcome"]) for r in lifecycle(cfg) if r["outcome"] in ("adopted", "closed")]


def test_two_live_servers_with_identical_flags_keep_to_their_own_sessions(
    server_config, web: harness.WebServer
) -> None:
    cfg = server_config(tag="bs2")
    first = BlockingServer(cfg).start()
    servers = [first]
    try:
        first.ok("u1", ["open", web.url("/form")])
        second = BlockingServer(cfg).start()
        servers.append(second)
        assert acts_on_daemons(cfg) == [], "a live server's daemon was adopted or closed by another"
        second.ok("u1", ["open", web.url("/form?who=second")])
        # Each session id names its own server's session: its own page, its own refs.
        assert first.ok("u1", ["get", "url"])["url"] == web.url("/form")
        assert second.ok("u1", ["get", "url"])["url"] == web.url("/form?who=second")
        for srv in servers:
            refs = srv.ok("u1", ["snapshot", "-i"])["refs"]
            assert "e1" in refs, refs
        # The same screenshot name: two files, each in its own server's output.
        shots = [Path(srv.ok("u1", ["screenshot", "same.png"])["path"]) for srv in servers]
        assert shots[0] != shots[1] and all(p.is_file() for p in shots), shots
        # One server ending its session leaves the other's alone.
        second.ok("u1", ["close"])
        assert first.ok("u1", ["get", "url"])["url"] == web.url("/form")
        assert shots[0].is_file()
        second.ok("u1", ["open", web.url("/form?who=second")])
        # The second goes (its client left); a new server takes its place beside the live first,
        # and adopts the second's daemon, not the first's.
        second.stop()
        servers.remove(second)
        third = BlockingServer(cfg).start()
        servers.append(third)
        assert acts_on_daemons(cfg) == [("u1", "adopted")], acts_on_daemons(cfg)
        assert third.ok("u1", ["get", "url"])["url"] == web.url("/form?who=second")
        assert first.ok("u1", ["get", "url"])["url"] == web.url("/form")
        # And once the first is gone, a new server adopts its daemon.
        first.stop()
        servers.remove(first)
        fourth = BlockingServer(cfg).start()
        servers.append(fourth)
        assert acts_on_daemons(cfg) == [("u1", "adopted")] * 2, acts_on_daemons(cfg)
        assert fourth.ok("u1", ["get", "url"])["url"] == web.url("/form")
        assert third.ok("u1", ["get", "url"])["url"] == web.url("/form?who=second")
    finally:
        for srv in servers:
            srv.stop()


def test_policy_reload_reaches_every_live_server_on_the_log(server_config, server_bin: Path) -> None:
    cfg = server_config(tag="bs2r")
    servers = [BlockingServer(cfg).start(), BlockingServer(cfg).start()]
    try:
        cfg.policy.write_text(json.dumps({"open": {"allow_private_cidrs": ["127.0.0.1/32", "127.0.0.3/32"]}}))
        run = subprocess.run([str(server_bin), "policy", "reload", "--audit-log", str(cfg.audit_log)],
                             capture_output=True, text=True, timeout=60)
        assert run.returncode == 0, run.stdout + run.stderr
        pids = {srv.pid for srv in servers}
        assert None not in pids and len(pids) == 2, pids
        assert all(f"pid {pid}" in run.stdout for pid in pids), run.stdout
        reloaded = {r["pid"] for r in map(json.loads, cfg.audit_log.read_text().splitlines()) if r.get("outcome") == "reloaded"}
        assert reloaded == pids, reloaded
        # One stops: the other is still found.
        servers.pop().stop()
        run = subprocess.run([str(server_bin), "policy", "reload", "--audit-log", str(cfg.audit_log)],
                             capture_output=True, text=True, timeout=60)
        assert run.returncode == 0 and f"pid {servers[0].pid}" in run.stdout, run.stdout + run.stderr
    finally:
        for srv in servers:
            srv.stop()
