"""Approvals: a call the policy's `approvals` rules match runs only after a person's yes to exactly
what was shown, given on the machine (`browser-shell approvals`), never by the agent or the page.
Real Chromium, real agent-browser, the demo site's /checkout ("Pay 12 €") on 127.0.0.1."""

from __future__ import annotations

import json
import re
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import harness
import pytest
from test_report import SHOTS, cdp

pytestmark = pytest.mark.chromium

WORDS = ["pay", "buy", "delete", "send", "transfer"]


def policy(wait_sec: int) -> dict[str, Any]:
    return {
        "open": {"allow_private_cidrs": ["127.0.0.1/32"]},
        "approvals": {"wait_sec": wait_sec, "rules": [
            {"name": "payments", "subcommands": ["click", "dblclick"], "element_roles": ["button"], "element_words": WORDS},
        ]},
    }


def records(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


def approvals(log: Path) -> list[dict[str, Any]]:
    return [r for r in records(log) if r.get("phase") == "approval"]


def cli(server_bin: Path, log: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(server_bin), "approvals", *args, "--audit-log", str(log)],
                          capture_output=True, text=True, timeout=30)


def waiting(server_bin: Path, log: Path, skip: set[str] | None = None) -> str:
    """The id of a request waiting on the desk (other than `skip`), once one is."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        listed = cli(server_bin, log, "list")
        assert listed.returncode == 0, listed.stderr
        ids = [line.split()[0] for line in listed.stdout.splitlines() if not line.startswith("no request")]
        ids = [i for i in ids if i not in (skip or set())]
        if ids:
            return ids[0]
        time.sleep(0.05)
    raise AssertionError("no approval request was put on the desk")


class Pending:
    """A tool call made on a thread: it waits for its approval while the test answers."""

    def __init__(self, srv: Any, sid: str, argv: list[str]) -> None:
        self.result: tuple[bool, dict[str, Any]] | None = None
        self.thread = threading.Thread(target=lambda: setattr(self, "result", srv.call(sid, argv)))
        self.thread.start()

    def reply(self) -> dict[str, Any]:
        self.thread.join(60)
        assert self.result is not None, "the call never came back"
        return self.result[1]


def checkout(srv: Any, web: harness.WebServer, sid: str, query: str = "") -> dict[str, str]:
    """Open /checkout and return its refs by accessible name."""
    srv.ok(sid, ["open", web.url("/checkout" + query)])
    snap = srv.ok(sid, ["snapshot", "-i"])["snapshot"]
    return {name: ref for name, ref in re.findall(r'"([^"]+)" \[ref=(e\d+)\]', snap)}


def paid(web: harness.WebServer, since: int) -> bool:
    """Whether /paid was asked for after the first `since` requests (the site serves every test)."""
    return any(r.startswith("/paid") for r in web.seen_paths()[since:])


def test_a_pay_button_runs_only_after_a_yes_and_a_text_box_needs_none(start_server, web, binaries) -> None:
    srv = start_server(policy_json=policy(60))
    log, sid, since = srv.cfg.audit_log, "ap-1", len(web.seen_paths())
    refs = checkout(srv, web, sid)
    srv.ok(sid, ["click", "@" + refs["Note"]])
    assert approvals(log) == [], "a click on a text box asked for a yes"

    call = Pending(srv, sid, ["click", "@" + refs["Pay 12 €"]])
    asked = waiting(binaries.server, log)
    shown = cli(binaries.server, log, "show", asked)
    assert shown.returncode == 0 and "Pay 12 €" in shown.stdout and web.url("/checkout") in shown.stdout, shown
    assert not paid(web, since), "the click ran before anyone said yes"
    answered = cli(binaries.server, log, "approve", asked)
    assert answered.returncode == 0, answered.stderr
    reply = call.reply()
    assert reply["exit_code"] == 0, reply

    requested, granted = approvals(log)
    assert requested["outcome"] == "requested" and granted["outcome"] == "granted", (requested, granted)
    element = requested["approval"]["shown"]["element"]
    assert {k: element[k] for k in ("ref", "role", "name")} == {"ref": refs["Pay 12 €"], "role": "button", "name": "Pay 12 €"}
    (place,) = element["places"]
    assert place[2] > 0 and place[3] > 0, element  # where it is on the page: a yes is bound to it too
    assert requested["approval"]["shown"]["page"]["title"] == "Checkout"
    assert granted["approval"]["by"]["uid"] == 0 and granted["approval"]["by"]["channel"] == "operator"
    intent = next(r for r in records(log) if r.get("phase") == "intent" and r["call_id"] == granted["call_id"])
    assert intent["approval"]["id"] == asked == requested["approval"]["id"], intent
    assert intent["approval"]["shown_sha256"] == requested["approval"]["shown_sha256"]
    assert records(log).index(granted) < records(log).index(intent), "the yes is chained after the intent"
    srv.ok(sid, ["wait", "--url", "**/paid**"], 20)
    assert paid(web, since)
    verified = subprocess.run([str(binaries.server), "audit", "verify", str(log)], capture_output=True, text=True)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    # OCSF carries the approval with the call; a SIEM still counts the call once (its outcome).
    ocsf = subprocess.run([str(binaries.server), "audit", "report", str(log), "--format", "ocsf"],
                          capture_output=True, text=True)
    assert ocsf.returncode == 0, ocsf.stderr
    events = [json.loads(line) for line in ocsf.stdout.splitlines() if line.strip()]
    of_call = [e for e in events if e["metadata"].get("correlation_uid") == granted["call_id"]]
    kinds = {(e["unmapped"].get("phase"), e["status"]) for e in of_call}
    assert ("approval", "Unknown") in kinds and ("outcome", "Success") in kinds, kinds
    assert any(e["unmapped"].get("approval", {}).get("id") == asked for e in of_call), of_call
    # The HTML report's approvals view: what was asked and shown, who answered how.
    html = subprocess.run([str(binaries.server), "audit", "report", str(log), "--format", "html"],
                          capture_output=True, text=True)
    assert html.returncode == 0, html.stderr
    view = html.stdout.split('<h2 id="approvals">', 1)[1].split("</table>", 1)[0]
    for shown in (asked, "payments", "granted", "uid 0", "Checkout", "button “Pay 12 €”",
                  requested["approval"]["shown_sha256"], "operator"):
        assert shown in view, (shown, view)


def test_a_no_or_no_answer_refuses_the_call_and_nothing_runs(start_server, web, binaries) -> None:
    srv = start_server(policy_json=policy(3))
    log, sid, since = srv.cfg.audit_log, "ap-2", len(web.seen_paths())
    refs = checkout(srv, web, sid)
    pay = "@" + refs["Pay 12 €"]

    call = Pending(srv, sid, ["click", pay])
    denied = cli(binaries.server, log, "deny", waiting(binaries.server, log), "--reason", "not today")
    assert denied.returncode == 0, denied.stderr
    reply = call.reply()
    assert reply["exit_code"] == 126 and "approval.denied" in reply["stderr"] and "not today" in reply["stderr"], reply

    started = time.monotonic()
    is_error, reply = srv.call(sid, ["click", pay])
    assert reply["exit_code"] == 126 and "approval.expired" in reply["stderr"], reply
    assert time.monotonic() - started >= 3, "it did not wait for an answer"
    assert [a["outcome"] for a in approvals(log)] == ["requested", "denied", "requested", "expired"]
    refusals = [r for r in records(log) if r.get("phase") == "denied"]
    assert [r["rule"] for r in refusals] == ["approval.denied", "approval.expired"], refusals
    time.sleep(0.5)
    assert not paid(web, since), "a refused payment reached the site"


def test_neither_the_page_nor_the_agent_can_give_the_yes(start_server, web, binaries) -> None:
    srv = start_server(policy_json=policy(4))
    log, sid, since = srv.cfg.audit_log, "ap-3", len(web.seen_paths())
    refs = checkout(srv, web, sid, "?hostile=1")
    # The page's own "Approve" button is just a button: clicking it grants nothing.
    srv.ok(sid, ["click", "@" + refs["Approve"]])
    assert approvals(log) == []

    call = Pending(srv, sid, ["click", "@" + refs["Pay 12 €"]])
    asked = waiting(binaries.server, log)
    # The agent, meanwhile, tries every way of answering its own request through the tool.
    for argv in (["approvals", "approve", asked], ["approve", asked], ["eval", f"approve('{asked}')"]):
        _, attempt = srv.call("ap-3b", argv)
        assert attempt["exit_code"] == 126, attempt
    reply = call.reply()
    assert reply["exit_code"] == 126 and "approval.expired" in reply["stderr"], reply
    assert [a["outcome"] for a in approvals(log)] == ["requested", "expired"]
    assert not paid(web, since)


@pytest.mark.parametrize("change", ["moves", "shifts"])
def test_a_page_that_changes_under_a_pending_approval_is_asked_about_again(
    start_server, web, binaries, change: str
) -> None:
    """`moves`: the page's URL changes; `shifts`: a banner pushes the same button down."""
    srv = start_server(policy_json=policy(60))
    log, sid, since = srv.cfg.audit_log, f"ap-4-{change}", len(web.seen_paths())
    refs = checkout(srv, web, sid, f"?{change}=2500")
    call = Pending(srv, sid, ["click", "@" + refs["Pay 12 €"]])
    first = waiting(binaries.server, log)
    before = json.loads(cli(binaries.server, log, "show", first).stdout)["shown"]
    # The page changes 2.5 s after it loaded and then asks for /changed; the yes comes after that
    # (a fixed sleep lost that race on a loaded machine, where the open itself took seconds).
    harness.wait_for("the page to change", lambda: "/changed" in web.seen_paths()[since:], within=20, interval=0.05)
    assert cli(binaries.server, log, "approve", first).returncode == 0
    second = waiting(binaries.server, log, skip={first})
    after = json.loads(cli(binaries.server, log, "show", second).stdout)["shown"]
    if change == "moves":
        assert "moves=2500" in before["page"]["url"] and "moved=1" in after["page"]["url"], (before, after)
    else:
        assert before["page"] == after["page"], (before, after)
        (was,), (now,) = before["element"]["places"], after["element"]["places"]
        assert now[1] >= was[1] + 150 and now[2:] == was[2:], (was, now)
    assert cli(binaries.server, log, "approve", second).returncode == 0
    assert call.reply()["exit_code"] == 0
    outcomes = [(a["outcome"], a["approval"]["id"]) for a in approvals(log)]
    assert outcomes == [("requested", first), ("denied", first), ("requested", second), ("granted", second)], outcomes
    assert "changed" in approvals(log)[1]["approval"]["why"]

