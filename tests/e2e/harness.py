"""Plain (non-pytest) building blocks for the browser-shell end-to-end suite.

Everything here talks to loopback only: Chromium's DevTools endpoint is bound to
127.0.0.1 and the test web server listens on 127.0.0.1.
"""

from __future__ import annotations

import functools
import hashlib
import html
import importlib.machinery
import importlib.util
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_SERVER_BIN = REPO_ROOT / "target" / "debug" / "browser-shell"
DEFAULT_AGENT_BROWSER = (
    REPO_ROOT
    / "deploy"
    / "agent-browser"
    / "node_modules"
    / "agent-browser"
    / "bin"
    / "agent-browser-linux-musl-x64"
)
CHROMIUM_CANDIDATES = ("chromium", "chromium-browser", "google-chrome")


def tail(path: Path | str, max_bytes: int = 6000) -> str:
    """Last `max_bytes` of a log file, decoded leniently (for failure messages)."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - max_bytes))
            data = fh.read()
    except OSError as exc:
        return f"<could not read {path}: {exc}>"
    text = data.decode("utf-8", errors="replace")
    if size > max_bytes:
        text = f"...[{size - max_bytes} bytes cut]...\n" + text
    return text


def poll(probe, within: float, interval: float = 0.1):
    """probe() until it returns something truthy or `within` seconds pass; its last value, for a test
    that says itself what failed. A bound on waiting, never a timing check."""
    deadline = time.monotonic() + within
    while not (found := probe()) and time.monotonic() < deadline:
        time.sleep(interval)
    return found


def wait_for(what: str, probe, within: float, interval: float = 0.1):
    """probe()'s first truthy value within `within` seconds; otherwise the test fails, saying what it
    waited for (`what`: "a pooled daemon", "the daemon to exit")."""
    found = poll(probe, within, interval)
    assert found, f"waited {within} s for {what}"
    return found


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def kill_process_group(proc: subprocess.Popen, grace: float = 5.0) -> None:
    """SIGTERM the process group led by `proc` (started with start_new_session), then SIGKILL."""
    pgid = proc.pid  # leader of its own session/group
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, grace)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            continue
        # Leader gone; make sure stragglers in the group get the signal too.
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        break


# --------------------------------------------------------------------------- binaries


def resolve_server_bin() -> Path:
    return Path(os.environ.get("BROWSER_SHELL_BIN") or DEFAULT_SERVER_BIN)


def resolve_agent_browser() -> Path:
    return Path(os.environ.get("BROWSER_SHELL_AGENT_BROWSER") or DEFAULT_AGENT_BROWSER)


def resolve_chromium() -> str | None:
    explicit = os.environ.get("BROWSER_SHELL_CHROMIUM")
    if explicit:
        return explicit
    for name in CHROMIUM_CANDIDATES:
        found = shutil.which(name)
        if found:
            return found
    return None


# --------------------------------------------------------------------------- Chromium


@dataclass
class Chromium:
    port: int
    pid: int
    log_path: Path
    user_data_dir: Path

    @property
    def version_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/json/version"


@functools.cache
def chromium_flags() -> tuple[str, ...]:
    """The flags browser-shell's scripts start Chromium with (deploy/local/stack-lib.sh), so the tests and
    the bench run the browser users get: no background services, no QUIC or WebRTC UDP around the egress,
    no autofill queries, no WebUI omnibox popups, DevTools on loopback."""
    listed = subprocess.run(
        ["bash", "-c", '. "$1" && printf "%s\\0" "${chromium_flags[@]}"', "bash",
         str(REPO_ROOT / "deploy" / "local" / "stack-lib.sh")],
        capture_output=True, text=True, check=True, timeout=30,
    )
    return tuple(flag for flag in listed.stdout.split("\0") if flag)


@contextmanager
def run_chromium(workdir: Path, start_timeout: float = 20.0, plain: bool = False) -> Iterator[Chromium]:
    """Chromium on a free loopback DevTools port with the project's flags, or with `plain` only the flags
    any headless Chromium needs (as a Chromium someone else started has): then it reaches for Google's
    services by itself, so run it only inside a loopback-only network namespace."""
    exe = resolve_chromium()
    if exe is None:
        raise RuntimeError(
            "no Chromium found (looked for $BROWSER_SHELL_CHROMIUM, "
            + ", ".join(CHROMIUM_CANDIDATES)
            + "); install Debian's `chromium` package"
        )
    port = free_port()
    user_data_dir = Path(tempfile.mkdtemp(prefix="bs-chrome-"))
    log_path = workdir / "chromium.log"
    argv = [
        exe,
        "--headless",
        "--disable-gpu",
        f"--remote-debugging-port={port}",
        # Root needs --no-sandbox with any flags (the AIO image's Chromium runs so too).
        *(("--no-sandbox",) if plain else chromium_flags()),
        f"--user-data-dir={user_data_dir}",
        "about:blank",
    ]
    log = open(log_path, "wb")
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + start_timeout
        last_err: Exception | None = None
        while True:
            if proc.poll() is not None:
                raise RuntimeError(
                    f"Chromium exited with {proc.returncode} before its DevTools endpoint answered.\n"
                    f"--- {log_path} (tail) ---\n{tail(log_path)}"
                )
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/version", timeout=2) as resp:
                    info = json.loads(resp.read())
                if "webSocketDebuggerUrl" in info:
                    break
            except (OSError, ValueError) as exc:
                last_err = exc
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"Chromium DevTools endpoint http://127.0.0.1:{port}/json/version did not answer "
                    f"within {start_timeout}s (last error: {last_err!r}).\n"
                    f"--- {log_path} (tail) ---\n{tail(log_path)}"
                )
            time.sleep(0.2)
        yield Chromium(port=port, pid=proc.pid, log_path=log_path, user_data_dir=user_data_dir)
    finally:
        kill_process_group(proc)
        log.close()
        _remove_singleton_dir(user_data_dir)
        shutil.rmtree(user_data_dir, ignore_errors=True)


def cdp_browser_call(port: int, commands: Sequence[tuple[str, dict]]) -> list[dict]:
    """Send browser-level CDP commands on Chromium's own DevTools port (not through a gate); their answers."""
    import asyncio

    import websockets

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/version", timeout=5) as resp:
        url = json.loads(resp.read())["webSocketDebuggerUrl"]

    async def run() -> list[dict]:
        answers: dict[int, dict] = {}
        async with websockets.connect(url, max_size=None) as ws:
            for i, (method, params) in enumerate(commands, 1):
                await ws.send(json.dumps({"id": i, "method": method, "params": params}))
            while len(answers) < len(commands):
                message = json.loads(await asyncio.wait_for(ws.recv(), 10))
                if "id" in message:
                    answers[message["id"]] = message
        return [answers[i] for i in range(1, len(commands) + 1)]

    return asyncio.run(run())


