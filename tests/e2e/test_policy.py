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
    assert reply["stderr"].startswith("refused [address.private]") and "loopback" in reply["stderr"], reply["stderr"]
    for url in ["http://localhost:1/", "http://[::1]/", "http://2130706433/", "http://0x7f.1/"]:
        is_error, reply = srv.call("pol-2", ["open", url])
        assert reply["exit_code"] == 126 and "address.private" in reply["stderr"], (url, reply)
    assert rules_in_audit(srv).count("address.private") == 5


def test_an_address_outside_the_allowed_cidr_is_refused_before_the_browser_sees_it(
    server, elsewhere: tuple[harness.WebServer, harness.WebServer]
) -> None:
    two, _ = elsewhere
    is_error, reply = server.call("pol-3", ["open", two.url("/form")])
    assert is_error and "address.private" in reply["stderr"] and "127.0.0.2" in reply["stderr"], describe(reply)
    assert two.seen_paths() == [], "the browser was sent to the refused address"


def test_a_redirect_to_a_disallowed_address_is_caught_by_the_navigation_guard(
    server, web: harness.WebServer, elsewhere: tuple[harness.WebServer, harness.WebServer]
) -> None:
    two, _ = elsewhere
    start = web.url("/redirect?to=" + urllib.parse.quote(two.url("/next"), safe=""))
    is_error, reply = server.call("pol-4", ["open", start])
    assert is_error and reply["exit_code"] == 126, describe(reply)
    assert reply["stderr"].startswith("refused [navigation.blocked]: the page navigated to http://127.0.0.2"), reply["stderr"]
    assert "about:blank" in reply["stderr"]
    assert server.ok("pol-4", ["get", "url"]) == {"url": "about:blank"}
    assert "navigation.blocked" in rules_in_audit(server)


def test_a_link_to_a_disallowed_address_never_yields_its_content(
    server, web: harness.WebServer, elsewhere: tuple[harness.WebServer, harness.WebServer]
) -> None:
    """The click's own guard catches the navigation — or, when a cross-origin navigation commits only
    after the click returned, the very next command's guard does, and its reply (a snapshot here)
    is replaced by the refusal. Either way no content of the disallowed page reaches the agent."""
    _, three = elsewhere
    server.ok("pol-5", ["open", web.url("/links?to=" + urllib.parse.quote(three.url("/next"), safe=""))])
    is_error, reply = server.call("pol-5", ["click", "#away"])
    if not is_error:
        time.sleep(0.5)  # let a late navigation commit
        is_error, reply = server.call("pol-5", ["snapshot"])
    assert is_error and "navigation.blocked" in reply["stderr"] and "127.0.0.3" in reply["stderr"], describe(reply)
    assert "Next page" not in reply["stdout"] + reply["stderr"]
    assert server.ok("pol-5", ["get", "url"]) == {"url": "about:blank"}


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


@pytest.mark.parametrize(
    "argv", [["snapshot", "-i"], ["get", "title"]], ids=["snapshot-reports-its-origin", "get-title-trailing-read"]
)
def test_a_page_that_sent_itself_elsewhere_yields_none_of_its_content(
    server, chromium: harness.Chromium, web: harness.WebServer,
    elsewhere: tuple[harness.WebServer, harness.WebServer], argv: list[str]
) -> None:
    """A script on an allowed page sends it to a disallowed address between two commands. The next
    command's reply is the refusal, never that page's content — whether its guard is the URL the
    command reports itself (snapshot's `origin`) or a `get url` appended to its batch (get title)."""
    _, three = elsewhere
    sid = "pol-late-" + argv[0]
    # 3 s: long after `open` has read its own URL, even on a loaded machine.
    later = web.url("/later?ms=3000&to=" + urllib.parse.quote(three.url("/next?" + sid), safe=""))
    assert server.ok(sid, ["open", later])["url"] == later
    wait_for_a_tab_at(chromium, three.url("/next?" + sid))
    is_error, reply = server.call(sid, argv)
    assert is_error and "navigation.blocked" in reply["stderr"] and "127.0.0.3" in reply["stderr"], describe(reply)
    assert "Next page" not in reply["stdout"] + reply["stderr"]
    assert server.ok(sid, ["get", "url"]) == {"url": "about:blank"}