class Person:
    """The person at the MCP client: answers each elicitation as told, and keeps what it was shown."""

    def __init__(self, answer: str, late_s: float = 0.0) -> None:
        self.answer, self.late_s, self.shown = answer, late_s, []

    async def __call__(self, context: Any, params: Any) -> Any:
        from mcp import types

        self.shown.append(params)
        if self.late_s:
            await anyio_sleep(self.late_s)
        if self.answer == "approve":
            return types.ElicitResult(action="accept", content={"approve": True})
        if self.answer == "untick":
            return types.ElicitResult(action="accept", content={"approve": False})
        return types.ElicitResult(action="decline")


async def anyio_sleep(seconds: float) -> None:
    import anyio

    await anyio.sleep(seconds)


@pytest.mark.parametrize("answer", ["approve", "decline", "untick", "late"])
def test_the_person_at_the_client_answers_through_elicitation(start_server, web, answer: str) -> None:
    person = Person("approve" if answer == "late" else answer, late_s=5.0 if answer == "late" else 0.0)
    srv = start_server(policy_json=policy(3), elicitation_callback=person)
    log, sid, since = srv.cfg.audit_log, f"ap-el-{answer}", len(web.seen_paths())
    refs = checkout(srv, web, sid)
    _, reply = srv.call(sid, ["click", "@" + refs["Pay 12 €"]])
    (asked,) = person.shown
    assert "Pay 12 €" in asked.message and "Checkout" in asked.message and sid in asked.message, asked.message
    assert asked.requested_schema["required"] == ["approve"], asked.requested_schema
    trail = approvals(log)
    assert trail[0]["approval"]["channel"] == "elicitation", trail[0]
    if answer == "approve":
        assert reply["exit_code"] == 0, reply
        assert trail[1]["outcome"] == "granted" and trail[1]["approval"]["by"]["channel"] == "elicitation", trail
        assert trail[1]["approval"]["by"]["client"].startswith("mcp/"), trail[1]
        srv.ok(sid, ["wait", "--url", "**/paid**"], 20)
    elif answer == "late":
        assert reply["exit_code"] == 126 and "approval.expired" in reply["stderr"], reply
        assert trail[1]["outcome"] == "expired", trail
    else:
        assert reply["exit_code"] == 126 and "approval.denied" in reply["stderr"], reply
        assert trail[1]["outcome"] == "denied", trail
    assert paid(web, since) == (answer == "approve")


