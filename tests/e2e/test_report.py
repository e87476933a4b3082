"""`audit report` as a compliance reviewer uses it, on a real run: allowed calls, a refusal, a
request the browser gate blocked, a page the navigation guard refused. The report verifies first
and says so at the top; the HTML page is self-contained, renders and filters in a real Chromium from
file:// with nothing fetched (and is screenshotted); a tampered copy of the log is refused, or
rendered under its broken verdict when asked to. Its OCSF export is validated against the OCSF
schema (pydantic-ocsf) as a SIEM would ingest it.

The screenshots and the pages they show are written under $BROWSER_SHELL_REPORT_SHOTS (default
/var/tmp/browser-shell-report-shots), outside the repository, and their paths logged."""

from __future__ import annotations

import asyncio
import base64
import importlib
import json
import os
import re
import shutil
import signal
import struct
import subprocess
import threading
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import ocsf
import pytest
import websockets
from pydantic import BaseModel

import harness
from server import Binaries, BlockingServer, describe, log

pytestmark = pytest.mark.chromium

SHOTS = Path(os.environ.get("BROWSER_SHELL_REPORT_SHOTS", "/var/tmp/browser-shell-report-shots"))
WIDTH = 1400


@pytest.fixture(scope="module")
def elsewhere() -> Iterator[harness.WebServer]:
    """A web server on a loopback address outside the allowed 127.0.0.1/32."""
    with harness.run_web_server("127.0.0.3") as three:
        yield three


def report(binaries: Binaries, *args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(binaries.server), "audit", "report", *map(str, args)], capture_output=True, text=True, timeout=60
    )


def records(log_path: Path) -> list[dict]:
    return [json.loads(line) for line in log_path.read_text().splitlines()]


def tabs(chromium: harness.Chromium) -> list[dict]:
    with urllib.request.urlopen(f"http://127.0.0.1:{chromium.port}/json/list", timeout=5) as r:
        return json.load(r)


def a_run(srv: BlockingServer, web: harness.WebServer, three: harness.WebServer, chromium: harness.Chromium) -> str:
    """Allowed calls, a refusal, a gate block and a guard block; returns the typed secret."""
    typed = "pw-" + os.urandom(6).hex()
    srv.ok("rev-a", ["open", web.url("/form")])
    srv.ok("rev-a", ["fill", "#free", typed])
    srv.ok("rev-a", ["get", "title"])
    is_error, reply = srv.call("rev-a", ["eval", "document.cookie"])
    assert is_error and reply["exit_code"] == 126, describe(reply)
    # A link to a refused address: the gate blocks the request (request.blocked).
    srv.ok("rev-b", ["open", web.url("/links?to=" + urllib.parse.quote(three.url("/next"), safe=""))])
    srv.call("rev-b", ["click", "#away"])
    harness.wait_for(
        "a request.blocked record",
        lambda: [r for r in records(srv.cfg.audit_log) if r.get("rule") == "request.blocked"],
        within=15,
    )
    # A page that replaces itself with one the policy refuses: the guard blocks the next command.
    srv.ok("rev-c", ["open", web.url("/later-blob?ms=1500&marker=rev-c")])
    harness.wait_for("a blob: tab", lambda: any(t.get("url", "").startswith("blob:") for t in tabs(chromium)), within=15)
    is_error, reply = srv.call("rev-c", ["get", "title"])
    assert is_error and "navigation.blocked" in reply["stderr"], describe(reply)
    assert three.seen_paths() == [], "the browser reached the refused address"
    return typed


# --------------------------------------------------------------------------- the page in Chromium


# Installed before the page's own code runs (CDP's scripts are exempt from the page's CSP): every
# Content-Security-Policy violation the page causes is kept for the test to read.
WATCH_CSP = (
    "window.__violations = [];"
    "document.addEventListener('securitypolicyviolation',"
    " e => window.__violations.push(e.violatedDirective + ' ' + e.blockedURI));"
)