def _remove_singleton_dir(user_data_dir: Path) -> None:
    """Chromium keeps its singleton socket in /tmp/org.chromium.Chromium.XXXX; drop ours."""
    try:
        target = Path(os.readlink(user_data_dir / "SingletonSocket")).parent
    except OSError:
        return
    if target.name.startswith("org.chromium.Chromium.") and target.parent == Path(tempfile.gettempdir()):
        shutil.rmtree(target, ignore_errors=True)


# --------------------------------------------------------------------------- HTTP


def _page(title: str, body: str = "") -> bytes:
    return (
        "<!doctype html><html><head><meta charset=utf-8>"
        f"<title>{html.escape(title)}</title></head><body>{body}</body></html>"
    ).encode()


def _load_demo_site():
    """deploy/local/demo-site as a module (a script without a .py name)."""
    loader = importlib.machinery.SourceFileLoader("demo_site", str(DEMO_SITE_SCRIPT))
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader("demo_site", loader))
    loader.exec_module(module)
    return module


# The demo site of skills/browser-shell/SKILL.md, which users start with deploy/local/demo-site:
# the fixture server serves its pages too, so SKILL.md's examples run against either.
DEMO_SITE_SCRIPT = REPO_ROOT / "deploy" / "local" / "demo-site"
DEMO_SITE = _load_demo_site()
FORM_BODY = DEMO_SITE.FORM_BODY
SIGNUP_BODY = DEMO_SITE.SIGNUP_BODY


@dataclass
class WebServer:
    host: str
    port: int
    submissions: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def url(self, path: str) -> str:
        return f"http://{self.host}:{self.port}{path}"

    def submitted(self) -> list[str]:
        with self.lock:
            return list(self.submissions)

    def seen_paths(self) -> list[str]:
        with self.lock:
            return list(self.requests)