def test_a_policy_can_keep_approvals_off_the_client(start_server, web, binaries) -> None:
    """An operator whose client might hand prompts to the model names only the operator's channel."""
    person = Person("approve")
    strict = policy(30)
    strict["approvals"]["channels"] = ["operator"]
    srv = start_server(policy_json=strict, elicitation_callback=person)
    log, sid = srv.cfg.audit_log, "ap-op"
    refs = checkout(srv, web, sid)
    call = Pending(srv, sid, ["click", "@" + refs["Pay 12 €"]])
    assert cli(binaries.server, log, "deny", waiting(binaries.server, log)).returncode == 0
    assert call.reply()["exit_code"] == 126
    assert person.shown == [], "the client was asked though the policy leaves it out"
    assert approvals(log)[0]["approval"]["channel"] == "operator"


def test_with_no_channel_that_can_reach_a_person_the_call_is_refused_and_says_why(start_server, web) -> None:
    """The policy names only the display, and no `--approvals-display` was given: nobody can be asked,
    so the request is recorded declined, the call refused, and nothing is paid."""
    display_only = policy(30)
    display_only["approvals"]["channels"] = ["display"]
    srv = start_server(policy_json=display_only)
    log, sid, since = srv.cfg.audit_log, "ap-none", len(web.seen_paths())
    refs = checkout(srv, web, sid)
    is_error, reply = srv.call(sid, ["click", "@" + refs["Pay 12 €"]])
    assert is_error and reply["exit_code"] == 126, reply
    assert "approval.denied" in reply["stderr"] and "no channel can ask a person" in reply["stderr"], reply
    assert not paid(web, since)
    trail = approvals(log)
    assert [(a["outcome"], a["approval"].get("channel")) for a in trail] == [("requested", "none"), ("denied", None)], trail