def cdp(
    chromium: harness.Chromium, page: Path, script: list[str], shot: Path, errors: list[str] | None = None
) -> list[Any]:
    """Open `page` (file://) in a new tab of the session's Chromium (its DevTools port, loopback),
    evaluate each of `script` in order, screenshot the whole page, WIDTH px wide, to `shot`, close
    the tab. Returns the values of `script`; into `errors`, what went wrong in the page: uncaught
    exceptions, console errors, error log entries (CSP violations among them)."""
    request = urllib.request.Request(f"http://127.0.0.1:{chromium.port}/json/new?about:blank", method="PUT")
    with urllib.request.urlopen(request, timeout=10) as r:
        target = json.load(r)

    async def run() -> list[Any]:
        async with websockets.connect(target["webSocketDebuggerUrl"], max_size=None) as ws:
            ids = iter(range(1, 1_000_000))

            async def send(method: str, **params: Any) -> dict:
                i = next(ids)
                await ws.send(json.dumps({"id": i, "method": method, "params": params}))
                while True:
                    message = json.loads(await asyncio.wait_for(ws.recv(), 30))
                    if message.get("id") == i:
                        assert "error" not in message, (method, message)
                        return message["result"]
                    if errors is not None:
                        errors.extend(page_error(message))

            async def value(expression: str) -> Any:
                result = await send("Runtime.evaluate", expression=expression, returnByValue=True)
                assert "exceptionDetails" not in result, (expression, result)
                return result["result"].get("value")

            await send("Emulation.setDeviceMetricsOverride", width=WIDTH, height=900, deviceScaleFactor=1, mobile=False)
            if errors is not None:
                await send("Page.enable")
                await send("Runtime.enable")
                await send("Log.enable")
                await send("Page.addScriptToEvaluateOnNewDocument", source=WATCH_CSP)
            await send("Page.navigate", url=page.as_uri())
            for _ in range(200):
                if await value("document.readyState + ' ' + location.href") == f"complete {page.as_uri()}":
                    break
                await asyncio.sleep(0.05)
            else:
                raise AssertionError(f"{page} did not load")
            values = [await value(expression) for expression in script]
            clip_height = min(await value("document.documentElement.scrollHeight"), 12000)
            png = await send(
                "Page.captureScreenshot",
                format="png",
                captureBeyondViewport=True,
                clip={"x": 0, "y": 0, "width": WIDTH, "height": clip_height, "scale": 1},
            )
            shot.write_bytes(base64.b64decode(png["data"]))
            return values

    try:
        return asyncio.run(run())
    finally:
        with urllib.request.urlopen(f"http://127.0.0.1:{chromium.port}/json/close/{target['id']}", timeout=10):
            pass


def page_error(message: dict) -> list[str]:
    """What a CDP event says went wrong in the page, if anything."""
    method, params = message.get("method"), message.get("params", {})
    if method == "Runtime.exceptionThrown":
        return [f"exception: {json.dumps(params.get('exceptionDetails'))[:500]}"]
    if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
        return [f"console.{params['type']}: {json.dumps(params.get('args'))[:500]}"]
    if method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
        return [f"log: {params['entry'].get('source')}: {params['entry'].get('text', '')[:500]}"]
    return []


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR", f"{path} is not a PNG"
    return struct.unpack(">II", data[16:24])


# --------------------------------------------------------------------------- the test


