"""A daemon that cannot reach the browser is named as what it is: the guard could not read the
page, so the call is refused as `page.unreadable` (fail-closed, as before) and the record quotes
agent-browser's own words, never "the page navigated to an unknown URL". A stand-in agent-browser
answers every batch the way one without a browser does."""

from __future__ import annotations

import json
import stat

import pytest

pytestmark = pytest.mark.chromium

UNREACHABLE = "Failed to connect to the browser: connect ECONNREFUSED 127.0.0.1:9"


def test_a_browser_out_of_reach_is_said_not_called_a_blocked_navigation(start_server, scratch) -> None:
    bin_dir = scratch("bs-unreach-bin-", under="/var/tmp")
    bin_dir.chmod(0o755)
    script = bin_dir / "agent-browser"
    answer = json.dumps([{"success": False, "error": UNREACHABLE}])
    # `--version` answers (the start-up self-test); every batch finds no browser.
    script.write_text(
        '#!/bin/sh\n[ "$1" = --version ] && { echo "agent-browser 0.0.0"; exit 0; }\n'
        f"cat > /dev/null\necho '{answer}'\nexit 1\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    srv = start_server(agent_browser=script, extra_read_exec=["/usr"])
    srv.call("far", ["get", "title"])  # fails: the session's page is then unchecked
    is_error, reply = srv.call("far", ["get", "title"])  # the guard looks first, and cannot
    assert is_error, reply
    assert "page.unreadable" in reply["stderr"], reply
    assert "navigated" not in reply["stderr"], reply
    srv.stop()
    outcomes = [json.loads(line) for line in srv.cfg.audit_log.read_text().splitlines()]
    last = [r for r in outcomes if r.get("phase") == "outcome" and r.get("session_id") == "far"][-1]
    assert last["outcome"] == "page_unreadable", last
    assert last["rule"] == "page.unreadable", last
    assert UNREACHABLE in last["reason"], last
    assert "navigated to" not in last["reason"] and "unknown URL" not in last["reason"], last
