"""The self-sized pool, the default: nothing starts before the first call; then at least one daemon is
kept ready, more while new sessions arrive close together, never more than `--max-sessions`; and after
`--pool-idle-sec` without a new session it falls back to one. Each decision is read from the real server's
`warming`, `pooled`, `bound` and `reaped` records."""

from __future__ import annotations

import json
import time

import pytest

import harness
from test_pool import pages_in_context, pool_records, records, tabs

pytestmark = pytest.mark.chromium


def page_ids(port: int) -> set[str]:
    return set(tabs(port))


def browser_contexts(chromium: harness.Chromium) -> set[str]:
    (answer,) = harness.cdp_browser_call(chromium.port, [("Target.getBrowserContexts", {})])
    return set(answer["result"]["browserContextIds"])


def ready_over_time(cfg) -> tuple[set[str], int]:
    """The pooled daemons ready now, and the most that were ready at once, replayed from the records."""
    ready: set[str] = set()
    most = 0
    for r in records(cfg):
        if r["phase"] != "lifecycle" or not isinstance(r.get("detail"), dict):
            continue
        daemon = r["detail"].get("daemon")
        if r.get("outcome") == "pooled":
            ready.add(daemon)
        elif r.get("outcome") in ("bound", "reaped", "closed"):
            ready.discard(daemon)
        most = max(most, len(ready))
    return ready, most


def window_titles(chromium: harness.Chromium, cfg, daemon: str) -> set[str]:
    return {page["title"] for page in pages_in_context(chromium, cfg, daemon)}


def test_the_default_pool_starts_nothing_before_the_first_call_then_keeps_one_ready(
    start_server, chromium: harness.Chromium
) -> None:
    before = page_ids(chromium.port)
    srv = start_server(pool=None)  # no --pool: the server's default
    time.sleep(2.0)
    started = next(r for r in records(srv.cfg) if r.get("outcome") == "started")
    assert started["detail"]["limits"]["pool"] == "auto", started["detail"]["limits"]
    assert not pool_records(srv.cfg, "warming"), "a server nobody called warmed a daemon"
    assert not list((srv.cfg.state_dir / "sock").glob("*.pid")), "a server nobody called started a daemon"
    assert page_ids(chromium.port) == before, "a server nobody called opened a page"

    assert srv.ok("first", ["get", "url"])["url"] == "about:blank"
    assert not [r for r in pool_records(srv.cfg, "bound") if r.get("session_id") == "first"], "nothing was pooled yet"
    (warming,) = harness.wait_for("a warm-up after the first call", lambda: pool_records(srv.cfg, "warming"), within=60)
    assert warming["detail"]["pool"]["target"] == 1, warming
    (ready,) = harness.wait_for("the warm-up to become ready", lambda: pool_records(srv.cfg, "pooled"), within=60)
    # Its window already says it waits (so binding only renames it, starting no renderer on a call's path).
    waiting = harness.wait_for("the pooled window's label for a new session",
                       lambda: window_titles(chromium, srv.cfg, ready["detail"]["daemon"]) & {"(ready for a new session) · browser-shell session"}, within=60)
    assert waiting

    # More than 2 s after the first: sessions that far apart keep the floor of one.
    time.sleep(2.2)
    assert srv.ok("second", ["get", "url"])["url"] == "about:blank"
    bound = [r for r in pool_records(srv.cfg, "bound") if r.get("session_id") == "second"]
    assert len(bound) == 1, "the next new session takes the ready daemon"
    assert harness.wait_for("the bound window's name for its session",
                    lambda: "second · browser-shell session" in window_titles(chromium, srv.cfg, ready["detail"]["daemon"]), within=60)
    ready, _ = harness.wait_for("the pool to refill to one", lambda: ready_over_time(srv.cfg)[0] and ready_over_time(srv.cfg), within=60)
    assert len(ready) == 1, ready


