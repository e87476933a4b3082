"""The URL policy through MCP with real Chromium. Only 127.0.0.1/32 is allowed by the test policy;
the "private" targets are other loopback addresses (127.0.0.2, 127.0.0.3) — never a real private or
public address, because the browser connects before any guard can look. (The shipped policy files
and their schema: test_policy_files.py.)"""

from __future__ import annotations

import json
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator

import pytest

import harness
from server import describe

pytestmark = pytest.mark.chromium


@pytest.fixture(scope="module")
def elsewhere() -> Iterator[tuple[harness.WebServer, harness.WebServer]]:
    """Two more web servers on loopback addresses outside the allowed 127.0.0.1/32."""
    with harness.run_web_server("127.0.0.2") as two, harness.run_web_server("127.0.0.3") as three:
        yield two, three


def rules_in_audit(server) -> list[str]:
    return [
        json.loads(line).get("rule", "")
        for line in server.cfg.audit_log.read_text().splitlines()
    ]


def test_an_allowed_local_page_opens(server, web: harness.WebServer) -> None:
    assert server.ok("pol-1", ["open", web.url("/form")])["url"] == web.url("/form")
    record = [json.loads(l) for l in server.cfg.audit_log.read_text().splitlines() if '"intent"' in l][-1]
    assert record["resolved"] == ["127.0.0.1"], record


def test_the_default_policy_refuses_the_devtools_endpoint(start_server, chromium: harness.Chromium) -> None:
    srv = start_server(policy_json=None)  # no file: the built-in default
    is_error, reply = srv.call("pol-2", ["open", f"http://127.0.0.1:{chromium.port}/json/version"])
    assert is_error and reply["exit_code"] == 126, describe(reply)
    # Its port is protected before its address is even weighed.
    assert reply["stderr"].startswith("refused [port.protected]") and "loopback" in reply["stderr"], reply["stderr"]
    for url in ["http://localhost:1/", "http://[::1]/", "http://2130706433/", "http://0x7f.1/"]:
        is_error, reply = srv.call("pol-2", ["open", url])
        assert reply["exit_code"] == 126 and "address.private" in reply["stderr"], (url, reply)
    assert rules_in_audit(srv).count("address.private") == 4 and "port.protected" in rules_in_audit(srv)


def test_an_address_outside_the_allowed_cidr_is_refused_before_the_browser_sees_it(
    server, elsewhere: tuple[harness.WebServer, harness.WebServer]
) -> None:
    two, _ = elsewhere
    is_error, reply = server.call("pol-3", ["open", two.url("/form")])
    assert is_error and "address.private" in reply["stderr"] and "127.0.0.2" in reply["stderr"], describe(reply)
    assert two.seen_paths() == [], "the browser was sent to the refused address"


def blocked_requests(server, sid: str, within: float = 10.0, at_least: int = 1) -> list[dict]:
    """The session's `request.blocked` audit records, once there are `at_least` of them (the gate
    writes them beside the call, so they may land just after its reply)."""
    deadline = time.monotonic() + within
    while True:
        records = [
            json.loads(line) for line in server.cfg.audit_log.read_text().splitlines()
        ]
        mine = [r for r in records if r.get("rule") == "request.blocked" and r.get("session_id") == sid]
        if len(mine) >= at_least or time.monotonic() > deadline:
            return mine
        time.sleep(0.05)


def test_a_redirect_to_a_disallowed_address_is_blocked_before_it_is_requested(
    server, web: harness.WebServer, elsewhere: tuple[harness.WebServer, harness.WebServer]
) -> None:
    two, _ = elsewhere
    start = web.url("/redirect?to=" + urllib.parse.quote(two.url("/next"), safe=""))
    is_error, reply = server.call("pol-4", ["open", start])
    assert is_error and "ERR_BLOCKED_BY_CLIENT" in reply["stderr"], describe(reply)
    assert two.seen_paths() == [], "the browser followed the redirect to the refused address"
    blocked = blocked_requests(server, "pol-4")
    assert blocked and "127.0.0.2" in blocked[0]["reason"] and "Document" in blocked[0]["reason"], blocked
    assert blocked[0]["phase"] == "denied" and "address.private" in blocked[0]["reason"], blocked