def test_a_reviewer_gets_a_verified_report_that_renders_filters_and_refuses_a_tampered_log(
    binaries: Binaries,
    start_server,
    scratch,
    web: harness.WebServer,
    elsewhere: harness.WebServer,
    chromium: harness.Chromium,
) -> None:
    srv = start_server()
    typed = a_run(srv, web, elsewhere, chromium)
    srv.stop()  # every record written and its checkpoint flushed
    audit_log = srv.cfg.audit_log
    eval_record = next(r for r in records(audit_log) if r.get("argv", [None])[0] == "eval")

    # ---- intact: every format renders, exit 0, the verdict first
    table = report(binaries, audit_log)
    assert table.returncode == 0, table.stderr
    assert table.stdout.startswith("verification: INTACT"), table.stdout[:300]
    html = report(binaries, audit_log, "--format", "html")
    assert html.returncode == 0, html.stderr
    page = html.stdout
    assert "✔ INTACT" in page and "banner ok" in page
    for label in ("DENIED", "REQUEST BLOCKED", "NAVIGATION BLOCKED"):
        assert re.search(f'<span class="badge alert"[^>]*>{label}</span>', page), label
    assert web.url("/form") in page and "subcommand.denied" in page and "request.blocked" in page
    assert "‹redacted" in page and typed not in page, "the typed text must show only redacted"
    assert page.count("<script") == 1 and "src=" not in page and "href=" not in page
    data = json.loads(report(binaries, audit_log, "--format", "json").stdout)
    assert data["integrity"]["intact"] is True and data["servers"][0]["sha256"], data["integrity"]
    assert {r["kind"] for r in data["timeline"]} >= {"server", "call", "refusal", "gate"}
    outcomes = {r["outcome"] for r in data["timeline"] if r["kind"] == "call"}
    assert {"ok", "navigation_blocked"} <= outcomes, outcomes
    ocsf = [json.loads(line) for line in report(binaries, audit_log, "--format", "ocsf").stdout.splitlines()]
    opened = next(e for e in ocsf if e.get("activity_name") == "open" and e["actor"]["session"]["uid"] == "rev-a")
    assert opened["http_request"]["url"]["url_string"] == web.url("/form"), opened
    assert opened["http_request"]["url"]["hostname"] == "127.0.0.1" and opened["actor"]["app_name"], opened
    assert ocsf[0]["class_uid"] == 6002 and ocsf[0]["activity_id"] == 3, ocsf[0]

    # ---- the page in a real browser, from file://, nothing fetched; filtered; screenshotted
    SHOTS.mkdir(parents=True, exist_ok=True)
    intact_page = SHOTS / "report-intact.html"
    intact_page.write_text(page)
    intact_shot = SHOTS / "report-intact.png"
    rows_js = "document.querySelectorAll('tr.row[data-view=timeline]:not([hidden])')"
    show = "(function(v){var s=document.querySelector('#filters [name=show]');s.value=v;" \
           "s.dispatchEvent(new Event('change',{bubbles:true}));return true})"
    total, fetched, alerts, alert_levels, reset, filters_shown = cdp(
        chromium,
        intact_page,
        [
            f"{rows_js}.length",
            "performance.getEntriesByType('resource').length",
            f"{show}('alert') && {rows_js}.length",
            f"Array.from({rows_js}).map(r => r.dataset.level)",
            f"{show}('all') && {rows_js}.length",
            "!document.getElementById('filters').hidden",
        ],
        intact_shot,
    )
    assert fetched == 0, "the page fetched something"
    assert filters_shown, "the script did not run"
    assert total == len(data["timeline"]) and reset == total, (total, reset)
    assert alerts == sum(1 for r in data["timeline"] if (r.get("flag") or {}).get("level") == "alert") >= 3
    assert set(alert_levels) == {"alert"}, alert_levels
    width, height = png_size(intact_shot)
    assert width == WIDTH and height > 900 and intact_shot.stat().st_size > 50_000, (width, height)
    log(f"report screenshot (intact): {intact_shot} ({width}x{height}); page: {intact_page}")

    # ---- tampered: a forger turns the refusal into an innocent call
    copy = scratch("bs-report-", under="/var/tmp")
    for name in ("audit.jsonl", "audit.jsonl.checkpoint-key.pub", "audit.jsonl.checkpoint"):
        shutil.copy(audit_log.parent / name, copy / name)
    forged = copy / "audit.jsonl"
    lines = forged.read_text().splitlines()
    index = next(i for i, line in enumerate(lines) if json.loads(line)["seq"] == eval_record["seq"])
    record = json.loads(lines[index])
    record["reason"] = "nothing to see here"
    lines[index] = json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    forged.write_text("\n".join(lines) + "\n")
    seq = eval_record["seq"]
    for fmt in ("table", "html", "json", "ocsf"):
        refused = report(binaries, forged, "--format", fmt)
        assert refused.returncode == 1 and refused.stdout == "", (fmt, refused.stdout[:200])
        assert f"NOT INTACT: broken at seq {seq} (hash mismatch" in refused.stderr, refused.stderr
        assert "--render-anyway" in refused.stderr
    anyway = report(binaries, forged, "--format", "html", "--render-anyway")
    assert anyway.returncode == 1, anyway.stderr
    assert f"✖ NOT INTACT: broken at seq {seq}" in anyway.stdout and "banner bad" in anyway.stdout
    assert "This log cannot be trusted" in anyway.stdout and "✔ INTACT" not in anyway.stdout
    assert '<span class="badge unverified">UNVERIFIED</span>' in anyway.stdout
    table = report(binaries, forged, "--render-anyway")
    assert table.returncode == 1 and table.stdout.startswith(f"verification: NOT INTACT: broken at seq {seq}")
    tampered_page = SHOTS / "report-tampered.html"
    tampered_page.write_text(anyway.stdout)
    tampered_shot = SHOTS / "report-tampered.png"
    banner, unverified = cdp(
        chromium,
        tampered_page,
        [
            "document.querySelector('#verification .verdict').textContent",
            "Array.from(document.querySelectorAll('tr.row.unverified[data-view=timeline]'), r => +r.cells[0].textContent)",
        ],
        tampered_shot,
    )
    assert banner.startswith(f"✖ NOT INTACT: broken at seq {seq}"), banner
    assert unverified and min(unverified) == seq, unverified
    width, height = png_size(tampered_shot)
    assert width == WIDTH and height > 900 and tampered_shot.stat().st_size > 50_000, (width, height)
    log(f"report screenshot (tampered): {tampered_shot} ({width}x{height}); page: {tampered_page}")


