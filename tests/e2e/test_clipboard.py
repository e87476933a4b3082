"""The clipboard is Chromium's, shared by every session and by the person watching over VNC: no session
may copy, cut or paste through it. Without the gate's check, text one session typed (a secret's value
included) was pasted by another session into a page of its choosing. Real Chromium and agent-browser."""

from __future__ import annotations

import json

import pytest

import harness

pytestmark = pytest.mark.chromium


def test_no_session_can_copy_or_paste_through_the_shared_clipboard(start_server, web: harness.WebServer) -> None:
    srv = start_server()
    srv.ok("copier", ["open", web.url("/form")])
    srv.ok("copier", ["fill", "input", "typed-in-one-session"])
    srv.ok("copier", ["press", "Control+a"])  # selecting is not the clipboard
    for shortcut in ("Control+c", "Control+x", "Shift+Delete"):
        _, reply = srv.call("copier", ["press", shortcut])
        assert reply["exit_code"] != 0, (shortcut, reply)
    srv.ok("paster", ["open", web.url("/form")])
    srv.ok("paster", ["fill", "input", ""])
    for shortcut in ("Control+v", "Shift+Insert", "Control+Shift+v"):
        _, reply = srv.call("paster", ["press", shortcut])
        assert reply["exit_code"] != 0, (shortcut, reply)
    value = srv.ok("paster", ["get", "value", "input"])["value"]
    assert "typed-in-one-session" not in value, value
    # Ordinary typing still works after the refusals.
    srv.ok("paster", ["press", "x"])
    assert "x" in srv.ok("paster", ["get", "value", "input"])["value"]
    records = [json.loads(line) for line in srv.cfg.audit_log.read_text().splitlines()]
    refused = [
        r for r in records if r.get("rule") == "cdp.refused" and "clipboard is shared" in (r.get("reason") or "")
    ]
    assert {r["session_id"] for r in refused} == {"copier", "paster"}, refused