def test_a_link_to_a_disallowed_address_never_reaches_it(
    server, web: harness.WebServer, elsewhere: tuple[harness.WebServer, harness.WebServer]
) -> None:
    _, three = elsewhere
    server.ok("pol-5", ["open", web.url("/links?to=" + urllib.parse.quote(three.url("/next"), safe=""))])
    server.call("pol-5", ["click", "#away"])
    assert blocked_requests(server, "pol-5"), "no request.blocked record for the link"
    reply = server.ok("pol-5", ["snapshot"])
    assert "Next page" not in json.dumps(reply)
    assert three.seen_paths() == [], "the browser reached the refused address"


def test_a_page_that_sends_itself_elsewhere_never_gets_there(
    server, web: harness.WebServer, elsewhere: tuple[harness.WebServer, harness.WebServer]
) -> None:
    """A script on an allowed page sends it to a disallowed address between two commands: the
    request fails inside the browser, so no later command can see that page."""
    _, three = elsewhere
    sid = "pol-late"
    later = web.url("/later?ms=500&to=" + urllib.parse.quote(three.url("/next?" + sid), safe=""))
    assert server.ok(sid, ["open", later])["url"] == later
    assert blocked_requests(server, sid), "no request.blocked record for the script's navigation"
    reply = server.ok(sid, ["snapshot", "-i"])
    assert "Next page" not in json.dumps(reply)
    assert three.seen_paths() == [], "the browser reached the refused address"


def test_a_frame_on_a_disallowed_address_is_never_loaded_or_fed(
    server, web: harness.WebServer, elsewhere: tuple[harness.WebServer, harness.WebServer]
) -> None:
    """The top page is allowed; its frame is not. The frame's request fails inside the browser:
    a snapshot carries none of its content or refs, and no input reaches its server."""
    two, _ = elsewhere
    framed = web.url("/framed?src=" + urllib.parse.quote(two.url("/admin.html"), safe=""))
    server.ok("pol-frame", ["open", framed])
    snapshot = json.dumps(server.ok("pol-frame", ["snapshot"]))
    assert "Outer" in snapshot and "TOP-SECRET-ADMIN" not in snapshot, snapshot
    server.call("pol-frame", ["fill", "#q", "exfiltrated"])
    server.call("pol-frame", ["click", "#go"])
    assert two.seen_paths() == [], "the browser sent a request to the frame's refused address"
    blocked = blocked_requests(server, "pol-frame")
    assert blocked and "/admin.html" in blocked[0]["reason"], blocked


def test_a_subresource_on_a_disallowed_address_is_never_requested(
    server, web: harness.WebServer, elsewhere: tuple[harness.WebServer, harness.WebServer]
) -> None:
    two, _ = elsewhere
    pictured = web.url("/pictured?src=" + urllib.parse.quote(two.url("/next?img"), safe=""))
    server.ok("pol-img", ["open", pictured])
    blocked = blocked_requests(server, "pol-img")
    # The image goes out through the session's egress proxy, which refuses it there.
    assert blocked and f"{two.url('/next')} was refused by the egress proxy" in blocked[0]["reason"], blocked
    assert two.seen_paths() == [], "the browser fetched a subresource from the refused address"


def wait_for_a_tab_at(chromium: harness.Chromium, prefix: str, within: float = 15.0) -> None:
    """Until Chromium (its DevTools list on loopback) shows a tab whose committed URL starts with
    `prefix`: the page has really gone there, not just asked for it."""
    deadline = time.monotonic() + within
    while True:
        with urllib.request.urlopen(f"http://127.0.0.1:{chromium.port}/json/list", timeout=5) as r:
            if any(t.get("url", "").startswith(prefix) for t in json.load(r)):
                return
        assert time.monotonic() < deadline, f"no tab went to {prefix}"
        time.sleep(0.05)


# The navigation guard is the second line: no request reaches a refused address, but a page can
# still replace itself with one it made (a blob: URL, which no request fetches). The guard refuses
# such a page, after a command and — when the last one ended unchecked — before the next.