def test_the_person_is_shown_an_image_of_the_page_that_verify_holds_to_its_digest(
    start_server, web, binaries, chromium: harness.Chromium
) -> None:
    person = Person("approve")
    srv = start_server(policy_json=policy(30), elicitation_callback=person, extra_args=["--evidence", "images"])
    log, sid = srv.cfg.audit_log, "ap-img"
    refs = checkout(srv, web, sid)
    srv.ok(sid, ["click", "@" + refs["Pay 12 €"]])
    requested = approvals(log)[0]
    image = requested["approval"]["shown"]["image"]
    stored = Path(f"{log}.evidence") / f"{image['sha256']}.png"
    assert stored.is_file() and image["width"] > 0, image
    files = sorted(str(p) for p in log.parent.glob(log.name + "*"))
    verified = subprocess.run([str(binaries.server), "audit", "verify", *files], capture_output=True, text=True)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    html = subprocess.run([str(binaries.server), "audit", "report", *files, "--format", "html"],
                          capture_output=True, text=True).stdout
    view = html.split('<h2 id="approvals">', 1)[1].split("</table>", 1)[0]
    assert f'data-sha256="{image["sha256"]}" src="data:image/png;base64,' in view, view[:2000]
    # In a real browser: the approvals view's image loads (the report's CSP allows only its own images).
    SHOTS.mkdir(parents=True, exist_ok=True)
    page, errors = SHOTS / "report-approvals.html", []
    page.write_text(html)
    (loaded, answer) = cdp(chromium, page, [
        "Array.from(document.querySelectorAll('table.approvals img'), i => i.complete && i.naturalWidth > 0)",
        "document.querySelector('table.approvals td.ok').textContent",
    ], SHOTS / "report-approvals.png", errors)
    assert errors == [] and loaded == [True] and answer.startswith("granted"), (errors, loaded, answer)
    # The image a person was shown is evidence like any other: gone, the log is NOT INTACT.
    kept = stored.read_bytes()
    stored.unlink()
    try:
        broken = subprocess.run([str(binaries.server), "audit", "verify", *files], capture_output=True, text=True)
        assert broken.returncode == 1 and image["sha256"] in broken.stdout + broken.stderr, broken.stdout
    finally:
        stored.write_bytes(kept)
