"""Timeouts, client cancellation and load: children die, the server survives and keeps answering."""

from __future__ import annotations

import json
import re
import secrets
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import anyio
import pytest

from mcp import MCPError
from mcp_types import REQUEST_TIMEOUT

import harness
from server import call, describe

pytestmark = pytest.mark.chromium

TIMEOUT_WORDS = re.compile(r"time[d]?[\s_-]?out", re.IGNORECASE)


def _is_cli(argv: list[str]) -> bool:
    return "batch" in argv


def _wait_until_gone(watcher: harness.ProcessWatcher, sid: str, within: float) -> dict[int, list[str]]:
    """Poll until no recorded CLI child and no `--session *sid* batch` process is alive."""
    end = time.monotonic() + within
    while True:
        alive = {**watcher.still_alive(), **harness.session_cli_processes(sid)}
        if not alive or time.monotonic() > end:
            return alive
        time.sleep(0.1)


def test_a_timed_out_call_kills_its_child_and_the_server_keeps_serving(server, web: harness.WebServer) -> None:
    """timeout_sec=2 on a 20 s wait: exit 124 within seconds, the agent-browser child gone, and the
    server, and the same session, answer promptly afterwards."""
    sid = "to-" + secrets.token_hex(4)
    form_url = web.url("/form")
    server.ok(sid, ["open", form_url])
    assert server.pid is not None, "could not find the browser-shell process in /proc"

    with harness.ProcessWatcher(server.pid, _is_cli) as watcher:
        t0 = time.monotonic()
        is_error, reply = server.call(sid, ["wait", "20000"], 2, deadline=30)
        elapsed = time.monotonic() - t0
        leftovers = _wait_until_gone(watcher, sid, within=3)

    assert is_error, f"a timed-out call must be isError:\n{describe(reply)}"
    assert reply["exit_code"] == 124, f"expected exit_code 124 after {elapsed:.1f}s:\n{describe(reply)}"
    assert elapsed < 6, f"timeout_sec=2 call took {elapsed:.1f}s to answer"
    assert TIMEOUT_WORDS.search(reply["stderr"]), f"stderr does not mention the timeout: {reply['stderr']!r}"
    assert watcher.seen, "never saw the agent-browser CLI child (`... batch ...`) while the call ran"
    assert not leftovers, f"agent-browser CLI processes survived the timeout: {leftovers}"
    assert server.alive(), "browser-shell died"

    _server_still_serves(server, sid, form_url, f"timeout answered after {elapsed:.2f}s")


def _server_still_serves(server, sid: str, form_url: str, note: str) -> None:
    # The server as a whole answers promptly (another session)...
    t0 = time.monotonic()
    is_error, reply = server.call("bystander", ["get", "url"], 10)
    other = time.monotonic() - t0
    assert not is_error and reply["exit_code"] == 0, describe(reply)
    assert other < 5, f"another session's get url took {other:.1f}s after the kill"
    # ...and the affected session works again at once: browser-shell also stops the session's
    # daemon, which would otherwise finish the killed 20 s wait before serving anything else.
    # A 5 s tool timeout on this call would fire (exit 124) if that daemon were still busy.
    t1 = time.monotonic()
    is_error, reply = server.call(sid, ["get", "url"], 5)
    assert not is_error, f"the session is still held by the killed command:\n{describe(reply)}"
    after = json.loads(reply["stdout"])
    assert after == {"url": form_url}, after
    print(
        f"\n[e2e] {note}; other session get url {other:.2f}s; "
        f"same session get url {time.monotonic() - t1:.2f}s"
    )