# --------------------------------------------------------------------------- where each session went

# What the log holds that a page must show as text: markup and a bidi override (U+202E, which would
# make "exe.png" read "gnp.exe"), from the arguments of calls an agent made.
HOSTILE = "<script>window.__pwned=1</script><img src=x onerror=window.__pwned=2>\u202egnp.exe"


def by_the_gate(rule: str) -> bool:
    """A refusal the browser gate made (audit/README.md): not `request.invalid`, the call layer's."""
    return rule == "request.blocked" or rule.startswith("cdp.")


def origin(url: str) -> str:
    """The origin of a logged URL, as audit/README.md defines it for the report."""
    if url.startswith("blob:"):
        return "blob:" + origin(url[5:])
    parts = urllib.parse.urlsplit(url)
    if parts.netloc:
        return f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}"
    if parts.scheme == "about":
        return "about:" + parts.path
    return parts.scheme + ":" if parts.scheme else url.split("/")[0]


def expected_counts(logged: list[dict]) -> dict[str, dict]:
    """Per session (and "*" for all): the counts and destinations the report must show, computed
    here from the records themselves."""
    out: dict[str, dict] = {}
    calls: dict[str, dict] = {}
    for r in logged:
        if r["phase"] == "intent" and r.get("outcome") != "warming":
            calls[r["call_id"]] = r
    def bump(session: str, key: str, origin_of: str | None = None) -> None:
        for who in (session, "*"):
            entry = out.setdefault(who, {"counts": {}, "reached": {}, "refused": {}})
            if origin_of is None:
                entry["counts"][key] = entry["counts"].get(key, 0) + 1
            else:
                entry[key][origin_of] = entry[key].get(origin_of, 0) + 1
    for r in logged:
        session, rule = r.get("session_id", ""), r.get("rule", "")
        if r["phase"] == "intent" and r["call_id"] in calls:
            bump(session, "calls")
            bump(session, "allowed")
        elif r["phase"] == "denied" and by_the_gate(rule):
            bump(session, "gate_refusals")
            bump(session, "refusals")
            named = re.search(r'(?: request to | connection to |" from )(\S+)', r.get("reason", ""))
            if rule == "request.blocked" and named:
                bump(session, "refused", origin(named.group(1)))
        elif r["phase"] == "denied":
            for key in ("calls", "denied", "refusals"):
                bump(session, key)
            argv = r.get("argv") or [None]
            if argv[0] == "open" and rule.startswith(("url.", "host.", "dns.", "address.", "port.")):
                bump(session, "refused", origin(argv[1]))
        elif r["phase"] == "outcome" and r.get("outcome") in ("refused", "navigation_blocked"):
            bump(session, "refused")
            bump(session, "refusals")
            if r.get("outcome") == "navigation_blocked" and "page_url" in r:
                bump(session, "refused", origin(r["page_url"]))
        elif r["phase"] == "outcome" and "page_url" in r:
            bump(session, "reached", origin(r["page_url"]))
        elif r["phase"] == "outcome" and r.get("outcome") == "ok" and calls[r["call_id"]]["argv"][0] == "open":
            bump(session, "reached", origin(calls[r["call_id"]]["argv"][1]))
    return out