@pytest.mark.parametrize("ended", ["timed_out", "closed"])
def test_after_a_command_left_the_page_unchecked_the_next_one_looks_before_it_acts(
    server, chromium: harness.Chromium, web: harness.WebServer,
    elsewhere: tuple[harness.WebServer, harness.WebServer], ended: str
) -> None:
    """No guard reads the page after a command that times out (or fails), nor after `close`, which
    ends the session's daemon but leaves its pinned tab in Chromium. If the page went to a
    disallowed address meanwhile, the session's next command must not act on it: the guard looks
    first, and the click that would submit that page's form never runs."""
    _, three = elsewhere
    sid = f"pol-{ended}"
    # 3 s: after `open` has read its own URL; the page moves while the `wait` below times out (or
    # after it: the session's last command then still ended unchecked), or after the `close`.
    later = web.url("/later?ms=3000&to=" + urllib.parse.quote(three.url(f"/form?{ended}"), safe=""))
    server.ok(sid, ["open", later])
    if ended == "timed_out":
        is_error, reply = server.call(sid, ["wait", "10000"], 1)
        assert is_error and reply["exit_code"] == 124, describe(reply)
    else:
        server.ok(sid, ["close"])
    wait_for_a_tab_at(chromium, three.url(f"/form?{ended}"))
    submissions = len(three.submitted())
    is_error, reply = server.call(sid, ["click", "#go"])
    assert is_error and "navigation.blocked" in reply["stderr"] and "127.0.0.3" in reply["stderr"], describe(reply)
    assert "the command was not run" in reply["stderr"], describe(reply)
    time.sleep(0.5)  # a click that ran would have submitted by now
    assert len(three.submitted()) == submissions, "the click ran on the disallowed page"
    assert server.ok(sid, ["get", "url"]) == {"url": "about:blank"}


def test_a_screenshot_the_guard_refuses_to_take_deletes_no_older_one(
    start_server, chromium: harness.Chromium, web: harness.WebServer,
    elsewhere: tuple[harness.WebServer, harness.WebServer]
) -> None:
    """Making room for a screenshot deletes the session's oldest ones: a side effect of a command
    that runs. When the guard looks first and refuses the page, the screenshot is never taken, so
    nothing is deleted for it. (That room is made at all is test_lifecycle's quota test.)"""
    _, three = elsewhere
    srv = start_server(extra_args=["--child-max-file-bytes", "200000", "--output-quota-session-bytes", "200001"])
    sid = "pol-room"
    later = web.url("/later?ms=3000&to=" + urllib.parse.quote(three.url("/next?room"), safe=""))
    srv.ok(sid, ["open", later])
    is_error, reply = srv.call(sid, ["wait", "10000"], 1)  # ends unchecked: the next command looks first
    assert is_error and reply["exit_code"] == 124, describe(reply)
    wait_for_a_tab_at(chromium, three.url("/next?room"))
    old = srv.cfg.output_dir / sid / "old.png"
    old.parent.mkdir(parents=True, exist_ok=True)
    old.write_bytes(b"x" * 1000)  # with a 200 kB screenshot to come, the quota wants it gone
    is_error, reply = srv.call(sid, ["screenshot", "new.png"])
    assert is_error and "navigation.blocked" in reply["stderr"], describe(reply)
    assert "the command was not run" in reply["stderr"], describe(reply)
    assert old.exists(), "room was made (a file deleted) for a screenshot the guard never let run"


def test_a_link_to_an_allowed_page_passes_the_guard(server, web: harness.WebServer) -> None:
    server.ok("pol-6", ["open", web.url("/links?to=" + urllib.parse.quote(web.url("/next"), safe=""))])
    assert server.ok("pol-6", ["click", "#away"]) == {"clicked": "#away"}
    assert server.ok("pol-6", ["get", "title"]) == {"title": "Next page"}


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
