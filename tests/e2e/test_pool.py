"""The daemon pool (`--pool N`): a new session is bound to a daemon that was started ahead of it, on a
tab of its own that has never left about:blank; two sessions never share one; every binding, warm-up
and closing is in the audit log; a closed pooled session's tab is closed; the pool refills."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.request

import anyio
import pytest

import harness
from server import BlockingServer, call

pytestmark = pytest.mark.chromium


def records(cfg) -> list[dict]:
    return [json.loads(line) for line in cfg.audit_log.read_text().splitlines()]


def pool_records(cfg, outcome: str) -> list[dict]:
    return [r for r in records(cfg) if r["phase"] == "lifecycle" and r.get("outcome") == outcome]


def tabs(port: int) -> dict[str, dict]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=5) as r:
        return {t["id"]: t for t in json.load(r) if t.get("type") == "page"}


def wait_gone(port: int, tab_ids: set[str], what: str, within: float = 15.0) -> None:
    """Wait until none of `tab_ids` is listed. DevTools' `/json/close` answers "Target is closing" and
    Chromium drops the tab a moment later, so a closed tab may still be listed just after its close."""
    deadline = time.monotonic() + within
    while left := tab_ids & set(tabs(port)):
        assert time.monotonic() < deadline, f"{what}: {sorted(left)}"
        time.sleep(0.1)


def wait_pooled(cfg, count: int, within: float = 30.0) -> list[dict]:
    """Wait until `count` daemons have been warmed in all (the pool fills one at a time)."""
    deadline = time.monotonic() + within
    while len(found := pool_records(cfg, "pooled")) < count:
        assert time.monotonic() < deadline, f"only {len(found)} of {count} pooled daemons came up: {records(cfg)[-5:]}"
        time.sleep(0.1)
    return found


def bound(cfg, sid: str) -> dict:
    found = [r for r in pool_records(cfg, "bound") if r.get("session_id") == sid]
    assert len(found) == 1, (sid, found)
    return found[0]


def test_pooled_sessions_start_on_fresh_blank_tabs_of_their_own_and_are_bound_on_record(
    start_server, binaries, chromium: harness.Chromium, web: harness.WebServer
) -> None:
    srv = start_server(extra_args=["--pool", "2"])
    ready = wait_pooled(srv.cfg, 2)
    ready_tabs = {r["detail"]["tab"] for r in ready}
    assert len(ready_tabs) == 2, ready
    # Each pooled tab exists and has never left about:blank.
    open_tabs = tabs(chromium.port)
    for tab in ready_tabs:
        assert open_tabs[tab]["url"] == "about:blank", open_tabs[tab]

    # First session: bound to a pooled daemon, starts on about:blank, then navigates away.
    assert srv.ok("pa", ["get", "url"])["url"] == "about:blank"
    a = bound(srv.cfg, "pa")["detail"]
    assert a["tab"] in ready_tabs and a["daemon"].startswith("pool-")
    srv.ok("pa", ["open", web.url("/form")])
    # Second session: another daemon, another tab, still blank; nothing of pa's page or history.
    assert srv.ok("pb", ["get", "url"])["url"] == "about:blank"
    b = bound(srv.cfg, "pb")["detail"]
    assert b["tab"] != a["tab"] and b["daemon"] != a["daemon"], (a, b)
    assert srv.ok("pb", ["back"]) is not None
    assert srv.ok("pb", ["get", "url"])["url"] == "about:blank", "a pooled tab has no history to go back to"
    assert tabs(chromium.port)[a["tab"]]["url"] == web.url("/form")

    # The binding precedes the session's first intent, and the session's calls name the agent's id.
    log = records(srv.cfg)
    first_intent = next(i for i, r in enumerate(log) if r["phase"] == "intent" and r.get("session_id") == "pa")
    binding = next(i for i, r in enumerate(log) if r.get("outcome") == "bound" and r.get("session_id") == "pa")
    assert binding < first_intent
    warming = [r for r in log if r.get("outcome") == "warming"]
    assert {r["detail"]["daemon"] for r in warming} >= {a["daemon"], b["daemon"]}
    # A warm-up is the server's own act, not a call: a lifecycle record, never a call without outcome.
    assert {r["phase"] for r in warming} == {"lifecycle"}, warming
    verified = subprocess.run(
        [str(srv.cfg.server_bin), "audit", "verify", str(srv.cfg.audit_log)], capture_output=True, text=True, timeout=60
    )
    assert "dangling intents (allowed calls with no outcome: crash or kill mid-call): 0" in verified.stdout, verified.stdout

    # A session's second call uses its daemon: no second binding.
    srv.ok("pa", ["get", "url"])
    bound(srv.cfg, "pa")

    # close: the pooled tab is closed (recorded first), and the next call of the id binds anew.
    srv.ok("pa", ["close"])
    wait_gone(chromium.port, {a["tab"]}, "the closed pooled session's tab is still open")
    closed = [r for r in pool_records(srv.cfg, "closed") if r.get("session_id") == "pa"]
    assert closed and a["daemon"] in closed[0]["reason"], closed
    wait_pooled(srv.cfg, 3)  # refilled after the first take
    assert srv.ok("pa", ["get", "url"])["url"] == "about:blank"
    again = [r["detail"] for r in pool_records(srv.cfg, "bound") if r.get("session_id") == "pa"]
    assert len(again) == 2 and again[1]["tab"] not in (a["tab"], b["tab"]), again

    # At exit, unbound pooled daemons and their tabs are closed. (Refills wait for a quiet moment.)
    deadline = time.monotonic() + 30
    while len(pool_records(srv.cfg, "pooled")) - len(pool_records(srv.cfg, "bound")) < 2:
        assert time.monotonic() < deadline, "the pool did not refill"
        time.sleep(0.1)
    srv.stop()
    still_ready = {r["detail"]["tab"] for r in pool_records(srv.cfg, "pooled")} - {
        r["detail"]["tab"] for r in pool_records(srv.cfg, "bound")}
    assert still_ready, "the pool should have held a ready daemon at exit"
    stopping = {r["detail"]["tab"] for r in pool_records(srv.cfg, "closed") if r["reason"] == "the server is stopping"}
    assert still_ready <= stopping, "every unbound pooled daemon is closed on the record at exit"
    wait_gone(chromium.port, still_ready, "an unbound pooled tab outlived its server")
    verify = subprocess.run([str(binaries.server), "audit", "verify", str(srv.cfg.audit_log)], capture_output=True, text=True)
    assert verify.returncode == 0, verify.stdout + verify.stderr


def test_new_sessions_arriving_at_once_never_share_a_daemon_or_a_tab(
    start_server, chromium: harness.Chromium, web: harness.WebServer
) -> None:
    """Six new sessions call at the same moment on a pool of three: each gets a daemon and a tab of its
    own (three pooled, the rest their own), and each reads back only its own page."""
    srv = start_server(extra_args=["--pool", "3"])
    wait_pooled(srv.cfg, 3)
    sids = [f"burst{i}" for i in range(6)]
    own = {sid: web.url(f"/next?owner={sid}") for sid in sids}

    async def scenario(session) -> dict[str, list]:
        seen: dict[str, list] = {}

        async def one(sid: str) -> None:
            first = await call(session, sid, ["get", "url"], 60)
            opened = await call(session, sid, ["open", own[sid]], 60)
            again = await call(session, sid, ["get", "url"], 60)
            seen[sid] = [first, opened, again]

        with anyio.fail_after(300):
            async with anyio.create_task_group() as tg:
                for sid in sids:
                    tg.start_soon(one, sid)
        return seen

    seen = srv.run(scenario)
    for sid, replies in seen.items():
        for is_error, reply in replies:
            assert not is_error and reply["exit_code"] == 0, (sid, reply)
        assert json.loads(replies[0][1]["stdout"]) == {"url": "about:blank"}, (sid, replies[0])
        assert json.loads(replies[2][1]["stdout"]) == {"url": own[sid]}, (sid, replies[2])
    bindings = [r for r in pool_records(srv.cfg, "bound") if r.get("session_id") in own]
    assert len(bindings) == 3, bindings
    assert len({r["detail"]["daemon"] for r in bindings}) == 3
    assert len({r["detail"]["tab"] for r in bindings}) == 3
    # Every session's page is in a tab of its own.
    pages = [t["url"] for t in tabs(chromium.port).values()]
    for sid in sids:
        assert pages.count(own[sid]) == 1, (sid, pages)


def test_a_restart_closes_the_previous_servers_pooled_daemons_and_their_tabs(
    server_config, chromium: harness.Chromium
) -> None:
    """Which session a pooled daemon served does not survive a restart: the next server closes it (on the
    record) instead of adopting it; the session id starts anew. The unbound ones went at the first exit."""
    cfg = server_config(tag="bsp")
    cfg.extra_args = [*cfg.extra_args, "--pool", "1"]
    first = BlockingServer(cfg).start()
    try:
        wait_pooled(cfg, 1)
        assert first.ok("kept", ["get", "url"])["url"] == "about:blank"
        taken = bound(cfg, "kept")["detail"]
        wait_pooled(cfg, 2)  # the refill, unbound at exit
    finally:
        first.stop()
    spare = next(r["detail"] for r in pool_records(cfg, "pooled") if r["detail"]["daemon"] != taken["daemon"])
    wait_gone(chromium.port, {spare["tab"]}, "an unbound pooled tab outlived its server")
    assert taken["tab"] in tabs(chromium.port), "a bound session outlives its server, like any other"

    cfg.extra_args = [a for a in cfg.extra_args if a not in ("--pool", "1")]
    second = BlockingServer(cfg).start()
    try:
        closed = [r for r in pool_records(cfg, "closed") if r.get("session_id") == taken["daemon"]]
        assert closed and "previous server" in closed[0]["reason"], closed
        wait_gone(chromium.port, {taken["tab"]}, "the previous server's pooled tab is still open")
        assert second.ok("kept", ["get", "url"])["url"] == "about:blank"
    finally:
        second.stop()


def pages_in_context(chromium: harness.Chromium, cfg, daemon: str) -> list[dict]:
    """The pages of the daemon's browser context, asked on Chromium's own port."""
    context = json.loads((cfg.state_dir / "contexts.json").read_text())[daemon]["context"]
    (answer,) = harness.cdp_browser_call(chromium.port, [("Target.getTargets", {})])
    return [t for t in answer["result"]["targetInfos"] if t["type"] == "page" and t.get("browserContextId") == context]


def wait_labelled(chromium: harness.Chromium, cfg, daemon: str, session: str, within: float = 10.0) -> list[dict]:
    deadline = time.monotonic() + within
    while True:
        pages = pages_in_context(chromium, cfg, daemon)
        if any(p["title"] == f"{session} · browser-shell session" for p in pages) or time.monotonic() > deadline:
            return pages
        time.sleep(0.1)


def test_a_sessions_window_names_the_session_in_a_tab_beside_its_own(start_server, chromium, web) -> None:
    # A person on VNC sees each session's context as a window; its spare tab says whose it is.
    srv = start_server(extra_args=["--pool", "1"])
    wait_pooled(srv.cfg, 1)
    srv.ok("lbl-pooled", ["open", web.url("/form")])
    daemon = bound(srv.cfg, "lbl-pooled")["detail"]["daemon"]
    pages = wait_labelled(chromium, srv.cfg, daemon, "lbl-pooled")
    titles = sorted(p["title"] for p in pages)
    assert "lbl-pooled · browser-shell session" in titles, titles
    # The session's own tab is untouched, and agent-browser still works in it.
    assert srv.ok("lbl-pooled", ["get", "url"])["url"] == web.url("/form")
    assert srv.ok("lbl-pooled", ["get", "title"])["title"] != "lbl-pooled · browser-shell session"
    # Without a pool, a session starts its own daemon, and is named too.
    plain = start_server()
    plain.ok("lbl-own", ["open", web.url("/form")])
    pages = wait_labelled(chromium, plain.cfg, "lbl-own", "lbl-own")
    assert any(p["title"] == "lbl-own · browser-shell session" for p in pages), pages