# Read from the page, per session section and for the summary: the numbers each tags with
# data-count, and the origins it lists as reached and refused.
READ_SECTIONS = """JSON.stringify(Object.fromEntries(
  Array.from(document.querySelectorAll('details.session')).map(d => [d.dataset.session, d])
    .concat([['*', document.querySelector('.cards').parentElement]]).map(([name, el]) => {
  const scope = name === '*' ? document.querySelector('.cards') : el.querySelector('summary');
  const where = el.querySelector('.where');
  const listed = w => Object.fromEntries(Array.from(where ? where.querySelectorAll(`[data-where=${w}] li`) : [],
    li => [li.dataset.origin, +li.dataset.count]));
  const counts = {};
  scope.querySelectorAll('[data-count]').forEach(e => {
    counts[e.dataset.count] = +(e.querySelector('.n') || e).textContent; });
  return [name, {counts, reached: listed('reached'), refused: listed('refused'),
                 text: (name === '*' ? where || el : el).innerText}];
})))"""


def test_the_html_report_of_a_realistic_run_shows_each_session_and_where_it_went_in_chromium(
    binaries: Binaries,
    start_server,
    web: harness.WebServer,
    elsewhere: harness.WebServer,
    chromium: harness.Chromium,
) -> None:
    """Four sessions: pages reached, a refused subcommand, a request the gate blocked, a page the
    guard blocked, opens refused by address and by scheme, a screenshot, a policy reload (SIGHUP),
    and arguments with markup and a bidi override. The page, opened in Chromium, shows the verdict,
    each session's counts and destinations agreeing with the log's own records, runs with no error
    or CSP violation, and shows the hostile strings as text."""
    srv = start_server()
    a_run(srv, web, elsewhere, chromium)
    srv.ok("rev-a", ["screenshot"])
    hostile_open = web.url("/next?q=" + HOSTILE)
    srv.ok("rev-d", ["open", hostile_open])
    for argv in (["open", elsewhere.url("/refused")], ["open", "javascript:" + HOSTILE], [HOSTILE, "x"]):
        is_error, reply = srv.call("rev-d", argv)
        assert is_error and reply["exit_code"] == 126, describe(reply)
    reload_then_stop(srv)
    logged = records(srv.cfg.audit_log)
    assert any(HOSTILE in json.dumps(r.get("argv"), ensure_ascii=False) for r in logged), "the log holds the markup"
    expected = expected_counts(logged)
    assert {"rev-a", "rev-b", "rev-c", "rev-d"} <= expected.keys(), expected.keys()
    assert expected["*"]["counts"]["gate_refusals"] >= 1 and expected["*"]["counts"]["refused"] >= 1
    assert expected["rev-d"]["refused"] == {f"http://{elsewhere.host}:{elsewhere.port}": 1, "javascript:": 1}

    run = report(binaries, srv.cfg.audit_log, "--format", "html")
    assert run.returncode == 0, run.stderr
    SHOTS.mkdir(parents=True, exist_ok=True)
    page = SHOTS / "report-where.html"
    page.write_text(run.stdout)
    shot = SHOTS / "report-where.png"
    errors: list[str] = []
    banner, sections, violations, pwned, scripts, images, fetched, rows_text, body_text = cdp(
        chromium,
        page,
        [
            "document.querySelector('#verification .verdict').textContent",
            READ_SECTIONS,
            "window.__violations",
            "typeof window.__pwned",
            "document.scripts.length",
            "document.images.length",
            "performance.getEntriesByType('resource').length",
            "Array.from(document.querySelectorAll('tr.row[data-session=rev-d]'), r => r.textContent)",
            "document.body.innerText",
        ],
        shot,
        errors,
    )
    log(f"report screenshot (where it went): {shot}; page: {page}")
    assert banner.startswith("✔ INTACT"), banner
    assert errors == [] and violations == [], (errors, violations)
    assert (pwned, scripts, images, fetched) == ("undefined", 1, 0, 0)

    shown = json.loads(sections)
    assert shown.keys() == expected.keys(), (shown.keys(), expected.keys())
    for name, want in expected.items():
        got = shown[name]
        assert set(got["counts"]) == {"calls", "allowed", "denied", "refused", "gate_refusals", "refusals"}, got
        for key, n in got["counts"].items():
            assert n == want["counts"].get(key, 0), (name, key, got["counts"], want["counts"])
        assert got["reached"] == want["reached"] and got["refused"] == want["refused"], (name, got, want)
        assert "destinations reached" in got["text"] and "destinations refused" in got["text"], got["text"]
    for key in ("denied", "refused", "gate_refusals"):
        assert sum(shown[s]["counts"].get(key, 0) for s in shown if s != "*") == shown["*"]["counts"][key], key
    c = shown["*"]["counts"]
    assert c["refusals"] == c["denied"] + c["refused"] + c["gate_refusals"], c
    assert f"refusals={c['refusals']}" in body_text and f"denied={c['denied']}" in body_text

    # The markup and the bidi override are shown as text, escaped, in the session's rows.
    shown_hostile = HOSTILE.replace("\u202e", "\\u{202e}")
    assert sum(shown_hostile in row for row in rows_text) >= 3, rows_text
    assert "\u202e" not in body_text


