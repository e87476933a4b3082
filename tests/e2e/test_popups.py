"""Tabs a session's pages open (popups, `target=_blank`, and theirs) end with the session: on
`close`, and when the session is evicted for another. Otherwise they go on running script in
Chromium after the session that opened them is gone. Real Chromium and agent-browser, loopback only."""

from __future__ import annotations

import json
import urllib.parse
import urllib.request
import uuid

import harness
import pytest

pytestmark = pytest.mark.chromium


def pages_with(chromium: harness.Chromium, marker: str) -> list[str]:
    """The popups: pages whose URL is `/next?<marker>` (the page that opened them names it too)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{chromium.port}/json/list", timeout=5) as resp:
        listed = json.loads(resp.read())
    return [t["id"] for t in listed if t.get("type") == "page" and t.get("url", "").endswith(f"/next?{marker}")]


def open_popups(srv, sid: str, web: harness.WebServer, chromium: harness.Chromium) -> str:
    """The session opens a page whose link opens a popup; returns the popup's marker."""
    marker = f"popup-{uuid.uuid4().hex[:8]}"
    target = urllib.parse.quote(f"/next?{marker}", safe="")
    srv.ok(sid, ["open", web.url(f"/popper?to={target}")])
    srv.ok(sid, ["click", "#pop"])
    assert harness.poll(lambda: pages_with(chromium, marker), within=15), "the popup never opened"
    return marker


def test_a_sessions_popups_close_with_it_and_when_it_is_evicted(start_server, web, chromium) -> None:
    srv = start_server(extra_args=["--max-sessions", "1", "--session-overflow", "evict-lru"])
    closed = open_popups(srv, "pop-closed", web, chromium)
    srv.ok("pop-closed", ["close"])
    assert harness.poll(lambda: not pages_with(chromium, closed), within=15), pages_with(chromium, closed)

    evicted = open_popups(srv, "pop-evicted", web, chromium)
    srv.ok("pop-newcomer", ["get", "url"])  # one session at most: the idle one is evicted
    assert harness.poll(lambda: not pages_with(chromium, evicted), within=15), pages_with(chromium, evicted)
    records = [json.loads(line) for line in srv.cfg.audit_log.read_text().splitlines()]
    assert any(r.get("outcome") == "evicted" and r.get("session_id") == "pop-evicted" for r in records)
    assert not [r for r in records if r.get("outcome") == "retire_incomplete"], records


def pages_in_context_of(chromium: harness.Chromium, srv, sid: str) -> list[str]:
    """The page targets in the session's browser context, asked on Chromium's own port."""
    context = json.loads((srv.cfg.state_dir / "contexts.json").read_text())[sid]["context"]
    (answer,) = harness.cdp_browser_call(chromium.port, [("Target.getTargets", {})])
    infos = answer["result"]["targetInfos"]
    return [t["targetId"] for t in infos if t["type"] == "page" and t.get("browserContextId") == context]


def test_a_session_keeps_at_most_max_tabs_pages_and_each_one_more_is_closed_and_audited(
    start_server, web, chromium
) -> None:
    srv = start_server(extra_args=["--max-tabs", "3"])
    marker = f"popup-{uuid.uuid4().hex[:8]}"
    target = urllib.parse.quote(f"/next?{marker}", safe="")
    srv.ok("pop-capped", ["open", web.url(f"/popper?to={target}")])
    # agent-browser's own pages (its tab, and a spare it keeps) count too.
    own = len(pages_in_context_of(chromium, srv, "pop-capped"))
    assert own < 3
    clicks = 4
    for _ in range(clicks):
        srv.ok("pop-capped", ["click", "#pop"])
    closed = clicks - (3 - own)

    def refused(rule: str = "limits.tabs") -> list[dict]:
        records = [json.loads(line) for line in srv.cfg.audit_log.read_text().splitlines()]
        return [r for r in records if r.get("rule") == rule and r.get("session_id") == "pop-capped"]

    assert harness.poll(lambda: len(refused()) >= closed, within=15), refused()
    assert len(refused()) == closed, refused()
    assert all("closed as it opened" in r["reason"] for r in refused()), refused()
    # agent-browser's commands on a popup that closed under it are answered as Chromium would
    # (each click above returned), not audited as a tab that escaped the URL policy.
    assert refused("cdp.unwarded") == [], [r.get("reason") for r in refused("cdp.unwarded")]
    assert len(pages_in_context_of(chromium, srv, "pop-capped")) == 3
    assert len(pages_with(chromium, marker)) == 3 - own
    # The session's own tab is untouched and still answers.
    assert srv.ok("pop-capped", ["get", "url"])["url"].startswith(web.url("/popper"))