class HoldingServer:
    """A loopback server that holds every request back until the test lets go: a page whose
    document never arrives while the test runs. `holding()` says whether a request is held now."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.lock = threading.Lock()
        self.held = 0
        self.seen: list[str] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, fmt: str, *args: object) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802
                with owner.lock:
                    owner.held += 1
                    owner.seen.append(self.path)
                try:
                    owner.release.wait(300)  # a bound only for a run that never lets go
                finally:
                    with owner.lock:
                        owner.held -= 1
                body = b"<title>Late</title><p>late</p>"
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "text/html")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except OSError:
                    pass  # Chromium gave up on it: what the test wants

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="e2e-held", daemon=True)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}{path}"

    def holding(self) -> bool:
        with self.lock:
            return self.held > 0 and not self.release.is_set()

    def __enter__(self) -> "HoldingServer":
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)


def test_after_a_timeout_on_a_page_that_never_arrives_the_session_answers_before_the_page_does(
    server, web: harness.WebServer
) -> None:
    """`open` of a page whose server holds the document back times out. Its navigation used to
    outlive the stopped daemon, and Chromium holds a newly attached client's commands to the tab
    until a navigation commits: the next `get url` waited for the slow server (the guard's reads
    before it timed out, then the call was refused, or recorded as a plain ok once the page came).
    The page's loading is stopped with the command, so the next call answers while the server
    still holds the document, on the page the session was on, and the records say what happened."""
    sid = "held-" + secrets.token_hex(4)
    form_url = web.url("/form")
    server.ok(sid, ["open", form_url])
    with HoldingServer() as slow:
        is_error, timed_out = server.call(sid, ["open", slow.url("/held")], 2)
        assert is_error and timed_out["exit_code"] == 124, describe(timed_out)
        assert slow.seen == ["/held"], slow.seen  # the navigation did reach the slow server

        is_error, reply = server.call(sid, ["get", "url"])
        assert slow.holding(), "the next call answered only once the slow server let the page go"
        assert not is_error, f"the session is still held by the timed-out navigation:\n{describe(reply)}"
        assert json.loads(reply["stdout"]) == {"url": form_url}, reply["stdout"]
        assert server.ok(sid, ["open", web.url("/next")])["url"] == web.url("/next")
        assert slow.holding() and slow.seen == ["/held"], slow.seen
    assert "the page's loading were stopped" in timed_out["stderr"], timed_out["stderr"]

    records = [json.loads(line) for line in server.cfg.audit_log.read_text().splitlines()]
    outcomes = [r for r in records if r.get("session_id") == sid and r["phase"] == "outcome"]
    assert [r["outcome"] for r in outcomes] == ["ok", "timeout", "ok", "ok"], outcomes
    timed_out, after = outcomes[1], outcomes[2]
    assert "the page's loading were stopped" in timed_out["reason"], timed_out
    # Answered on its first read: a plain ok, on the page the session was on.
    assert after["page_url"] == form_url and "reason" not in after, after


def test_a_call_the_client_cancels_kills_its_child_and_the_server_keeps_serving(server, web: harness.WebServer) -> None:
    """The client gives up after 1 s and sends notifications/cancelled: the agent-browser child of
    that call dies, and the server, and the same session, answer promptly afterwards."""
    sid = "cx-" + secrets.token_hex(4)
    form_url = web.url("/form")
    server.ok(sid, ["open", form_url])
    assert server.pid is not None, "could not find the browser-shell process in /proc"

    async def cancelled_call(session) -> BaseException | None:
        try:
            # 1 s client-side read timeout: the client gives up and sends notifications/cancelled.
            result = await call(session, sid, ["wait", "20000"], 30, read_timeout=1.0)
        except MCPError as exc:
            return exc
        raise AssertionError(f"the call was expected to time out on the client, got {result!r}")

    with harness.ProcessWatcher(server.pid, _is_cli) as watcher:
        t0 = time.monotonic()
        exc = server.run(cancelled_call)
        assert isinstance(exc, MCPError) and exc.code == REQUEST_TIMEOUT, repr(exc)
        assert time.monotonic() - t0 < 5, "client-side timeout did not fire promptly"
        assert watcher.seen, "never saw the agent-browser CLI child (`... batch ...`) while the call ran"
        leftovers = _wait_until_gone(watcher, sid, within=5)

    assert not leftovers, f"agent-browser CLI processes survived the cancellation: {leftovers}"
    assert server.alive(), "browser-shell died"
    _server_still_serves(server, sid, form_url, "cancelled on the client after 1s")


def test_a_hundred_concurrent_calls_are_all_answered(server, web: harness.WebServer) -> None:
    sids = [f"load-{i}" for i in range(5)]
    for sid in sids:  # bring each session's daemon up first
        server.ok(sid, ["get", "url"])

    plan: list[tuple[str, list[Any], bool]] = []
    refused_argvs = [["eval", "1"], ["frobnicate"], ["open", "file:///etc/passwd"], ["snapshot", "--cdp=1"]]
    for i in range(100):
        sid = sids[i % len(sids)]
        if i % 4 == 3:
            plan.append((sid, refused_argvs[(i // 4) % len(refused_argvs)], False))
        else:
            plan.append((sid, ["get", "url"], True))

    async def scenario(session) -> list[Any]:
        results: list[Any] = [None] * len(plan)

        async def one(i: int) -> None:
            sid, argv, _ = plan[i]
            try:
                results[i] = await call(session, sid, argv, 60)
            except Exception as exc:  # keep going; report every failure at once
                results[i] = exc

        with anyio.fail_after(150):
            async with anyio.create_task_group() as tg:
                for i in range(len(plan)):
                    tg.start_soon(one, i)
        return results

    t0 = time.monotonic()
    results = server.run(scenario)
    elapsed = time.monotonic() - t0

    problems: list[str] = []
    for (sid, argv, allowed), res in zip(plan, results):
        if isinstance(res, BaseException) or res is None:
            problems.append(f"{sid} {argv}: {res!r}")
            continue
        is_error, reply = res
        if allowed:
            if is_error or reply["exit_code"] != 0:
                problems.append(f"{sid} {argv}: {describe(reply)}")
            else:
                try:
                    data = json.loads(reply["stdout"])
                    assert isinstance(data.get("url"), str)
                except Exception:
                    problems.append(f"{sid} {argv}: stdout is not {{'url': ...}}: {reply['stdout']!r}")
        elif not (is_error and reply["exit_code"] == 126):
            problems.append(f"{sid} {argv}: expected a 126 refusal: {describe(reply)}")
    assert not problems, f"{len(problems)}/100 concurrent calls went wrong:\n" + "\n".join(problems[:20])
    assert server.alive(), "browser-shell died under load"
    print(f"\n[e2e] 100 concurrent calls answered in {elapsed:.2f}s")


def test_calls_that_cannot_start_in_time_are_refused_as_busy(start_server, web: harness.WebServer) -> None:
    """One slot in flight, one second of patience: a second call, on another session or on the
    same one, is refused as busy (and audited) instead of queueing forever."""
    import threading

    srv = start_server(extra_args=["--max-inflight", "1", "--busy-wait-sec", "1"])
    srv.ok("busy-a", ["open", web.url("/form")])
    long_call = threading.Thread(target=lambda: srv.call("busy-a", ["wait", "4000"], 30))
    long_call.start()
    time.sleep(0.5)
    try:
        is_error, other = srv.call("busy-b", ["get", "url"], 10)
        is_error_same, same = srv.call("busy-a", ["get", "url"], 10)
    finally:
        long_call.join()
    assert is_error and other["exit_code"] == 126 and "refused [limits.busy]" in other["stderr"], describe(other)
    assert "1 calls are already running" in other["stderr"], other["stderr"]
    assert is_error_same and "session is still busy" in same["stderr"], describe(same)
    rules = [json.loads(l).get("rule") for l in srv.cfg.audit_log.read_text().splitlines()]
    assert rules.count("limits.busy") == 2, rules
    # Once the long call is done, both sessions are served again.
    assert srv.ok("busy-b", ["get", "url"])["url"] == "about:blank"


def test_sigterm_lets_calls_finish_within_the_grace_then_cancels_and_exits_zero(
    binaries, server_config, web: harness.WebServer
) -> None:
    import signal
    import subprocess
    import threading

    cfg = server_config(tag="bst")
    cfg.extra_args = ["--shutdown-grace-sec", "1"]
    cfg.base.mkdir(parents=True, exist_ok=True)
    cfg.write_policy()
    proc = subprocess.Popen(cfg.argv(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=cfg.env())

    def send(obj: dict) -> None:
        proc.stdin.write(json.dumps(obj) + "\n")
        proc.stdin.flush()

    def read_reply(within: float = 30.0) -> dict:
        """One line of stdout, or the test fails (the server killed) after `within` seconds."""
        line: list[str] = []
        reader = threading.Thread(target=lambda: line.append(proc.stdout.readline()), daemon=True)
        reader.start()
        reader.join(within)
        if reader.is_alive() or not line or not line[0]:
            proc.kill()
            raise AssertionError(f"no reply line from the server within {within} s (exit {proc.poll()})")
        return json.loads(line[0])

    def call(i: int, argv: list) -> None:
        send({"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": {"name": "browser-shell", "arguments": {"session_id": "term", "argv": argv}}})

    send({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}})
    assert read_reply()["id"] == 0
    call(1, ["open", web.url("/form")])
    assert read_reply()["result"]["structuredContent"]["exit_code"] == 0
    call(2, ["wait", "20000"])
    deadline = time.monotonic() + 10
    while '"wait"' not in cfg.audit_log.read_text():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    reply = read_reply()
    assert reply["id"] == 2 and reply["result"]["structuredContent"]["exit_code"] == 130, reply
    assert proc.wait(timeout=15) == 0
    outcomes = [json.loads(l) for l in cfg.audit_log.read_text().splitlines() if '"outcome"' in l]
    assert outcomes[-1]["outcome"] == "stopped" and "SIGTERM" in outcomes[-1]["reason"], outcomes[-1]
    assert outcomes[-2]["outcome"] == "cancelled", outcomes[-2]
    run = subprocess.run([str(binaries.server), "audit", "verify", str(cfg.audit_log)], capture_output=True, text=True)
    assert run.returncode == 0 and "dangling intents (allowed calls with no outcome: crash or kill mid-call): 0" in run.stdout, run.stdout


def test_a_flood_of_refusals_is_slowed_and_every_one_is_recorded(start_server) -> None:
    """Every refusal is an audit record, so a flood of them could rotate older evidence away. Past
    a burst of 200, the server reads the client's next message only as its refusal budget refills
    (50/s): 400 refusals take at least (400 - 200) / 50 = 4 s, and none goes unrecorded."""
    srv = start_server()
    started = time.monotonic()
    for i in range(400):
        is_error, reply = srv.call("flood", ["eval", str(i)])
        assert is_error and reply["exit_code"] == 126, describe(reply)
    elapsed = time.monotonic() - started
    assert elapsed >= 3.5, f"400 refusals took {elapsed:.2f} s: nothing slowed the flood"
    records = [json.loads(line) for line in srv.cfg.audit_log.read_text().splitlines()]
    denied = [r for r in records if r.get("session_id") == "flood" and r["phase"] == "denied"]
    assert len(denied) == 400, len(denied)