# --------------------------------------------------------------------------- OCSF, as a SIEM ingests it

# The OCSF classes browser-shell emits, by class_uid: the pydantic-ocsf model and the schema's name.
OCSF_CLASSES = {6002: ("ApplicationLifecycle", "application_lifecycle"), 6003: ("ApiActivity", "api_activity")}
# What each OCSF profile adds to an event (the schema's profiles/host.json and profiles/trace.json;
# pydantic-ocsf bundles the classes and the dictionary but not the profiles' attribute lists).
PROFILE_ATTRIBUTES = {
    "host": {"device", "actor"},
    "security_control": {"action", "action_id", "disposition", "disposition_id", "firewall_rule", "malware", "policy"},
    "trace": {"trace"},
}
# Attributes of type json_t: free-form by definition.
FREE_FORM = {"unmapped", "data"}


def extras(model: BaseModel, path: str, known: frozenset[str] = frozenset()) -> list[str]:
    """Attributes anywhere in `model` that its OCSF object does not define, besides `known` (pydantic-ocsf
    accepts and keeps them, as OCSF allows, but an event that claims a schema version must not need them)."""
    found = [f"{path}.{k}" for k in (model.model_extra or {}) if k not in known]
    for name, field in type(model).model_fields.items():
        if (field.alias or name) in FREE_FORM:
            continue
        value = getattr(model, name)
        for i, item in enumerate(value if isinstance(value, list) else [value]):
            if isinstance(item, BaseModel):
                found += extras(item, f"{path}.{field.alias or name}" + (f"[{i}]" if isinstance(value, list) else ""))
    return found


def ocsf_problems(event: dict) -> list[str]:
    """Validate one event against the OCSF schema of the version it declares: its class's model
    (types, required attributes, enum captions agreeing with their ids), and no attribute that is
    neither its class's nor one of its declared profiles'."""
    version = event.get("metadata", {}).get("version", "?")
    tag = "v" + version.replace(".", "_")
    if version not in ocsf.available_versions():
        return [f"metadata.version {version!r} is not an OCSF version ({ocsf.available_versions()})"]
    model_name, schema_name = OCSF_CLASSES[event["class_uid"]]
    model = getattr(importlib.import_module(f"ocsf.{tag}.events"), model_name)
    schema = json.loads((Path(ocsf.__file__).parent / "schemas" / f"{tag}.json").read_text())
    try:
        parsed = model.model_validate(event)
    except ValueError as e:  # pydantic's ValidationError
        return [f"{model_name} {version}: {e}"]
    problems = []
    profiles = event["metadata"].get("profiles")
    if not isinstance(profiles, list):
        problems.append("metadata.profiles is missing")
        profiles = []
    applicable = set(schema["events"]["base_event"].get("profiles") or []) | set(
        schema["events"][schema_name].get("profiles") or []
    )
    allowed = {field.alias or name for name, field in model.model_fields.items()}
    for profile in profiles:
        if profile not in applicable:
            problems.append(f"profile {profile!r} does not apply to {schema_name} in {version}")
        allowed |= PROFILE_ATTRIBUTES.get(profile, set())
    dictionary = schema["dictionary"]["attributes"]
    for key in event:
        if key not in dictionary:
            problems.append(f"{key}: no such attribute in OCSF {version}")
        elif key not in allowed:
            problems.append(f"{key}: neither {schema_name}'s nor a declared profile's ({profiles})")
    # The profiles' attributes were checked above; the objects in them are not typed by the class's model.
    problems += [f"{p}: not defined by OCSF {version}" for p in extras(parsed, "event", frozenset(allowed))]
    return problems