@pytest.mark.parametrize(
    "argv",
    [["snapshot", "-i"], ["get", "title"], ["press", "Shift"]],
    # An action's trailing read is answered by the gate from the tab's events (gate/page_url.rs).
    ids=["snapshot-reports-its-origin", "get-title-trailing-read", "action-trailing-read"],
)
def test_a_page_that_replaced_itself_yields_none_of_its_content(
    server, chromium: harness.Chromium, web: harness.WebServer, argv: list[str]
) -> None:
    """The next command's reply is the refusal, never that page's content — whether its guard is
    the URL the command reports itself (snapshot's `origin`) or a `get url` appended to its batch."""
    sid = "pol-made-" + argv[0]
    # 3 s: long after `open` has read its own URL, even on a loaded machine.
    later = web.url(f"/later-blob?ms=3000&marker={sid}")
    assert server.ok(sid, ["open", later])["url"] == later
    wait_for_a_tab_at(chromium, "blob:")
    is_error, reply = server.call(sid, argv)
    assert is_error and "navigation.blocked" in reply["stderr"] and "blob:" in reply["stderr"], describe(reply)
    assert "Made page" not in reply["stdout"] + reply["stderr"]
    # The command ran (its output is what was withheld): the exit code must not say nothing ran.
    assert reply["exit_code"] == 1 and "the command ran" in reply["stderr"], describe(reply)
    assert server.ok(sid, ["get", "url"]) == {"url": "about:blank"}


def test_after_a_command_left_the_page_unchecked_the_next_one_looks_before_it_acts(
    server, chromium: harness.Chromium, web: harness.WebServer
) -> None:
    """No guard reads the page after a command that times out (or fails). If the page became one the
    policy refuses meanwhile, the session's next command must not act on it: the guard looks
    first, and the click that would submit that page's form never runs. (After `close` no page is
    left to act on: the session's browser context is disposed of, test_egress.)"""
    sid = "pol-timed_out"
    # 3 s: after `open` has read its own URL; the page changes while the `wait` below times out (or
    # after it: the session's last command then still ended unchecked).
    later = web.url(f"/later-blob?ms=3000&marker={sid}")
    server.ok(sid, ["open", later])
    is_error, reply = server.call(sid, ["wait", "10000"], 1)
    assert is_error and reply["exit_code"] == 124, describe(reply)
    wait_for_a_tab_at(chromium, "blob:")
    is_error, reply = server.call(sid, ["click", "#go"])
    assert is_error and "navigation.blocked" in reply["stderr"] and "blob:" in reply["stderr"], describe(reply)
    assert "the command was not run" in reply["stderr"], describe(reply)
    time.sleep(0.5)  # a click that ran would have submitted by now
    assert sid not in web.submitted(), "the click ran on the refused page"
    assert server.ok(sid, ["get", "url"]) == {"url": "about:blank"}


def test_a_screenshot_the_guard_refuses_to_take_deletes_no_older_one(
    start_server, chromium: harness.Chromium, web: harness.WebServer
) -> None:
    """Making room for a screenshot deletes the session's oldest ones: a side effect of a command
    that runs. When the guard looks first and refuses the page, the screenshot is never taken, so
    nothing is deleted for it. (That room is made at all is test_lifecycle's quota test.)"""
    srv = start_server(extra_args=["--child-max-file-bytes", "200000", "--output-quota-session-bytes", "200001"])
    sid = "pol-room"
    srv.ok(sid, ["open", web.url("/later-blob?ms=3000&marker=room")])
    is_error, reply = srv.call(sid, ["wait", "10000"], 1)  # ends unchecked: the next command looks first
    assert is_error and reply["exit_code"] == 124, describe(reply)
    wait_for_a_tab_at(chromium, "blob:")
    old = srv.cfg.output_dir / sid / "old.png"
    old.parent.mkdir(parents=True, exist_ok=True)
    old.write_bytes(b"x" * 1000)  # with a 200 kB screenshot to come, the quota wants it gone
    is_error, reply = srv.call(sid, ["screenshot", "new.png"])
    assert is_error and "navigation.blocked" in reply["stderr"], describe(reply)
    assert "the command was not run" in reply["stderr"], describe(reply)
    assert old.exists(), "room was made (a file deleted) for a screenshot the guard never let run"


def test_the_devtools_and_gate_ports_are_refused_even_when_their_address_is_allowed(
    server, chromium: harness.Chromium, web: harness.WebServer
) -> None:
    """The test policy allows 127.0.0.1/32 on every port; Chromium's DevTools port and the gate's
    are still refused — to `open`, and to a page that frames them."""
    gate = int((server.cfg.state_dir / "gate.port").read_text())
    for port in (chromium.port, gate):
        is_error, reply = server.call("pol-ports", ["open", f"http://127.0.0.1:{port}/json/version"])
        assert is_error and reply["stderr"].startswith("refused [port.protected]"), describe(reply)
    devtools = f"http://127.0.0.1:{chromium.port}/json/version"
    server.ok("pol-ports", ["open", web.url("/framed?src=" + urllib.parse.quote(devtools, safe=""))])
    snapshot = json.dumps(server.ok("pol-ports", ["snapshot"]))
    assert "webSocketDebuggerUrl" not in snapshot, snapshot
    blocked = blocked_requests(server, "pol-ports")
    assert blocked and "port.protected" in blocked[0]["reason"], blocked