@contextmanager
def run_web_server(host: str = "127.0.0.1") -> Iterator[WebServer]:
    """Serve the fixture pages on `host` (a loopback address) and a free port."""
    state = WebServer(host=host, port=0)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt: str, *args: object) -> None:  # keep pytest output clean
            pass

        def _send(self, status: int, body: bytes, ctype: str = "text/html; charset=utf-8") -> None:
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def do_HEAD(self) -> None:  # noqa: N802
            self.do_GET()

        def do_GET(self) -> None:  # noqa: N802
            parsed = urllib.parse.urlsplit(self.path)
            with state.lock:
                state.requests.append(self.path)
            if parsed.path in ("/", "/form"):
                self._send(200, _page("Form page", FORM_BODY))
            elif parsed.path == "/submit":
                qs = urllib.parse.parse_qs(parsed.query, keep_blank_values=True)
                values = qs.get("q", [])
                with state.lock:
                    state.submissions.extend(values)
                shown = html.escape(values[0]) if values else ""
                self._send(200, _page("Submitted", f"<p id=result>{shown}</p>"))
            elif parsed.path == "/signup":
                self._send(200, _page("Sign up", SIGNUP_BODY))
            elif parsed.path == "/thanks":
                qs = urllib.parse.parse_qs(parsed.query, keep_blank_values=True)
                email = html.escape(qs.get("email", [""])[0])
                self._send(200, _page("Thanks", f"<h1>Thanks</h1><p id=email>{email}</p>"))
            elif parsed.path == "/solid":
                # A page of one colour (?rgb=RRGGBB), edge to edge: what the VNC test looks for.
                rgb = urllib.parse.parse_qs(parsed.query).get("rgb", ["ff00aa"])[0]
                if len(rgb) != 6 or any(c not in "0123456789abcdefABCDEF" for c in rgb):
                    rgb = "ff00aa"
                style = f"<style>html,body{{margin:0;height:100%;background:#{rgb}}}</style>"
                self._send(200, _page("Solid", style))
            elif parsed.path == "/next":
                self._send(200, _page("Next page", "<p>next</p>"))
            elif parsed.path == "/slow":
                # ?ms= how long the answer takes (a second unless said).
                time.sleep(int(urllib.parse.parse_qs(parsed.query).get("ms", ["1000"])[0]) / 1000)
                self._send(200, _page("Slow page", "<p>slow</p>"))
            elif parsed.path == "/slow-form":
                # A form whose submission (Enter in its field) lands on /slow: a navigation that
                # commits a second after the key that started it.
                self._send(200, _page("Slow form", '<form action="/slow"><input id="q" name="q" aria-label="Query"></form>'))
            elif parsed.path == "/redirect":
                # A server-side redirect to wherever ?to= says (tests point it at loopback only).
                target = urllib.parse.parse_qs(parsed.query).get("to", ["/"])[0]
                self.send_response(302)
                self.send_header("Location", target)
                self.send_header("Content-Length", "0")
                self.end_headers()
            elif parsed.path == "/popper":
                # A link that opens ?to= in a new tab (a popup the page opens; tests use loopback only).
                target = html.escape(urllib.parse.parse_qs(parsed.query).get("to", ["/"])[0], quote=True)
                self._send(200, _page("Popper", f'<a id="pop" href="{target}" target="_blank">pop</a>'))
            elif parsed.path == "/links":
                target = html.escape(urllib.parse.parse_qs(parsed.query).get("to", ["/"])[0], quote=True)
                self._send(200, _page("Links", f'<a id="away" href="{target}">away</a>'))
            elif parsed.path == "/later":
                # A page whose script sends it to ?to= after ?ms= milliseconds: a navigation that
                # happens between the agent's commands (tests point it at loopback only).
                query = urllib.parse.parse_qs(parsed.query)
                target = json.dumps(query.get("to", ["/"])[0]).replace("<", "\\u003c")
                ms = int(query.get("ms", ["1000"])[0])
                self._send(200, _page("Later", f"<script>setTimeout(() => {{ location.href = {target}; }}, {ms});</script>"))
            elif parsed.path == "/later-blob":
                # A page whose script, after ?ms= milliseconds, replaces itself with a page it made
                # (a blob: URL, which no request fetches): a form that submits ?q=<marker> to this
                # server. Only the navigation guard refuses such a page; the tests of the guard use it.
                query = urllib.parse.parse_qs(parsed.query)
                marker = html.escape(query.get("marker", ["blob"])[0], quote=True)
                ms = int(query.get("ms", ["1000"])[0])
                made = json.dumps(
                    "<title>Made page</title><h1>Made page</h1>"
                    f'<form action="http://{state.host}:{state.port}/submit" method="get">'
                    f'<input name="q" value="{marker}"><button id="go" type="submit">Go</button></form>'
                ).replace("<", "\\u003c")
                script = (
                    f"setTimeout(() => {{ location.href = URL.createObjectURL("
                    f"new Blob([{made}], {{type: 'text/html'}})); }}, {ms});"
                )
                self._send(200, _page("Later", f"<script>{script}</script>"))
            elif parsed.path == "/framed":
                # An allowed page with a frame on ?src= (tests point it at loopback only).
                src = html.escape(urllib.parse.parse_qs(parsed.query).get("src", ["/next"])[0], quote=True)
                self._send(200, _page("Framed", f'<h1>Outer</h1><iframe id="inner" src="{src}"></iframe>'))
            elif parsed.path == "/pictured":
                # An allowed page that loads an image from ?src= (a subresource).
                src = html.escape(urllib.parse.parse_qs(parsed.query).get("src", ["/"])[0], quote=True)
                self._send(200, _page("Pictured", f'<h1>Pictured</h1><img id="pic" src="{src}">'))
            elif parsed.path == "/admin.html":
                # What a forbidden frame would show: a secret, and a form that submits to its server.
                self._send(200, _page("Admin", (
                    "<p id=secret>TOP-SECRET-ADMIN</p>"
                    '<form action="/submit" method="get"><input id="q" name="q">'
                    '<button id="go" type="submit">Send</button></form>'
                )))
            elif parsed.path in ("/measure", "/noise"):
                # A page of ?w= x ?h= CSS pixels (no margins) whose title reports what a screenshot
                # of it should measure: viewport, device pixel ratio and the scrollable size. /noise
                # paints it with seeded noise (?seed=), which barely compresses: a PNG of ~3 bytes
                # a pixel, for the image size bound.
                query = urllib.parse.parse_qs(parsed.query)
                w, h = (max(1, min(20000, int(query.get(k, [d])[0]))) for k, d in (("w", "400"), ("h", "300")))
                seed = max(1, min(2**31 - 1, int(query.get("seed", ["1"])[0])))
                paint = (
                    f"const c = document.getElementById('c'); const g = c.getContext('2d');"
                    f"const img = g.createImageData({w}, {h}); let s = {seed};"
                    "for (let i = 0; i < img.data.length; i++) {"
                    "  s ^= s << 13; s ^= s >>> 17; s ^= s << 5;"
                    "  img.data[i] = (i % 4 === 3) ? 255 : (s & 255); }"
                    "g.putImageData(img, 0, 0);"
                    if parsed.path == "/noise"
                    else ""
                )
                report = (
                    "document.title = JSON.stringify({iw: innerWidth, ih: innerHeight, dpr: devicePixelRatio,"
                    " sw: document.documentElement.scrollWidth, sh: document.documentElement.scrollHeight});"
                )
                body = (
                    f"<style>html,body{{margin:0;padding:0;background:#0a5}}canvas{{display:block}}</style>"
                    f'<canvas id="c" width="{w}" height="{h}" style="width:{w}px;height:{h}px"></canvas>'
                    f"<script>{paint}{report}</script>"
                )
                self._send(200, _page("Measure", body))
            elif parsed.path == "/favicon.ico":
                self._send(404, b"", "image/x-icon")
            else:
                self._send(*(DEMO_SITE.respond("GET", parsed.path, parsed.query) or (404, _page("Not found"))))

        def do_POST(self) -> None:  # noqa: N802
            # Only the demo site's pages take a POST (its sign-in form).
            parsed = urllib.parse.urlsplit(self.path)
            with state.lock:
                state.requests.append(self.path)
            length = min(int(self.headers.get("Content-Length") or 0), 64 * 1024)
            form = self.rfile.read(length).decode("utf-8", "replace")
            self._send(*(DEMO_SITE.respond("POST", parsed.path, parsed.query, form) or (404, _page("Not found"))))

    httpd = ThreadingHTTPServer((host, 0), Handler)
    httpd.daemon_threads = True
    state.port = httpd.server_address[1]
    thread = threading.Thread(target=httpd.serve_forever, name="e2e-http", daemon=True)
    thread.start()
    try:
        yield state
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)