@contextmanager
def otlp_sink() -> Iterator[int]:
    """An OTLP/HTTP endpoint on 127.0.0.1 that accepts every export (what it got is not checked here)."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, fmt: str, *args: object) -> None:
            pass

        def do_POST(self) -> None:  # noqa: N802
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", "0")
            self.end_headers()

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()


def reload_then_stop(srv: BlockingServer) -> None:
    """A policy reload (SIGHUP) once the server's start is on record, then its stop: both in the log."""
    harness.wait_for("the started record", lambda: [r for r in records(srv.cfg.audit_log) if r.get("outcome") == "started"], within=15)
    assert srv.pid is not None
    os.kill(srv.pid, signal.SIGHUP)
    harness.wait_for("the reloaded record", lambda: [r for r in records(srv.cfg.audit_log) if r.get("outcome") == "reloaded"], within=15)
    srv.stop()


def ocsf_run(srv: BlockingServer, web: harness.WebServer, three: harness.WebServer, chromium: harness.Chromium) -> None:
    """a_run, then a screenshot, a timeout and a policy reload; the server stopped."""
    a_run(srv, web, three, chromium)
    srv.ok("rev-a", ["screenshot"])
    is_error, reply = srv.call("rev-a", ["wait", "10000"], 1)
    assert is_error and reply["exit_code"] == 124, describe(reply)
    reload_then_stop(srv)


def test_every_ocsf_event_of_a_real_run_validates_against_the_ocsf_schema(
    binaries: Binaries,
    start_server,
    web: harness.WebServer,
    elsewhere: harness.WebServer,
    chromium: harness.Chromium,
) -> None:
    """A SIEM ingests `--format ocsf` by the schema version each event declares: every event of a
    realistic run (calls in three sessions, a refusal, a gate block, a guard block, a screenshot, a
    timeout, a policy reload, the server's start and stop) must validate, name its activities as
    OCSF does, and count each call once."""
    # As deployed, with the OTLP copy on (to a loopback endpoint): calls then carry their trace.
    with otlp_sink() as port:
        srv = start_server(
            env_extra={"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}
        )
        ocsf_run(srv, web, elsewhere, chromium)
    logged = records(srv.cfg.audit_log)

    run = report(binaries, srv.cfg.audit_log, "--format", "ocsf")
    assert run.returncode == 0, run.stderr
    events = [json.loads(line) for line in run.stdout.splitlines()]
    assert len(events) == len(logged), "one event per record"
    problems = {e["metadata"]["sequence"]: ocsf_problems(e) for e in events}
    assert not any(problems.values()), json.dumps({k: v for k, v in problems.items() if v}, indent=1)
    assert {e["class_uid"] for e in events} == {6002, 6003}

    # The server's life in OCSF's words: Start, Stop, and the reload as what it is.
    names = [(e["activity_id"], e["activity_name"]) for e in events if e["class_uid"] == 6002]
    assert names[0] == (3, "Start") and names[-1] == (4, "Stop") and (99, "Reload") in names, names
    # One call, one result: the intent is not a success, so a SIEM counts each call once.
    calls = {r["call_id"] for r in logged if r["phase"] == "intent" and r.get("outcome") != "warming"}
    assert len(calls) >= 8, calls
    for call in calls:
        of_call = [e for e in events if e["metadata"].get("correlation_uid") == call]
        # A page-changing call's evidence record is no result of its own: Unknown, like the intent.
        results = [e["status"] for e in of_call if e["unmapped"].get("phase") != "evidence"]
        assert len(results) == 2 and results[0] == "Unknown" and results[1] in ("Success", "Failure"), (call, results)
        assert all(e["status"] == "Unknown" for e in of_call if e["unmapped"].get("phase") == "evidence"), of_call
    ok_outcomes = sum(1 for r in logged if r["phase"] == "outcome" and r.get("outcome") == "ok")
    successes = sum(1 for e in events if e["class_uid"] == 6003 and e["status"] == "Success")
    assert successes == ok_outcomes, (successes, ok_outcomes)
    # The timeout is a failure worth more than Informational.
    timeout_seq = next(r["seq"] for r in logged if r.get("outcome") == "timeout")
    timed_out = next(e for e in events if e["metadata"]["sequence"] == timeout_seq)
    assert timed_out["status"] == "Failure" and timed_out["severity_id"] >= 2, timed_out
    # Every call that carried a trace declares the profile that defines it.
    traced = [e for e in events if "trace" in e]
    assert traced and all("trace" in e["metadata"]["profiles"] for e in traced)
