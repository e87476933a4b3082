"""The HTML report stays readable at hundreds of calls: one timeline, in log order, each row about
one line tall (digests on demand, not on every row), each session's rows one click away. A 500-call
log from a real server (a stand-in agent-browser, so 500 calls take seconds), checked in Chromium."""

from __future__ import annotations

import json
import re

import pytest

import harness
from server import Binaries
from test_audit import canary_on
from test_report import SHOTS, cdp, log, report

pytestmark = pytest.mark.chromium

CALLS = 500
SESSIONS = [f"long-{i}" for i in range(5)]

# Per row of the timeline, at most: pixels of page height, bytes of HTML.
ROW_PX = 40
ROW_BYTES = 1600


def test_a_report_of_500_calls_is_one_ordered_timeline_about_a_line_per_row(
    binaries: Binaries, start_server, scratch, chromium: harness.Chromium
) -> None:
    srv, _ = canary_on(start_server, scratch, "bslong")
    for i in range(CALLS):
        session = SESSIONS[i % len(SESSIONS)]
        if i % 10 == 9:
            srv.call(session, ["eval", "1"])  # refused: not an allowed subcommand
        elif i % 25 == 24:
            srv.call(session, ["open", "http://127.0.0.2:9/"])  # refused: outside the allowed range
        else:
            srv.call(session, ["get", "title"])
    srv.stop()
    data = json.loads(report(binaries, srv.cfg.audit_log, "--format", "json").stdout)
    timeline = data["timeline"]
    assert len(timeline) >= CALLS, len(timeline)
    digests = [r["reply_stdout_sha256"] for r in timeline if r.get("reply_stdout_sha256")]
    assert digests, "the calls' outcomes carry digests"
    per_session = {s: sum(1 for r in timeline if r["session"] == s) for s in SESSIONS}

    run = report(binaries, srv.cfg.audit_log, "--format", "html")
    assert run.returncode == 0, run.stderr
    html = run.stdout
    assert len(html) <= ROW_BYTES * len(timeline) + 64_000, (len(html), len(timeline))
    SHOTS.mkdir(parents=True, exist_ok=True)
    page = SHOTS / "report-500.html"
    page.write_text(html)
    shot = SHOTS / "report-500.png"
    pick = f"document.querySelector('button[data-pick=\"{SESSIONS[3]}\"]')"
    visible = "Array.from(document.querySelectorAll('tr.row:not([hidden])'))"
    errors: list[str] = []
    rows, seqs, height, text, picked, digest_shown = cdp(
        chromium,
        page,
        [
            "document.querySelectorAll('tr.row').length",
            "Array.from(document.querySelectorAll('tr.row'), r => +r.cells[0].textContent)",
            "document.documentElement.scrollHeight",
            "document.body.innerText",
            f"{pick}.click(), {visible}.map(r => r.dataset.session)",
            "(() => { const d = document.querySelector('tr.row details.digests'); d.open = true;"
            " return d.innerText; })()",
        ],
        shot,
        errors,
    )
    log(f"report of {len(timeline)} rows: {height} px, {len(html)} bytes; screenshot {shot}; page {page}")
    assert errors == [], errors
    assert rows == len(timeline), ("one timeline: every row once", rows, len(timeline))
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs), "in log order"
    assert height <= ROW_PX * rows + 4_000, (height, rows)
    assert digests[0] not in text, "digests are on demand, not on every row"
    assert set(picked) == {SESSIONS[3]} and len(picked) == per_session[SESSIONS[3]], (set(picked), len(picked))
    assert re.search(r"\b[0-9a-f]{64}\b", digest_shown), ("opened, a row shows its digests", digest_shown)