# --------------------------------------------------------------------------- /proc


def proc_cmdlines() -> dict[int, list[str]]:
    """pid -> argv for every process we can read."""
    out: dict[int, list[str]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                raw = fh.read()
        except OSError:
            continue
        if not raw:
            continue
        out[int(entry)] = [p.decode("utf-8", "replace") for p in raw.rstrip(b"\0").split(b"\0")]
    return out


def daemons_under(bases: Sequence[Path]) -> list[int]:
    """Live processes whose AGENT_BROWSER_SOCKET_DIR lies under one of `bases` (agent-browser
    daemons of those servers' state dirs)."""
    roots = [str(b) + os.sep for b in bases]
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and not is_zombie(int(entry)):
            sock = proc_environ(int(entry)).get("AGENT_BROWSER_SOCKET_DIR", "")
            if any(sock.startswith(root) for root in roots):
                found.append(int(entry))
    return found


def proc_environ(pid: int) -> dict[str, str]:
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            raw = fh.read()
    except OSError:
        return {}
    env: dict[str, str] = {}
    for item in raw.split(b"\0"):
        if b"=" in item:
            k, _, v = item.partition(b"=")
            env[k.decode("utf-8", "replace")] = v.decode("utf-8", "replace")
    return env


def session_cli_processes(session_name_fragment: str) -> dict[int, list[str]]:
    """agent-browser CLI processes (`... --session NAME batch ...`) whose NAME contains the fragment."""
    hits: dict[int, list[str]] = {}
    for pid, argv in proc_cmdlines().items():
        if "batch" not in argv:
            continue
        for i, arg in enumerate(argv[:-1]):
            if arg == "--session" and session_name_fragment in argv[i + 1]:
                hits[pid] = argv
                break
            if arg.startswith("--session=") and session_name_fragment in arg:
                hits[pid] = argv
                break
    return hits


def is_zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            stat = fh.read()
    except OSError:
        return True  # gone
    # state is the field after the parenthesised comm
    return stat.rpartition(")")[2].split()[0] in ("Z", "X")


def parent_pid(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            stat = fh.read()
    except OSError:
        return None
    return int(stat.rpartition(")")[2].split()[1])


def descendants(root: int) -> dict[int, list[str]]:
    """Live descendants of `root` (pid -> argv), from a single /proc scan."""
    cmdlines = proc_cmdlines()
    children: dict[int, list[int]] = {}
    for pid in cmdlines:
        ppid = parent_pid(pid)
        if ppid is not None:
            children.setdefault(ppid, []).append(pid)
    out: dict[int, list[str]] = {}
    stack = [root]
    while stack:
        for child in children.get(stack.pop(), []):
            if child not in out:
                out[child] = cmdlines.get(child, [])
                stack.append(child)
    return out


class ProcessWatcher:
    """Background poller recording every descendant of `root` whose argv matches `predicate`."""

    def __init__(self, root: int, predicate, interval: float = 0.05) -> None:
        self.root = root
        self.predicate = predicate
        self.interval = interval
        self.seen: dict[int, list[str]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="proc-watch", daemon=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            for pid, argv in descendants(self.root).items():
                if pid not in self.seen and self.predicate(argv):
                    self.seen[pid] = argv
            self._stop.wait(self.interval)

    def __enter__(self) -> "ProcessWatcher":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def still_alive(self) -> dict[int, list[str]]:
        """Recorded processes that still exist and are not zombies, with the same argv."""
        now = proc_cmdlines()
        return {pid: argv for pid, argv in self.seen.items() if now.get(pid) == argv and not is_zombie(pid)}


def sha256_of(path: Path) -> str:
    """Hex SHA-256 of a file's bytes (what the audit records carry for binaries and policies)."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def elf_interpreter(path: Path) -> str | None:
    """The dynamic loader a 64-bit little-endian ELF executable asks for (its PT_INTERP), or None when
    it is statically linked."""
    data = path.read_bytes()
    assert data[:6] == b"\x7fELF\x02\x01", f"{path} is not a 64-bit little-endian ELF file"
    (phoff,) = struct.unpack_from("<Q", data, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", data, 0x36)
    for i in range(phnum):
        header = phoff + i * phentsize
        (p_type,) = struct.unpack_from("<I", data, header)
        if p_type == 3:  # PT_INTERP
            offset, _, _, filesz = struct.unpack_from("<QQQQ", data, header + 8)
            return data[offset:offset + filesz].rstrip(b"\0").decode()
    return None