def test_the_default_pool_grows_with_new_sessions_up_to_max_sessions_then_falls_back_to_one(
    start_server,
) -> None:
    srv = start_server(pool=None, extra_args=["--max-sessions", "2", "--pool-idle-sec", "4"])
    # New sessions one after another, each closed at once: more arrive within two seconds than the cap.
    for i in range(8):
        assert srv.ok(f"n{i}", ["get", "url"])["url"] == "about:blank"
        srv.ok(f"n{i}", ["close"])
        if i == 0:
            harness.wait_for("a pooled daemon", lambda: pool_records(srv.cfg, "pooled"), within=60)
    warmings = [r["detail"]["pool"] for r in pool_records(srv.cfg, "warming")]
    assert max(w["target"] for w in warmings) == 2, f"the pool grew to the cap of 2: {warmings}"
    assert max(w["peak_arrivals"] for w in warmings) > 2, f"more arrived than the cap allows: {warmings}"
    assert all(w["target"] <= 2 for w in warmings), warmings
    assert [r for r in pool_records(srv.cfg, "bound") if r["session_id"].startswith("n")], "no session was served"
    harness.wait_for("the pool to reach its cap", lambda: len(ready_over_time(srv.cfg)[0]) == 2, within=60)
    assert ready_over_time(srv.cfg)[1] <= 2, "more daemons were ready at once than --max-sessions"

    # No new session for --pool-idle-sec: back to one, on the record.
    reaped = harness.wait_for("the pool to shrink", lambda: pool_records(srv.cfg, "reaped"), within=30)
    assert "floor of 1" in reaped[0]["reason"], reaped[0]
    ready, _ = ready_over_time(srv.cfg)
    assert len(ready) == 1, ready
    time.sleep(2.5)
    assert len(ready_over_time(srv.cfg)[0]) == 1, "the floor is kept"


def test_a_session_id_used_again_after_close_is_served_by_the_pool(start_server, web: harness.WebServer) -> None:
    """An agent that ends its task with `close` and starts the next under the same id (the smoke flow does)
    gets a ready daemon on a fresh tab, not a daemon started for it; nothing of the closed session's page
    is there."""
    srv = start_server(pool=None)
    srv.ok("again", ["open", web.url("/form")])
    srv.ok("again", ["close"])
    harness.wait_for("a pooled daemon", lambda: pool_records(srv.cfg, "pooled"), within=60)
    assert srv.ok("again", ["get", "url"])["url"] == "about:blank"
    bound = [r for r in pool_records(srv.cfg, "bound") if r.get("session_id") == "again"]
    assert len(bound) == 1, "the closed session's id came back and waited for a daemon of its own"


def test_a_stopped_server_leaves_no_browser_context_of_its_unbound_pooled_daemons(
    start_server, chromium: harness.Chromium
) -> None:
    """An unbound pooled daemon's whole browser context goes at exit, its waiting window (the label page)
    included: no tab is left behind whose proxy died with the server."""
    srv = start_server(pool=None)
    assert srv.ok("first", ["get", "url"])["url"] == "about:blank"
    (ready,) = harness.wait_for("a pooled daemon", lambda: pool_records(srv.cfg, "pooled"), within=60)
    daemon = ready["detail"]["daemon"]
    context = json.loads((srv.cfg.state_dir / "contexts.json").read_text())[daemon]["context"]
    harness.wait_for("the pooled window's label", lambda: window_titles(chromium, srv.cfg, daemon), within=60)
    srv.stop()

    harness.wait_for(
        "the unbound pooled daemon's browser context to go with its server",
        lambda: context not in browser_contexts(chromium),
        within=10,
    )


def test_a_server_stopped_during_a_warm_up_leaves_no_daemon_or_context_of_it(
    start_server, chromium: harness.Chromium
) -> None:
    """The server stops while a pooled daemon is still warming: that daemon and its browser context are
    closed at exit like the ready ones, on the record, not left with a proxy that died with the server."""
    before = browser_contexts(chromium)
    srv = start_server(pool="4")  # pinned: warms at start, two at a time
    warming = harness.wait_for("a warm-up", lambda: pool_records(srv.cfg, "warming"), within=30)
    srv.stop()
    names = {r["detail"]["daemon"] for r in pool_records(srv.cfg, "warming")}
    ready = {r["detail"]["daemon"] for r in pool_records(srv.cfg, "pooled")}
    assert names - ready, f"every warm-up had finished before the stop; nothing was cut short: {warming}"
    closed = {r["detail"]["daemon"] for r in pool_records(srv.cfg, "closed")}
    assert names <= closed, f"a warm-up cut short by the stop was not closed on the record: {sorted(names - closed)}"
    gone = harness.poll(lambda: not browser_contexts(chromium) - before, within=10)
    assert gone, f"browser contexts outlived the server: {browser_contexts(chromium) - before}"
    assert not list((srv.cfg.state_dir / "sock").glob("pool-*.pid")), "a pooled daemon outlived the server"