def test_a_port_listed_as_the_stacks_own_is_refused(start_server, web: harness.WebServer) -> None:
    srv = start_server(extra_args=["--protect-port", str(web.port)])
    is_error, reply = srv.call("pol-stack", ["open", web.url("/form")])
    assert is_error and reply["stderr"].startswith("refused [port.protected]"), describe(reply)


def test_a_port_scoped_allowance_lets_exactly_that_port_through(start_server, web: harness.WebServer) -> None:
    with harness.run_web_server("127.0.0.1") as other:
        srv = start_server(policy_json={"open": {"allow_private_cidrs": [f"127.0.0.1:{web.port}"]}})
        assert srv.ok("pol-scoped", ["open", web.url("/form")])["url"] == web.url("/form")
        is_error, reply = srv.call("pol-scoped", ["open", other.url("/form")])
        assert is_error and reply["stderr"].startswith("refused [address.private]"), describe(reply)
        assert f"port {other.port}" in reply["stderr"], reply["stderr"]
        assert other.seen_paths() == []


def test_localhost_is_loopback_in_both_families_so_an_ipv4_allowance_does_not_cover_it(
    start_server, web: harness.WebServer
) -> None:
    """`localhost` resolves to 127.0.0.1 and ::1 (the browser may use either): 127.0.0.1/32 alone
    refuses it; adding ::1/128 allows it."""
    v4_only = start_server(policy_json={"open": {"allow_private_cidrs": ["127.0.0.1/32"]}})
    is_error, reply = v4_only.call("pol-lh", ["open", f"http://localhost:{web.port}/form"])
    assert is_error and "address.private" in reply["stderr"] and "::1" in reply["stderr"], describe(reply)
    both = start_server(policy_json={"open": {"allow_private_cidrs": ["127.0.0.1/32", "::1/128"]}})
    url = f"http://localhost:{web.port}/form"
    assert both.ok("pol-lh", ["open", url])["url"] == url


def test_a_link_to_an_allowed_page_passes_the_guard(server, web: harness.WebServer) -> None:
    server.ok("pol-6", ["open", web.url("/links?to=" + urllib.parse.quote(web.url("/next"), safe=""))])
    assert server.ok("pol-6", ["click", "#away"]) == {"clicked": "#away"}
    assert server.ok("pol-6", ["get", "title"]) == {"title": "Next page"}


def test_an_actions_guard_reads_the_page_its_navigation_lands_on_not_the_one_it_left(
    server, web: harness.WebServer
) -> None:
    """A click on a link to a slow page: the guard's read after an input is Chromium's, which waits for
    the navigation the click asked for (gate/page_url.rs), so the click's outcome names the page the
    click sent the tab to, and the guard checked that page, not the one it left. The event that says a
    navigation was asked for can reach the gate after the click's answer: a gate that answered the read
    itself then named the page left now and then (3 in 40 clicks), so ten clicks, each a new session."""
    slow = "/slow?ms=200"
    for attempt in range(10):
        sid = f"pol-slow-link-{attempt}"
        server.ok(sid, ["open", web.url("/links?" + urllib.parse.urlencode({"to": slow}))])
        server.ok(sid, ["click", "#away"])
        records = [json.loads(line) for line in server.cfg.audit_log.read_text().splitlines()]
        clicked = [r for r in records if r.get("session_id") == sid and r.get("phase") == "outcome"][-1]
        assert clicked["page_url"] == web.url(slow), (attempt, clicked)
        server.ok(sid, ["close"])


def test_other_schemes_are_refused_and_audited_with_their_rule(server) -> None:
    for url, rule in [
        ("file:///etc/passwd", "url.scheme"),
        ("javascript:alert(1)", "url.scheme"),
        ("chrome://version", "url.scheme"),
        ("view-source:http://127.0.0.1/", "url.scheme"),
        ("http://[fe80::1%25eth0]/", "url.invalid"),
    ]:
        is_error, reply = server.call("pol-7", ["open", url])
        assert reply["exit_code"] == 126 and f"[{rule}]" in reply["stderr"], (url, reply)
    rules = rules_in_audit(server)
    assert rules.count("url.scheme") >= 4 and "url.invalid" in rules
