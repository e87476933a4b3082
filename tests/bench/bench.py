"""browser-shell benchmark: what the wrapper costs on top of agent-browser, and against its peers.

Measurements are interleaved (A, B, A, B, …) against one real headless Chromium and one loopback web
server; p50 and p95 of N runs; the table is the output. No timing assertion: targets are printed next
to the results (✓/✗ where the table can tell). What each section measures:

  defaults the configuration users run: a server with no tuning flags (its pool sizes itself), on the
           bench's Chromium (the project's chromium_flags) and, in a loopback-only network namespace
           (`unshare -n`), on a Chromium with plain flags: a new session's first call with sessions
           1 s apart (N); two bursts of 8 new sessions 0.2 s apart, 3 s between, each call sent at its
           arrival by its own client (the first burst meets an empty pool; Chromium's main-thread CPU
           per new browser context during it bounds what it can do); the smoke flow (3×N runs, a 0.5 s
           pause after each run of either flavour) against agent-browser direct with the per-command
           breakdown.
  warm     (5×N pairs) one persistent browser-shell MCP session vs spawning agent-browser directly with the same
           flags (`--cdp P --json --session S --pin-tab`), on a warm daemon: `get url`, `snapshot -i`,
           each call followed by an untimed pause (SETTLE_S); the added p50's bootstrap interval; the
           floor (one append + fdatasync on the audit log's filesystem, timed between the same calls) and
           what is left above it; where the time goes inside the server (p50 per phase of its debug
           `call phases` events, from a second server with that logging on, untimed);
           a refused call (on a server whose agent-browser is an exec-logging stand-in: the run fails
           if any refusal spawned a process); a `tools/list` round trip; the server's RSS after that run.
  newsession also times a burst: 8 new sessions arriving 0.2 s apart on `--pool 2`, each first call
           from its arrival.
  subresources  (max(5, N/5) of each, per size) `open` of a page with 20, 100 and 300 same-origin
           subresources (images, none cacheable, new URLs every load) on a warm session: browser-shell
           (the page and each image through the session's egress proxy) vs agent-browser direct on
           the same Chromium (its own daemon, no gate, no proxy), interleaved.
  smoke    the smoke flow `open → snapshot -i → fill → click → press Enter → get url → close` on the
           loopback form page, end to end (3×N runs of (a) and (b), N of (c); the ratio's bootstrap
           interval is printed), as (a) browser-shell driven by an MCP client, (b) raw
           agent-browser, one process per step (the floor), (c) Microsoft's playwright-mcp attached
           to the same Chromium over CDP (`--cdp-endpoint`), driven by the same MCP client, both with
           its defaults (each action waits a fixed 500 ms "settle") and with `--timeout-settle 0`.
           `get url` is repeated until the page shows /submit (all flavours alike). Each run submits
           a value of its own; a run counts only if the web server received exactly that value and
           the final URL is the expected one. Failed runs are counted, shown, and not timed.
  peer     cold start, process start → first `tools/list` reply (initialize included), and idle RSS
           (VmRSS after start + 5 `tools/list`, and for browser-shell after its `started` record,
           whose hashing follows the handshake), of browser-shell vs a minimal Node MCP stdio server
           on @modelcontextprotocol/sdk (tests/bench/peers/node-peer.mjs) vs playwright-mcp;
           3×N starts of each, interleaved in an order that rotates each round (a start's p50 moves
           by ~2 ms from run to run on a 2-vCPU VM, so N = 10 alone decides little). browser-shell
           starts two ways: again on one audit log, as an MCP Hub restarts it, and first on a new
           log, which also creates the log's key (a file written and fsync'd once).
  screenshot  what the image in a `screenshot` reply costs: N interleaved calls on a server with images
           (the default bound) and on one without (`--max-image-bytes 0`), each on its own session:
           viewport screenshots of the loopback form page and of a noise page (a large PNG within the
           bound), and a full-page one of the noise page, whose PNG is over the bound (shrunk); wall
           time per call at the client, the JSON-RPC reply's bytes, the server's own `image` phase.
  audit    synced audit appends with the OTLP exporter off / up / down,
           `cargo run --release --example audit_otlp_throughput`.
  confine  confinement cost: /usr/bin/true spawned plainly, through a pre_exec hook (fork), and through
           the trampoline, `cargo run --release -p hardening --example spawn_cost`: once with
           hardening-trampoline (what every agent-browser spawn runs), once with browser-shell's own
           binary (what a server installed without it falls back to).

The MCP client is the raw JSON-RPC-over-stdio one below (no client library in the timing), the same
for browser-shell and the peers. Everything talks to 127.0.0.1 only.

Besides the printed table, each run is written as data (date, host facts, every row's label, samples,
p50/p95 and target, the notes and the audit/confine outputs) to target/bench/results-<UTC time>.json,
or to the file --out names. The raw runs live there, not in the docs.

    tests/bench/run [N] [--only warm,smoke,evidence,peer,screenshot,audit,confine] [--out FILE]   (default N=50, every section)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "e2e"))
import harness  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
BIN = ROOT / "target" / "release" / "browser-shell"
PEERS = Path(__file__).resolve().parent / "peers"
PLAYWRIGHT_MCP = PEERS / "node_modules" / "@playwright" / "mcp" / "cli.js"
NODE_PEER = PEERS / "node-peer.mjs"
SECTIONS = ("defaults", "warm", "newsession", "subresources", "smoke", "evidence", "peer", "screenshot", "audit",
            "confine")
# Warm calls are cheap (a few ms) and noisy on a small VM (p95 2-3× p50): their two medians, whose
# difference is the result, get 5×N interleaved pairs each.
WARM_FACTOR = 5
# An untimed pause after each warm call, so that one flavour's background work (browser-shell spawns its
# session's next child a millisecond after each reply) is not billed to the call of the other flavour
# that follows it. Agents' calls are seconds apart; the smoke flow keeps measuring calls back to back.
SETTLE_S = 0.02
# After the pool's last `pooled` record: its standby CLI is spawned just after it.
POOL_SETTLE_S = 0.1
# browser-shell and agent-browser direct run the smoke flow this many times per round (the ratio's row;
# its p50 moved by ±3 % between 30-run samples on this VM), the playwright-mcp flavours once.
SMOKE_FACTOR = 3
# After each default-configuration smoke run: an agent thinks between tasks, and the self-sized pool
# refills once the calls have gone quiet (250 ms).
SMOKE_THINK_S = 0.5
PROTOCOL = "2025-11-25"


def pct(values: list[float], p: int) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, len(values) * p // 100)]


def vm_rss_kib(pid: int) -> int:
    return next(int(l.split()[1]) for l in Path(f"/proc/{pid}/status").read_text().splitlines() if l.startswith("VmRSS:"))


# --------------------------------------------------------------------------- MCP stdio client


class Mcp:
    """An MCP server over stdio with a raw JSON-RPC client (no client library in the timing).

    `started` is taken just before the process is spawned, so `time.perf_counter() - started` after
    a reply is the cold start up to that reply. Notifications the server sends are skipped."""

    def __init__(self, argv: list[str], env: dict[str, str], cwd: Path | None = None, stderr: Path | None = None):
        self.ids = 0
        self.started = time.perf_counter()
        with open(stderr or os.devnull, "wb") as err:
            self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                                         text=True, env=env, cwd=cwd)
        self.rpc({"jsonrpc": "2.0", "id": 0, "method": "initialize",
                  "params": {"protocolVersion": PROTOCOL, "capabilities": {}, "clientInfo": {"name": "bench", "version": "0"}}})
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def send(self, message: dict) -> None:
        self.proc.stdin.write(json.dumps(message) + "\n")
        self.proc.stdin.flush()

    def rpc(self, message: dict) -> dict:
        self.send(message)
        while True:
            line = self.proc.stdout.readline()
            if not line:
                raise EOFError(f"{self.proc.args[0]} closed stdout (exit {self.proc.poll()})")
            reply = json.loads(line)
            if "method" not in reply and reply.get("id") == message["id"]:
                self.reply_bytes = len(line.encode())
                return reply

    def tool(self, name: str, arguments: dict) -> dict:
        """tools/call; returns the result object (content, structuredContent, isError)."""
        self.ids += 1
        reply = self.rpc({"jsonrpc": "2.0", "id": self.ids, "method": "tools/call",
                          "params": {"name": name, "arguments": arguments}})
        if "result" not in reply:
            raise RuntimeError(f"tools/call {name}: {reply.get('error')}")
        return reply["result"]

    def list_tools(self) -> dict:
        return self.rpc({"jsonrpc": "2.0", "id": 9, "method": "tools/list"})

    def rss_kib(self) -> int:
        return vm_rss_kib(self.proc.pid)

    def settle(self) -> None:
        """Until the start's own background work is done (nothing to wait for by default)."""

    def close(self) -> None:
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.terminate()
            self.proc.wait(timeout=10)


class Server(Mcp):
    """browser-shell serve, confined, with its own state/output dirs, an audit log in `evidence` and
    a policy that allows `web_cidr` (the loopback web server)."""

    def __init__(self, ab: Path, cdp: int, web_cidr: str, evidence: Path, extra: list[str] | None = None,
                 phases: bool = False, audit_log: Path | None = None, approvals: dict | None = None):
        """`phases`: debug logging of the server's `call phases` events to `self.log` (for the profile;
        the logging itself costs each call a little, so timed servers run without it). `audit_log`: an
        existing log to go on with, as a restarted server does (default: a new one of its own).
        `approvals`: the policy's `approvals` section (default: none)."""
        self.base = Path(tempfile.mkdtemp(prefix="bsb", dir="/tmp"))
        # Enterable by others: each session's agent-browser runs as a uid of its own (--child-uids).
        self.base.chmod(0o711)
        self.log = self.base / "server.log"
        # Beside the audit log, not under /tmp: the server refuses a policy the confined child could write.
        policy = evidence / f"policy-{self.base.name}.json"
        policy.write_text(json.dumps({"open": {"allow_private_cidrs": [web_cidr]},
                                      **({"approvals": approvals} if approvals else {})}))
        self.audit = audit_log or evidence / f"audit-{self.base.name}.jsonl"
        self.started_before = self._started_records()
        # A checkout under /tmp: the server refuses binaries the child could replace unless told.
        accept = ["--allow-child-writable-inputs"] if any(
            str(p.resolve()).startswith("/tmp/") for p in (BIN, ab)) else []
        super().__init__(
            [str(BIN), "serve", "--agent-browser", str(ab), "--cdp-port", str(cdp), "--state-dir", str(self.base / "s"),
             "--output-dir", str(self.base / "o"), "--audit-log", str(self.audit), "--policy", str(policy),
             *accept, *(extra or [])],
            env={"PATH": "/usr/bin:/bin", **({"RUST_LOG": "browser_shell::call::laps=debug"} if phases else {})},
            stderr=self.log if phases else None,
        )

    def _started_records(self) -> int:
        return (self.audit.read_text() if self.audit.exists() else "").count('"outcome":"started"')

    def settle(self) -> None:
        """Until this server's `started` record is written: the binaries' hashing for it runs after the
        handshake, so an RSS read before it would miss that work."""
        deadline = time.monotonic() + 10
        while self._started_records() <= self.started_before:
            if time.monotonic() > deadline:
                raise RuntimeError(f"no `started` record in {self.audit} after 10 s")
            time.sleep(0.005)

    def phases(self) -> list[dict[str, int]]:
        """The `call phases` events logged so far (µs per phase, in the order the server took them)."""
        text = self.log.read_text() if self.log.exists() else ""
        return [{k: int(v) for k, v in (kv.split("=") for kv in m.group(1).split())}
                for m in re.finditer(r'laps_us="([^"]+)"', text)]

    def call(self, sid: str, argv: list) -> dict:
        return self.tool("browser-shell", {"session_id": sid, "argv": argv})["structuredContent"]

    def close(self) -> None:
        super().close()
        shutil.rmtree(self.base, ignore_errors=True)  # state and output dirs; the audit log stays in `evidence`


class PlaywrightMcp(Mcp):
    """Microsoft's playwright-mcp attached to an existing Chromium over CDP: it launches and downloads
    no browser. Its working files (.playwright-mcp/) go to a temp dir of its own."""

    def __init__(self, cdp: int, extra: list[str] | None = None):
        self.base = Path(tempfile.mkdtemp(prefix="bsb-pw", dir="/tmp"))
        super().__init__(
            [node(), str(PLAYWRIGHT_MCP), "--cdp-endpoint", f"http://127.0.0.1:{cdp}", *(extra or [])],
            env={"PATH": "/usr/bin:/bin", "HOME": str(self.base), "PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD": "1"},
            cwd=self.base,
        )

    def close(self) -> None:
        super().close()
        shutil.rmtree(self.base, ignore_errors=True)


class NodePeer(Mcp):
    """tests/bench/peers/node-peer.mjs: one tool on @modelcontextprotocol/sdk, nothing else."""

    def __init__(self, ab: Path):
        super().__init__([node(), str(NODE_PEER)], env={"PATH": "/usr/bin:/bin", "AGENT_BROWSER": str(ab)}, cwd=PEERS)


def node() -> str:
    return shutil.which("node") or "node"


def raw_env(srv: Server) -> dict:
    return raw_env_at(srv.base)


def raw_env_at(base: Path) -> dict:
    """agent-browser direct's environment, in the dirs a server at `base` makes for its own children."""
    s = base / "s"
    return {"HOME": str(s / "home"), "PATH": "/usr/bin:/bin", "AGENT_BROWSER_CONFIG": str(s / "agent-browser.config.json"),
            "AGENT_BROWSER_SOCKET_DIR": str(s / "sock"), "AGENT_BROWSER_NO_VERSION_CHECK": "1", "AGENT_BROWSER_IDLE_TIMEOUT_MS": "600000"}


# --------------------------------------------------------------------------- table


def timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return (time.perf_counter() - t) * 1000


def mark(ok: bool | None) -> str:
    return "" if ok is None else (" ✓" if ok else " ✗")


# Every row() of this run, as data: main() writes them to the results file.
RESULTS: list[dict] = []


def summary(values: list[float] | None) -> dict | None:
    """A row side as data: its samples (ms, or MiB for RSS rows) and their p50/p95."""
    if values is None:
        return None
    return {"n": len(values), "p50": statistics.median(values) if values else None,
            "p95": pct(values, 95) if values else None, "samples": [round(v, 4) for v in values]}


def row(name: str, a: list[float], b: list[float] | None, target: str, ok=None) -> str:
    """One table line; `ok(a50, b50)` (optional) decides the ✓/✗ printed after the target.
    The row is also kept in RESULTS."""
    a50 = statistics.median(a) if a else None
    b50 = statistics.median(b) if b else None
    met = ok(a50, b50) if ok and a and (b is None or b) else None
    RESULTS.append({"label": name, "browser_shell": summary(a), "other": summary(b), "target": target,
                    "added_p50": a50 - b50 if a50 is not None and b50 is not None else None,
                    "ratio": a50 / b50 if a50 is not None and b50 else None,
                    "met": None if met is None else bool(met)})
    if not a:
        return f"| {name} | no successful run | – | – | – | {target} |"
    a95 = pct(a, 95)
    if b is None:
        return f"| {name} | {a50:.2f} / {a95:.2f} | – | – | – | {target}{mark(met)} |"
    if not b:
        return f"| {name} | {a50:.2f} / {a95:.2f} | no successful run | – | – | {target} |"
    b95 = pct(b, 95)
    return (f"| {name} | {a50:.2f} / {a95:.2f} | {b50:.2f} / {b95:.2f} | {a50 - b50:+.2f} | {a50 / b50:.2f} "
            f"| {target}{mark(met)} |")


# --------------------------------------------------------------------------- warm calls


# An approval rule the warm calls do not meet: what they cost with approvals configured.
PAYMENTS = {"rules": [{"name": "payments", "subcommands": ["click", "dblclick"], "element_roles": ["button"],
                       "element_words": ["pay", "buy", "delete", "send", "transfer"]}]}


def bench_warm(ab: Path, chromium, web, evidence: Path, n: int, notes: list[str]) -> list[str]:
    srv = Server(ab, chromium.port, "127.0.0.1/32", evidence, approvals=PAYMENTS)
    assert srv.call("b1", ["open", web.url("/form")])["exit_code"] == 0
    # The same warm daemon as browser-shell's session: it was started with the browser gate's URL, so
    # agent-browser direct is given that URL too (another --cdp would make the daemon reconnect).
    gate_file = srv.base / "s" / "gate.port"
    cdp = f"ws://127.0.0.1:{gate_file.read_text().strip()}/devtools/browser/b1" if gate_file.exists() else str(chromium.port)
    raw = [str(ab), "--cdp", cdp, "--json", "--session", "b1", "--pin-tab"]
    env = raw_env(srv)

    def through(argv):
        return lambda: srv.call("b1", argv)

    def direct(argv):
        return lambda: subprocess.run(raw + argv, env=env, capture_output=True, check=True)

    floor_file = evidence / "fsync-floor"
    line = b'{"floor":"' + b"x" * 500 + b'"}\n'  # about an intent record's size

    def floor() -> None:
        fd = os.open(floor_file, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            os.write(fd, line)
            os.fdatasync(fd)
        finally:
            os.close(fd)

    rows, floors, added = [], [], {}
    for argv in (["get", "url"], ["snapshot", "-i"]):
        through(argv)(); direct(argv)()  # warm
        a, b = [], []
        for _ in range(n * WARM_FACTOR):
            a.append(timed(through(argv)))
            time.sleep(SETTLE_S)
            b.append(timed(direct(argv)))
            time.sleep(SETTLE_S)
            floors.append(timed(floor))
            time.sleep(SETTLE_S)  # the next call starts from the same idle as every other
        rows.append(row(f"warm `{' '.join(argv)}`: browser-shell vs agent-browser direct", a, b, "added ≤ 1.0 ms",
                        lambda a50, b50: a50 - b50 <= 1.0))
        added[" ".join(argv)] = (statistics.median(a) - statistics.median(b), difference_interval(a, b))
    floor_file.unlink(missing_ok=True)
    f50 = statistics.median(floors)
    notes.append("warm calls, added p50 with its 90 % bootstrap interval, and what is left once the floor (one "
                 f"append + fdatasync of a 0.5 KiB line on the audit log's filesystem, timed between the same calls: "
                 f"p50 {f50:.2f} / p95 {pct(floors, 95):.2f} ms) is taken off: "
                 + "; ".join(f"`{cmd}` {d:+.2f} ms ({lo:+.2f}…{hi:+.2f}), {d - f50:+.2f} above the floor"
                             for cmd, (d, (lo, hi)) in added.items()))
    notes.append(warm_profile(ab, chromium, web, evidence, n))
    rows.append(bench_refused(chromium, web, evidence, n))
    listing = [timed(srv.list_tools) for _ in range(n)]
    rows.append(row("`tools/list` round trip (transport floor)", listing, None, "–"))
    rss = srv.rss_kib()
    srv.call("b1", ["close"])  # the session's daemon would otherwise outlive the run (idle timeout)
    srv.close()
    notes.append(f"RSS of the server after the warm run: {rss / 1024:.1f} MiB (a busy server, with its standbys' pipes and "
                 "blocking threads; the ≤ 8 MiB target is for idle RSS, section peer)")
    return rows


def difference_interval(a: list[float], b: list[float], rounds: int = 2000) -> tuple[float, float]:
    """5th and 95th percentile of median(a) - median(b) over bootstrap resamples of each list (a fixed
    seed, so reruns agree): how far the printed added p50 could move with another sample of the same size."""
    rng = random.Random(7)
    diffs = sorted(statistics.median(rng.choices(a, k=len(a))) - statistics.median(rng.choices(b, k=len(b)))
                   for _ in range(rounds))
    return diffs[rounds * 5 // 100], diffs[rounds * 95 // 100]


def warm_profile(ab: Path, chromium, web, evidence: Path, n: int) -> str:
    """Where a warm call's time goes inside the server: p50 of each phase of its `call phases` debug
    events, from a server of its own with that logging on (untimed by the client, so the logging's own
    cost stays out of the table)."""
    srv = Server(ab, chromium.port, "127.0.0.1/32", evidence, phases=True)
    parts = []
    try:
        expect(srv.call("p1", ["open", web.url("/form")])["exit_code"] == 0, "the profile server's open failed")
        for argv in (["get", "url"], ["snapshot", "-i"]):
            srv.call("p1", argv)  # warm
            before = len(srv.phases())
            for _ in range(n * 2):
                expect(srv.call("p1", argv)["exit_code"] == 0, f"the profile server's {' '.join(argv)} failed")
                time.sleep(SETTLE_S * 3)  # paced like the timed run: an idle pause before each call
            events = srv.phases()[before:]
            expect(len(events) == n * 2, f"{len(events)} `call phases` events for {n * 2} calls")
            phases = events[0].keys()
            parts.append(f"`{' '.join(argv)}` " + ", ".join(
                f"{p} {statistics.median([e.get(p, 0) for e in events]) / 1000:.2f}" for p in phases))
        srv.call("p1", ["close"])
    finally:
        srv.close()
    return ("where a warm call's time goes inside browser-shell, p50 ms per phase (`call phases` debug events, "
            "a server of its own; `intent` includes the fdatasync): " + "; ".join(parts))


def bench_refused(chromium, web, evidence: Path, n: int) -> str:
    """Refused calls, timed on a server whose agent-browser is a stand-in that records each exec:
    a refusal never reaches agent-browser, so the timing is the same, and the record shows that no
    process was spawned for any of them (with a positive control: an allowed call is recorded)."""
    stand_in = Path(tempfile.mkdtemp(prefix="bsb-rec", dir="/tmp"))
    marker = stand_in / "execs"
    # Each session's stand-in runs as a uid of its own and appends here.
    stand_in.chmod(0o755)
    marker.touch()
    marker.chmod(0o666)
    # Where the confined stand-in cannot write (it writes its marker under /tmp): the server
    # refuses an agent-browser its child could replace.
    bin_dir = Path(tempfile.mkdtemp(prefix="bsb-rec-bin", dir="/var/tmp"))
    bin_dir.chmod(0o755)
    script = bin_dir / "agent-browser"
    script.write_text(f'#!/bin/sh\necho "$$ $*" >> {marker}\n')
    script.chmod(0o755)
    # The stand-in is a /bin/sh script: under confinement its interpreter must be executable too.
    srv = Server(script, chromium.port, "127.0.0.1/32", evidence, extra=["--extra-read-exec", "/usr"])
    try:
        execs = lambda: marker.read_text().count("\n") if marker.exists() else 0  # noqa: E731
        srv.call("r1", ["get", "url"])  # positive control: an allowed call execs the stand-in
        deadline = time.monotonic() + 5
        while execs() < 2 and time.monotonic() < deadline:  # the start-up self-test, then the call
            time.sleep(0.01)
        time.sleep(0.2)  # the session's standby, spawned just after the reply, is recorded too
        before = execs()
        expect(before >= 2, f"the stand-in recorded {before} execs for the self-test and an allowed call")
        denied = [timed(lambda: srv.call("r1", ["eval", "1"])) for _ in range(n)]
        time.sleep(0.2)
        expect(execs() == before, f"refused calls spawned {execs() - before} processes")
    finally:
        srv.close()
        shutil.rmtree(stand_in, ignore_errors=True)
        shutil.rmtree(bin_dir, ignore_errors=True)
    return row(f"refused call ({n}× `eval`; 0 processes spawned, recorded by an exec-logging stand-in)",
               denied, None, "≤ 1 ms", lambda a50, _: a50 <= 1.0)


# --------------------------------------------------------------------------- screenshots


def bench_screenshot(ab: Path, chromium, web, evidence: Path, n: int, notes: list[str]) -> list[str]:
    """A screenshot call with its image in the reply against the same call without (`--max-image-bytes
    0`: the reply carries only the path and a one-line note), interleaved, each server on its own
    session and tab. The difference is what reading the PNG back, encoding it (and shrinking it, over
    the bound) and carrying it to the client cost, the client's JSON parse included."""
    # Both log their `call phases` (symmetric), for the server's own share: the `image` phase.
    with_image = Server(ab, chromium.port, "127.0.0.1/32", evidence, phases=True)
    without = Server(ab, chromium.port, "127.0.0.1/32", evidence, extra=["--max-image-bytes", "0"], phases=True)
    rows = []
    try:
        cases = [("viewport, the form page", web.url("/form"), ["screenshot", "shot.png"]),
                 ("viewport of a noise page (a large PNG, within the bound)", web.url("/noise?w=1280&h=2000&seed=5"),
                  ["screenshot", "shot.png"]),
                 ("full page of 1280×2000 px noise, over the 4 MiB bound (shrunk)",
                  web.url("/noise?w=1280&h=2000&seed=5"), ["screenshot", "--full", "shot.png"])]
        for label, page, argv in cases:
            for srv, sid in ((with_image, "si"), (without, "sn")):
                expect(srv.call(sid, ["open", page])["exit_code"] == 0, f"open {page} failed")
                srv.call(sid, argv)  # warm
            times = {"si": [], "sn": []}
            sizes = {"si": [], "sn": []}
            shown = ""
            logged = len(with_image.phases())
            for _ in range(n):
                for srv, sid in ((with_image, "si"), (without, "sn")):
                    t = time.perf_counter()
                    result = srv.tool("browser-shell", {"session_id": sid, "argv": argv})
                    times[sid].append((time.perf_counter() - t) * 1000)
                    sizes[sid].append(srv.reply_bytes)
                    expect(result["structuredContent"]["exit_code"] == 0, f"screenshot failed: {result['structuredContent']}")
                    images = [c for c in result["content"] if c.get("type") == "image"]
                    expect(len(images) == (1 if sid == "si" else 0), f"{len(images)} images in a reply of {sid}")
                    note = result["structuredContent"]["stderr"]
                    if sid == "si" and "[browser-shell: " in note:
                        shown = note.rpartition("[browser-shell: ")[2].rstrip("]")
                    time.sleep(SETTLE_S)
            rows.append(row(f"`{' '.join(argv)}`, {label}: with image vs without", times["si"], times["sn"], "–"))
            image_ms = [e.get("image", 0) / 1000 for e in with_image.phases()[logged:]]
            notes.append(f"screenshot, {label}: reply p50 {statistics.median(sizes['si']):,.0f} bytes with the image, "
                         f"{statistics.median(sizes['sn']):,.0f} without (+{statistics.median(sizes['si']) - statistics.median(sizes['sn']):,.0f}); "
                         f"the server's `image` phase (read back, shrink, base64) p50 {statistics.median(image_ms):.2f} / "
                         f"p95 {pct(image_ms, 95):.2f} ms" + (f"; the server said: {shown}" if shown else ""))
        for srv, sid in ((with_image, "si"), (without, "sn")):
            srv.call(sid, ["close"])
    finally:
        with_image.close()
        without.close()
    return rows


# --------------------------------------------------------------------------- the default configuration


def main_thread_cpu_ms(pid: int) -> float:
    """CPU time (user + system) of a process's main thread: for Chromium, its browser main thread, where
    every new browser context, window and tab is made."""
    fields = Path(f"/proc/{pid}/task/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * 1000 / os.sysconf("SC_CLK_TCK")


def session_cpu_ms(sid: int) -> float:
    """CPU time of every live process in session `sid` (Chromium and all its renderers and helpers: the
    harness starts it as a session leader)."""
    total = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == sid:
            total += int(fields[11]) + int(fields[12])
    return total * 1000 / os.sysconf("SC_CLK_TCK")


def burst_at_once(srv: Server, sids: list[str], gap_s: float) -> list[float]:
    """New sessions arriving `gap_s` apart, each first call (`get url`) sent at its arrival without
    waiting for the earlier ones (several agents, one server): each call's time from its arrival."""
    sent: dict[int, float] = {}
    lock = threading.Lock()
    start = time.perf_counter() + 0.05

    def sender() -> None:
        for i, sid in enumerate(sids):
            arrival = start + gap_s * i
            time.sleep(max(0.0, arrival - time.perf_counter()))
            with lock:
                srv.ids += 1
                sent[srv.ids] = arrival
                srv.send({"jsonrpc": "2.0", "id": srv.ids, "method": "tools/call",
                          "params": {"name": "browser-shell", "arguments": {"session_id": sid, "argv": ["get", "url"]}}})

    thread = threading.Thread(target=sender)
    thread.start()
    done: dict[int, tuple[float, dict]] = {}
    while len(done) < len(sids):
        line = srv.proc.stdout.readline()
        expect(bool(line), "the server closed stdout during a burst")
        reply = json.loads(line)
        if "method" not in reply:
            done[reply["id"]] = (time.perf_counter(), reply)
    thread.join()
    times = []
    for rid, arrival in sent.items():
        at, reply = done[rid]
        result = reply.get("result", {}).get("structuredContent", {})
        expect(result.get("exit_code") == 0, f"burst call {rid}: {reply}")
        times.append((at - arrival) * 1000)
    return times


def bench_defaults(ab: Path, chromium, web, evidence: Path, n: int, notes: list[str], flags: str) -> list[str]:
    """A server with no tuning flags, as the README's client config starts it; `flags` names the
    Chromium's (the project's or plain)."""
    rows = []
    # A new session's first call, sessions 1 s apart, each closed after its call.
    srv = Server(ab, chromium.port, "127.0.0.1/32", evidence)
    firsts = []
    for i in range(n):
        arrival = time.perf_counter()
        reply = srv.call(f"d-ns-{i}", ["get", "url"])
        firsts.append((time.perf_counter() - arrival) * 1000)
        expect(reply["exit_code"] == 0, f"first call of d-ns-{i}: {reply}")
        srv.call(f"d-ns-{i}", ["close"])
        time.sleep(max(0.0, arrival + 1.0 - time.perf_counter()))
    srv.close()
    rows.append(row(f"default, {flags}: new session's first call, sessions 1 s apart", firsts, None, "≤ 20 ms",
                    lambda a50, _: a50 <= 20.0))

    # Two bursts on a new server: the first meets an empty pool, the second what the first taught it.
    srv = Server(ab, chromium.port, "127.0.0.1/32", evidence)
    srv.settle()
    cpu_before, all_before = main_thread_cpu_ms(chromium.pid), session_cpu_ms(chromium.pid)
    first = burst_at_once(srv, [f"d-b1-{i}" for i in range(BURST)], BURST_GAP_S)
    time.sleep(3.0)
    cpu_ms = main_thread_cpu_ms(chromium.pid) - cpu_before
    all_ms = session_cpu_ms(chromium.pid) - all_before
    records = audit_records(srv)
    bound = sum(1 for r in records if r.get("outcome") == "bound")
    contexts = (BURST - bound) + sum(1 for r in records if r.get("outcome") == "warming")
    second = burst_at_once(srv, [f"d-b2-{i}" for i in range(BURST)], BURST_GAP_S)
    for i in range(BURST):
        for b in (1, 2):
            srv.call(f"d-b{b}-{i}", ["close"])
    srv.close()
    per_context = cpu_ms / max(1, contexts)
    # Contexts are made one at a time on Chromium's main thread: what one costs there bounds how fast an
    # empty pool's burst can be served, whatever browser-shell does.
    rows.append(row(f"default, {flags}: first burst of {BURST} new sessions {BURST_GAP_S} s apart (empty pool), "
                    f"from arrival", first, None, f"bound: {per_context:.0f} ms of Chromium main thread per context"))
    rows.append(row(f"default, {flags}: second burst, 3 s later", second, None, "p50 ≤ 50 ms",
                    lambda a50, _: a50 <= 50.0))
    notes.append(f"default, {flags}: Chromium's browser main thread spent {cpu_ms:.0f} ms of CPU on the first burst and "
                 f"the 3 s after it, {contexts} new browser contexts ({BURST - bound} sessions' own, the rest warm-ups): "
                 f"{per_context:.0f} ms per context; all of Chromium's processes {all_ms:.0f} ms, "
                 f"{all_ms / max(1, contexts):.0f} ms per context, on a host of {os.cpu_count()} CPUs")

    # The smoke flow, default server against agent-browser direct, interleaved.
    srv = Server(ab, chromium.port, "127.0.0.1/32", evidence)
    steps: dict[tuple[str, str], list[float]] = {}
    bs_step = per_step(steps, "bsd", shell_step(srv, "smoke"))
    ab_step = per_step(steps, "ab", raw_step(ab, chromium.port, raw_env(srv), "smoke-raw"))
    cdp = chromium.port
    flavours = [
        Flavour("bsd", "browser-shell, no flags", cdp, lambda *a: agent_browser_flow(bs_step, *a),
                lambda: bs_step(["close"])),
        Flavour("ab", "agent-browser", cdp, lambda *a: agent_browser_flow(ab_step, *a), lambda: ab_step(["close"])),
    ]
    for f in flavours:
        f.warm_up(web)
    for samples in steps.values():  # in place: the flows hold the "press → /submit" lists
        samples.clear()
    for i in range(n * SMOKE_FACTOR):
        for f in flavours:
            f.once(web, i)
            time.sleep(SMOKE_THINK_S)
    srv.close()
    bsd, raw = flavours
    rows.append(row(f"default, {flags}: smoke flow ({len(bsd.times)}/{n * SMOKE_FACTOR} ok) vs agent-browser direct "
                    f"({len(raw.times)} ok)", bsd.times, raw.times, "ratio ≤ 1.00", lambda a50, b50: a50 / b50 <= 1.00))
    # `press` and `get url` are compared together: the navigation lands in whichever `get url` asks first.
    added = [(statistics.median(steps[("bsd", c)]) - statistics.median(steps[("ab", c)]), c)
             for c in ("open", "snapshot", "fill", "click", "press → /submit", "close")
             if steps.get(("bsd", c)) and steps.get(("ab", c))]
    if added:
        worst = max(added)
        notes.append(f"default, {flags}: " + step_breakdown(steps, "bsd")
                     + f" — most added: {worst[1]} {worst[0]:+.1f} ms (target ≤ +5)")
    for f in flavours:
        if f.failures:
            notes.append(f"default, {flags}, smoke flow {f.name}: {len(f.failures)} runs FAILED; first: {f.failures[0][:240]}")
    return rows


# --------------------------------------------------------------------------- a new session's first call


def audit_records(srv: Server) -> list[dict]:
    return [json.loads(line) for line in srv.audit.read_text().splitlines()] if srv.audit.exists() else []


def pool_ready(srv: Server) -> int:
    """Pooled daemons ready and not yet bound, as the server's audit log tells it."""
    outcomes = [r.get("outcome") for r in audit_records(srv) if r.get("phase") == "lifecycle"]
    return outcomes.count("pooled") - outcomes.count("bound")


def wait_pool(srv: Server, want: int = 1, deadline_s: float = 30.0) -> None:
    end = time.monotonic() + deadline_s
    while pool_ready(srv) < want:
        expect(time.monotonic() < end, "the pool never offered a ready daemon")
        time.sleep(0.02)


def bench_new_session(ab: Path, chromium, evidence: Path, n: int, notes: list[str]) -> list[str]:
    """A new session_id's first call (`get url`), three ways, interleaved, a new id every time: through
    browser-shell with a pool of 2 (each round first waits, untimed, until the pool is full again:
    sessions that arrive faster than the pool refills get the unpooled time), through browser-shell
    without a pool, and agent-browser direct. Each session is closed afterwards, untimed."""
    pooled = Server(ab, chromium.port, "127.0.0.1/32", evidence, ["--pool", "2"])
    plain = Server(ab, chromium.port, "127.0.0.1/32", evidence, ["--pool", "0"])
    env = raw_env(plain)
    raw = [str(ab), "--cdp", str(chromium.port), "--json", "--pin-tab"]

    def first_call(srv: Server, sid: str) -> float:
        t = time.perf_counter()
        reply = srv.call(sid, ["get", "url"])
        ms = (time.perf_counter() - t) * 1000
        expect(reply["exit_code"] == 0 and "about:blank" in reply["stdout"], f"first call of {sid}: {reply}")
        srv.call(sid, ["close"])
        return ms

    def first_direct(sid: str) -> float:
        t = time.perf_counter()
        done = subprocess.run(raw + ["--session", sid, "get", "url"], env=env, capture_output=True, text=True, timeout=60)
        ms = (time.perf_counter() - t) * 1000
        expect(done.returncode == 0, f"agent-browser direct, first call of {sid}: {done.stderr[:300]}")
        subprocess.run(raw + ["--session", sid, "close"], env=env, capture_output=True, timeout=60)
        return ms

    a, c, b = [], [], []
    wait_pool(pooled)
    first_call(pooled, "ns-warmup"); first_call(plain, "ns-warmup"); first_direct("ns-warmup")  # untimed
    for i in range(n):
        # The pool full again and its last standby spawned: the previous take's refill (a CPU-heavy
        # daemon start) must not run during any flavour's timed call.
        wait_pool(pooled, want=2)
        time.sleep(POOL_SETTLE_S)
        a.append(first_call(pooled, f"ns-pool-{i}"))
        time.sleep(SETTLE_S)
        c.append(first_call(plain, f"ns-plain-{i}"))
        time.sleep(SETTLE_S)
        b.append(first_direct(f"ns-raw-{i}"))
    burst = bench_burst(pooled)
    wait_pool(pooled)
    ready = [r["detail"] for r in audit_records(pooled) if r.get("outcome") == "pooled"]
    bound = {r["detail"]["daemon"] for r in audit_records(pooled) if r.get("outcome") == "bound"}
    rss = [vm_rss_kib(d["pid"]) for d in ready if d["daemon"] not in bound and Path(f"/proc/{d['pid']}").exists()]
    warm = [d["warm_ms"] for d in ready]
    server_rss = pooled.rss_kib()
    pooled.close()
    plain.close()
    ratio = statistics.median(b) / statistics.median(a) if a and b else 0.0
    notes.append(f"new session, first call: agent-browser direct / browser-shell with a pool = {ratio:.1f}× "
                 f"(target ≥ 5×); a pooled daemon took p50 {statistics.median(warm):.0f} ms to warm (off the call's path); "
                 f"RSS of each ready pooled daemon (a separate process): "
                 f"{', '.join(f'{k / 1024:.1f}' for k in rss) or 'n/a'} MiB; the pooled server itself: {server_rss / 1024:.1f} MiB")
    return [
        row("new session's first call (`get url`): browser-shell `--pool 2` vs agent-browser direct", a, b,
            "≤ 20 ms, ≥ 5× faster", lambda a50, b50: a50 <= 20.0 and b50 / a50 >= 5.0),
        row("new session's first call: browser-shell without a pool vs agent-browser direct", c, b, "–"),
        row(f"burst: {BURST} new sessions arriving {BURST_GAP_S} s apart on `--pool 2`, first call from its arrival",
            burst, None, "–"),
    ]


BURST, BURST_GAP_S = 8, 0.2


def bench_burst(pooled: Server) -> list[float]:
    """New sessions arriving faster than the pool refills: each first call's time from its arrival (the
    client sends one call at a time, so a slow one delays the next, as it would a single agent)."""
    wait_pool(pooled, want=2)
    time.sleep(POOL_SETTLE_S)
    times = []
    start = time.perf_counter()
    for i in range(BURST):
        arrival = start + BURST_GAP_S * i
        time.sleep(max(0.0, arrival - time.perf_counter()))
        reply = pooled.call(f"ns-burst-{i}", ["get", "url"])
        times.append((time.perf_counter() - arrival) * 1000)
        expect(reply["exit_code"] == 0, f"burst session {i}: {reply}")
    for i in range(BURST):
        pooled.call(f"ns-burst-{i}", ["close"])
    return times


# --------------------------------------------------------------------------- subresources


SUBRESOURCE_SIZES = (20, 100, 300)
GIF = bytes.fromhex("47494638396101000100800000000000ffffff21f90401000000002c00000000010001000002024401003b")


def subresource_site():
    """A keep-alive web server: /page/<token>/<n> lists n images /img/<token>/<i>.gif, none cacheable."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    import threading

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt: str, *args: object) -> None:
            pass

        def do_GET(self) -> None:  # noqa: N802
            parts = self.path.strip("/").split("/")
            if parts[0] == "page" and len(parts) == 3:
                token, count = parts[1], int(parts[2])
                body = ("<!doctype html><title>sub</title>"
                        + "".join(f'<img src="/img/{token}/{i}.gif">' for i in range(count))).encode()
                kind = "text/html"
            else:
                body, kind = GIF, "image/gif"
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(body)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd


def bench_subresources(ab: Path, chromium, evidence: Path, n: int, notes: list[str]) -> list[str]:
    site = subresource_site()
    origin = f"http://127.0.0.1:{site.server_address[1]}"
    srv = Server(ab, chromium.port, "127.0.0.1/32", evidence)
    env = raw_env(srv)
    raw = [str(ab), "--cdp", str(chromium.port), "--json", "--session", "sub-raw", "--pin-tab"]
    runs = max(5, n // 5)

    def through(url: str) -> float:
        t = time.perf_counter()
        reply = srv.call("sub", ["open", url])
        ms = (time.perf_counter() - t) * 1000
        expect(reply["exit_code"] == 0, f"browser-shell open {url}: {reply}")
        return ms

    def direct(url: str) -> float:
        t = time.perf_counter()
        done = subprocess.run(raw + ["open", url], env=env, capture_output=True, text=True, timeout=120)
        ms = (time.perf_counter() - t) * 1000
        expect(done.returncode == 0, f"agent-browser direct open {url}: {done.stderr[:300]}")
        return ms

    rows = []
    try:
        through(f"{origin}/page/warm-a/5"); direct(f"{origin}/page/warm-b/5")  # warm daemons, untimed
        for size in SUBRESOURCE_SIZES:
            a, b = [], []
            for i in range(runs):
                a.append(through(f"{origin}/page/s{size}a{i}/{size}"))
                time.sleep(SETTLE_S)
                b.append(direct(f"{origin}/page/s{size}b{i}/{size}"))
                time.sleep(SETTLE_S)
            target, met = ("ratio ≤ 1.10", lambda a50, b50: a50 / b50 <= 1.10) if size == 100 else ("–", None)
            rows.append(row(f"`open` of a page with {size} subresources, warm session: browser-shell vs "
                            "agent-browser direct", a, b, target, met))
    finally:
        srv.call("sub", ["close"])
        subprocess.run(raw + ["close"], env=env, capture_output=True, timeout=60)
        srv.close()
        site.shutdown()
    notes.append(f"subresources: {runs} loads of each size per flavour, interleaved; every request of the "
                 "browser-shell session's page went through its egress proxy")
    return rows


# --------------------------------------------------------------------------- smoke flow


class FlowFailed(Exception):
    pass


def expect(cond: bool, what: str) -> None:
    if not cond:
        raise FlowFailed(what)


def payload(stdout: str) -> dict:
    """agent-browser --json prints {success, data, error}; browser-shell hands back the same stdout."""
    try:
        out = json.loads(stdout)
    except ValueError:
        raise FlowFailed(f"stdout is not JSON: {stdout[:200]!r}") from None
    if isinstance(out, dict) and "success" in out and "data" in out:
        expect(out["success"] is True, f"agent-browser says: {out.get('error')}")
        return out["data"] or {}
    return out


def query_ref(snapshot: dict) -> str:
    # browser-shell leaves the page-controlled names out of `refs`; the snapshot text has them.
    refs = re.findall(r'textbox "Query" \[ref=(e\d+)\]', snapshot.get("snapshot") or "")
    expect(len(refs) == 1, f"no single textbox 'Query' in the snapshot: {snapshot.get('snapshot')}")
    return "@" + refs[0]


def until_submitted(get_url, expected: str, deadline_s: float = 10.0) -> str:
    """The flow's `get url` step: repeated (every flavour alike) until the page shows /submit,
    1 ms apart: a coarser pause (it was 10 ms) rounds each flavour's wait for the navigation up to
    its own multiple of poll + pause, a step of 5-7 % of the whole flow."""
    end = time.monotonic() + deadline_s
    while True:
        url = get_url()
        if "/submit" in url or time.monotonic() > end:
            expect(url == expected, f"final URL {url!r}, expected {expected!r}")
            return url
        time.sleep(0.001)


def agent_browser_flow(step, page: str, value: str, expected: str) -> None:
    """The smoke flow in agent-browser's grammar; `step(argv)` runs one command and returns its payload."""
    step(["open", page])
    ref = query_ref(step(["snapshot", "-i"]))
    step(["fill", ref, value])
    step(["click", ref])
    t = time.perf_counter()
    step(["press", "Enter"])
    until_submitted(lambda: step(["get", "url"]).get("url", ""), expected)
    # The navigation `press` starts takes the same time whoever asks; which `get url` waits for it
    # depends on how soon each flavour asks, so the breakdown also times the two together.
    getattr(step, "submitted", []).append((time.perf_counter() - t) * 1000)
    step(["close"])


def shell_step(srv: Server, sid: str):
    def step(argv: list[str]) -> dict:
        reply = srv.call(sid, argv)
        expect(reply["exit_code"] == 0, f"browser-shell {argv}: exit {reply['exit_code']}: {reply['stderr'][:300]}")
        return payload(reply["stdout"])
    return step


def raw_step(ab: Path, cdp: int, env: dict, session: str):
    base = [str(ab), "--cdp", str(cdp), "--json", "--session", session, "--pin-tab"]

    def step(argv: list[str]) -> dict:
        done = subprocess.run(base + argv, env=env, capture_output=True, text=True, timeout=60)
        expect(done.returncode == 0, f"agent-browser {argv}: exit {done.returncode}: {done.stderr[:300]}")
        return payload(done.stdout)
    return step


def pw_text(result: dict, what: str) -> str:
    text = "\n".join(c.get("text", "") for c in result.get("content", []) if c.get("type") == "text")
    expect(not result.get("isError"), f"playwright-mcp {what}: {text[:300]}")
    return text


def pw_href(pw: PlaywrightMcp) -> str:
    text = pw_text(pw.tool("browser_evaluate", {"function": "() => location.href"}), "browser_evaluate")
    found = re.search(r"^### Result\n(.*)$", text, re.M)
    expect(found is not None, f"browser_evaluate: no result in {text[:300]!r}")
    return json.loads(found.group(1))


def playwright_flow(pw: PlaywrightMcp, page: str, value: str, expected: str) -> None:
    """The same flow in playwright-mcp's tools; refs come from its snapshot, `get url` is an evaluate."""
    pw_text(pw.tool("browser_navigate", {"url": page}), "browser_navigate")
    snapshot = pw_text(pw.tool("browser_snapshot", {}), "browser_snapshot")
    found = re.search(r'textbox "Query" \[ref=([^\]]+)\]', snapshot)
    expect(found is not None, f"no textbox 'Query' in the snapshot: {snapshot[:500]!r}")
    target = {"element": "Query textbox", "target": found.group(1)}
    pw_text(pw.tool("browser_type", {**target, "text": value}), "browser_type")
    pw_text(pw.tool("browser_click", target), "browser_click")
    pw_text(pw.tool("browser_press_key", {"key": "Enter"}), "browser_press_key")
    until_submitted(lambda: pw_href(pw), expected)
    pw_text(pw.tool("browser_close", {}), "browser_close")


def page_tabs(cdp: int) -> list[dict]:
    with urllib.request.urlopen(f"http://127.0.0.1:{cdp}/json/list", timeout=5) as resp:
        return [t for t in json.loads(resp.read()) if t.get("type") == "page"]


def to_front(cdp: int, target: str) -> None:
    with urllib.request.urlopen(f"http://127.0.0.1:{cdp}/json/activate/{target}", timeout=5):
        pass


class Flavour:
    """One way of running the smoke flow, with its timings and failures.

    All flavours share one Chromium, whose headless window renders only its front tab: in a background
    tab, clicks wait out a 5 s "stable" timeout (agent-browser, playwright-mcp). Before each run
    (untimed) the tab this flavour used last is brought to the front, as if it had the browser to
    itself. browser-shell also does this on its own, before each command that needs it: that part
    is timed, it is browser-shell's cost."""

    def __init__(self, key: str, name: str, cdp: int, run, reset, settle=None):
        self.key, self.name, self.cdp, self.run, self.reset = key, name, cdp, run, reset
        self.settle = settle or (lambda: None)
        self.target: str | None = None
        self.warm_up_failures: list[str] = []
        self.times: list[float] = []
        self.failures: list[str] = []

    def once(self, web, i: int) -> bool:
        value = f"bench {self.key} {i}"
        page = web.url(f"/form?bench={self.key}")
        expected = web.url("/submit?" + urllib.parse.urlencode({"q": value}))
        if self.target:
            try:
                to_front(self.cdp, self.target)
            except OSError:
                pass  # closed since (a pooled session's tab goes with its `close`)
        self.settle()
        before = len(web.submitted())
        t = time.perf_counter()
        try:
            self.run(page, value, expected)
            elapsed = (time.perf_counter() - t) * 1000
            got = web.submitted()[before:]
            expect(got == [value], f"web server received {got!r}, expected [{value!r}]")
        except Exception as exc:  # noqa: BLE001 - any failure of the flow: counted, shown, not timed
            self.failures.append(f"run {i}: {type(exc).__name__}: {exc}")
            self.reset()
            return False
        finally:
            self.target = next((t["id"] for t in page_tabs(self.cdp) if t["url"] in (page, expected)), self.target)
        self.times.append(elapsed)
        return True

    def warm_up(self, web, tries: int = 3) -> None:
        """Untimed runs until one works (a first run may find its tab in the background)."""
        for k in range(tries):
            if self.once(web, -1 - k):
                break
        self.times.clear()
        self.warm_up_failures, self.failures = self.failures, []


def per_step(steps: dict, key: str, step):
    """Wrap a step function to record each command's time under (key, command), and each flow's `press`
    until /submit is seen under (key, "press → /submit"), for the breakdown."""
    def timed_step(argv: list[str]) -> dict:
        t = time.perf_counter()
        try:
            return step(argv)
        finally:
            steps.setdefault((key, " ".join(argv[:2]) if argv[0] == "get" else argv[0]), []).append((time.perf_counter() - t) * 1000)
    timed_step.submitted = steps.setdefault((key, "press → /submit"), [])
    return timed_step


def ratio_interval(a: list[float], b: list[float], rounds: int = 2000) -> tuple[float, float]:
    """5th and 95th percentile of median(a) / median(b) over bootstrap resamples of each list: how far
    the printed ratio could move with another sample of the same size (a fixed seed, so reruns agree)."""
    rng = random.Random(7)
    ratios = sorted(statistics.median(rng.choices(a, k=len(a))) / statistics.median(rng.choices(b, k=len(b)))
                    for _ in range(rounds))
    return ratios[rounds * 5 // 100], ratios[rounds * 95 // 100]


def step_breakdown(steps: dict, key: str) -> str:
    """Where the smoke flow's added time goes: p50 per command, browser-shell minus agent-browser direct,
    with the 90 % bootstrap interval of that difference (a 5 ms bound is within a run's spread)."""
    parts = []
    for cmd in ("open", "snapshot", "fill", "click", "press", "get url", "press → /submit", "close"):
        a, b = steps.get((key, cmd)), steps.get(("ab", cmd))
        if a and b:
            low, high = difference_interval(a, b)
            parts.append(f"{cmd} {statistics.median(a):.1f} vs {statistics.median(b):.1f} "
                         f"({statistics.median(a) - statistics.median(b):+.1f}, {low:+.1f}…{high:+.1f})")
    name = {"bsp": "browser-shell `--pool 2`", "bsd": "browser-shell with no flags"}.get(key, "browser-shell `--pool 0`")
    return f"smoke flow per command, p50 ms {name} vs agent-browser direct (added, 90 % interval): " + "; ".join(parts)


def bench_smoke(ab: Path, chromium, web, evidence: Path, n: int, notes: list[str]) -> list[str]:
    srv = Server(ab, chromium.port, "127.0.0.1/32", evidence, ["--pool", "0"])
    srvp = Server(ab, chromium.port, "127.0.0.1/32", evidence, ["--pool", "2"])
    pw = PlaywrightMcp(chromium.port)
    pw0 = PlaywrightMcp(chromium.port, ["--timeout-settle", "0"])
    steps: dict[tuple[str, str], list[float]] = {}
    bs_step = per_step(steps, "bs", shell_step(srv, "smoke"))
    bsp_step = per_step(steps, "bsp", shell_step(srvp, "smoke"))
    ab_step = per_step(steps, "ab", raw_step(ab, chromium.port, raw_env(srv), "smoke-raw"))

    def pool_settled() -> None:
        # Every flavour starts with a full pool: its refill (after the last `close`) never runs
        # during another flavour's timed run.
        wait_pool(srvp, want=2)
        time.sleep(POOL_SETTLE_S)

    def quietly(fn):
        def reset():
            try:
                fn()
            except Exception:  # noqa: BLE001 - best effort: leave a clean page for the next run
                pass
        return reset

    cdp = chromium.port
    flavours = [
        Flavour("bsp", "browser-shell --pool 2", cdp, lambda *a: agent_browser_flow(bsp_step, *a),
                quietly(lambda: bsp_step(["close"])), pool_settled),
        Flavour("bs", "browser-shell", cdp, lambda *a: agent_browser_flow(bs_step, *a), quietly(lambda: bs_step(["close"])),
                pool_settled),
        Flavour("ab", "agent-browser", cdp, lambda *a: agent_browser_flow(ab_step, *a), quietly(lambda: ab_step(["close"])),
                pool_settled),
        Flavour("pw", "playwright-mcp", cdp, lambda *a: playwright_flow(pw, *a), quietly(lambda: pw.tool("browser_close", {}))),
        Flavour("pw0", "playwright-mcp --timeout-settle 0", cdp, lambda *a: playwright_flow(pw0, *a),
                quietly(lambda: pw0.tool("browser_close", {}))),
    ]
    for f in flavours[:3]:
        f.warm_up(web)
    for samples in steps.values():  # in place: the flows hold the "press → /submit" lists
        samples.clear()
    for i in range(n):
        for k in range(SMOKE_FACTOR):
            for f in flavours[:3]:
                f.once(web, i * SMOKE_FACTOR + k)
    # playwright-mcp drives Chromium directly and may pick up any tab, a pooled one included: it runs
    # once the pooled server has stopped (and closed its pooled tabs).
    srvp.close()
    for f in flavours[3:]:
        f.warm_up(web)
    for i in range(n):
        for f in flavours[3:]:
            f.once(web, i)
    rss = {"browser-shell": srv.rss_kib(), "playwright-mcp": pw.rss_kib()}
    for proc in (srv, pw, pw0):
        proc.close()

    bsp, bs, raw, pwd, pws = flavours
    planned = {f.key: n * SMOKE_FACTOR if f in (bsp, bs, raw) else n for f in flavours}
    ok = lambda f: f"{len(f.times)}/{planned[f.key]} ok"  # noqa: E731
    rows = [
        row(f"smoke flow: browser-shell `--pool 2` ({ok(bsp)}) vs agent-browser direct, one process per step ({ok(raw)})",
            bsp.times, raw.times, "ratio ≤ 1.00", lambda a50, b50: a50 / b50 <= 1.00),
        row(f"smoke flow: browser-shell without a pool ({ok(bs)}) vs agent-browser direct", bs.times, raw.times, "–"),
        row(f"smoke flow: browser-shell `--pool 2` vs playwright-mcp over CDP, defaults ({ok(pwd)}; run after)", bsp.times,
            pwd.times, "–"),
        row(f"smoke flow: browser-shell `--pool 2` vs playwright-mcp `--timeout-settle 0` ({ok(pws)}; run after)", bsp.times,
            pws.times, "–"),
    ]
    for f in (bsp, bs):
        if f.times and raw.times:
            low, high = ratio_interval(f.times, raw.times)
            notes.append(f"smoke flow ratio {f.name} / agent-browser direct: {statistics.median(f.times) / statistics.median(raw.times):.3f}, "
                         f"90 % bootstrap interval {low:.3f}–{high:.3f} ({len(f.times)} and {len(raw.times)} runs)")
    notes.append(step_breakdown(steps, "bsp"))
    notes.append(step_breakdown(steps, "bs"))
    notes.append(f"RSS after the smoke runs: browser-shell {rss['browser-shell'] / 1024:.1f} MiB (its agent-browser daemons "
                 f"are separate processes), playwright-mcp {rss['playwright-mcp'] / 1024:.1f} MiB")
    one_line = lambda text: " ".join(text.split())[:240]  # noqa: E731
    for f in flavours:
        if f.failures:
            notes.append(f"smoke flow, {f.name}: {len(f.failures)} of {n} runs FAILED (not timed); first: {one_line(f.failures[0])}")
        if f.warm_up_failures:
            notes.append(f"smoke flow, {f.name}: {len(f.warm_up_failures)} untimed warm-up tr{'y' if len(f.warm_up_failures) == 1 else 'ies'} "
                         f"failed before one worked; first: {one_line(f.warm_up_failures[0])}")
    return rows


# --------------------------------------------------------------------------- evidence per action


def evidence_breakdown(steps: dict, key: str, base: str) -> str:
    """Per command of the smoke flow: p50 with `key`'s evidence level minus with `base`'s, and the 90 %
    bootstrap interval of that difference."""
    parts = []
    for cmd in ("open", "snapshot", "fill", "click", "press", "get url", "press → /submit", "close"):
        a, b = steps.get((key, cmd)), steps.get((base, cmd))
        if a and b:
            low, high = difference_interval(a, b)
            parts.append(f"{cmd} {statistics.median(a) - statistics.median(b):+.1f} ({low:+.1f}…{high:+.1f})")
    # A `get url` that names the old page returns at once and is asked again: its p50 alone hides
    # how many were asked; `press → /submit` is the time the flow waited either way.
    polls = {level: len(steps.get((level, "get url"), [])) / max(1, len(steps.get((level, "press → /submit"), [])))
             for level in (key, base)}
    return (f"smoke flow per command, `--evidence {key}` minus `--evidence {base}`, p50 ms (90 % interval): "
            + "; ".join(parts) + f"; `get url` calls per flow {polls[key]:.2f} vs {polls[base]:.2f}")


def quietly_close(step) -> None:
    """Best effort: leave a clean page for the next run."""
    try:
        step(["close"])
    except Exception:  # noqa: BLE001 - a failed run's session may be gone already
        pass


def rounds(f: Flavour, web, r: int) -> None:
    """Round `r` of flavour `f`: SMOKE_FACTOR runs of the smoke flow."""
    for k in range(SMOKE_FACTOR):
        f.once(web, r * SMOKE_FACTOR + k)


def store_bytes(audit: Path) -> tuple[int, int]:
    """The image store's bytes beside `audit`, and the number of evidence records its log holds."""
    store = Path(f"{audit}.evidence")
    held = sum(f.stat().st_size for f in store.iterdir()) if store.is_dir() else 0
    text = audit.read_text() if audit.exists() else ""
    return held, text.count('"phase":"evidence"')


def raw_alone_env() -> tuple[dict, Path]:
    """An environment for agent-browser direct with no server beside it (the dirs `raw_env_at` names,
    and the empty config a server writes there), and its base dir."""
    base = Path(tempfile.mkdtemp(prefix="bsb-raw", dir="/tmp"))
    (base / "s" / "home").mkdir(parents=True)
    (base / "s" / "sock").mkdir(mode=0o700)
    (base / "s" / "agent-browser.config.json").write_text("{}\n")
    return raw_env_at(base), base


def bench_evidence(ab: Path, chromium, web, evidence: Path, n: int, notes: list[str]) -> list[str]:
    """The pooled smoke flow at each `--evidence` level against agent-browser direct, one server at a
    time: servers side by side on one Chromium slow each other's flows (three at `off` differed by up to
    1.8× with their start order), so each round starts one server per level, in an order that rotates,
    runs its flows, and closes it before the next; agent-browser direct runs with no server beside it."""
    levels = ("off", "digests", "images")
    steps: dict[tuple[str, str], list[float]] = {}
    env, env_base = raw_alone_env()
    raw = per_step(steps, "ab", raw_step(ab, chromium.port, env, "evidence-raw"))
    cdp = chromium.port
    flavours = {level: Flavour(level, f"browser-shell --pool 2 --evidence {level}", cdp, None, None)
                for level in levels}
    flavours["ab"] = Flavour("ab", "agent-browser", cdp, lambda *a: agent_browser_flow(raw, *a),
                             lambda: quietly_close(raw))
    flavours["ab"].warm_up(web)
    held = records = 0
    for r in range(n + 1):  # round 0 warms each level up, untimed
        order = [*levels, "ab"]
        order = order[r % len(order):] + order[:r % len(order)]
        for key in order:
            f = flavours[key]
            if key == "ab":
                rounds(f, web, r)
                continue
            srv = Server(ab, cdp, "127.0.0.1/32", evidence, ["--pool", "2", "--evidence", key])
            try:
                step = per_step(steps, key, shell_step(srv, "evidence"))
                f.run = lambda *a, step=step: agent_browser_flow(step, *a)
                f.reset = lambda step=step: quietly_close(step)
                f.settle = lambda srv=srv: (wait_pool(srv, want=2), time.sleep(POOL_SETTLE_S))
                rounds(f, web, r)
            finally:
                srv.close()
            if key == "images":
                got = store_bytes(srv.audit)
                held, records = held + got[0], records + got[1]
        if r == 0:
            for f in flavours.values():
                f.times.clear()
                f.warm_up_failures, f.failures = f.failures, []
            for samples in steps.values():
                samples.clear()
    shutil.rmtree(env_base, ignore_errors=True)
    off, digests, images, direct = flavours.values()
    rows = [
        row("smoke flow, `--pool 2 --evidence images` vs `--evidence off`", images.times, off.times, "ratio ≤ 1.25",
            lambda a50, b50: a50 / b50 <= 1.25),
        row("smoke flow, `--pool 2 --evidence digests` vs `--evidence off`", digests.times, off.times, "ratio ≤ 1.05",
            lambda a50, b50: a50 / b50 <= 1.05),
        row("smoke flow, `--pool 2 --evidence off` vs agent-browser direct", off.times, direct.times, "–"),
        row("smoke flow, `--pool 2 --evidence images` vs agent-browser direct", images.times, direct.times, "–"),
    ]
    notes.append(evidence_breakdown(steps, "images", "off"))
    notes.append(evidence_breakdown(steps, "digests", "off"))
    if records:
        notes.append(f"evidence store after the images runs: {held:,} bytes for {records} evidence records "
                     f"({held / records:,.0f} bytes per action; an image is stored once however many records name it)")
    for f in flavours.values():
        if f.failures:
            notes.append(f"evidence smoke flow, {f.name}: {len(f.failures)} runs FAILED (not timed); first: "
                         f"{' '.join(f.failures[0].split())[:240]}")
    return rows


# --------------------------------------------------------------------------- cold start and idle RSS


def cold_start(make) -> tuple[float, float]:
    """(ms from spawn to the first tools/list reply, MiB VmRSS after 4 more tools/list)."""
    mcp = make()
    reply = mcp.list_tools()
    ms = (time.perf_counter() - mcp.started) * 1000
    assert reply.get("result", {}).get("tools"), reply
    for _ in range(4):
        mcp.list_tools()
    mcp.settle()
    rss = mcp.rss_kib() / 1024
    mcp.close()
    return ms, rss


def bench_peer(ab: Path, chromium, evidence: Path, n: int, notes: list[str]) -> list[str]:
    # Every restart goes on with one log, as under an MCP Hub; its key is created by the untimed first start.
    restarts = evidence / "audit-restarts.jsonl"
    makers = {
        "browser-shell": lambda: Server(ab, chromium.port, "127.0.0.1/32", evidence, audit_log=restarts),
        "browser-shell first": lambda: Server(ab, chromium.port, "127.0.0.1/32", evidence),
        "node": lambda: NodePeer(ab),
        "playwright-mcp": lambda: PlaywrightMcp(chromium.port),
    }
    ms: dict[str, list[float]] = {k: [] for k in makers}
    rss: dict[str, list[float]] = {k: [] for k in makers}
    for make in makers.values():  # warm the page cache, untimed
        cold_start(make)
    # The order rotates each round, so that every flavour follows every other equally often: a start right
    # after playwright-mcp's exit measured up to ~1 ms slower (docs/benchmarks.md, "A shorter seccomp path").
    flavours = list(makers.items())
    for round_ in range(3 * n):
        shift = round_ % len(flavours)
        for name, make in flavours[shift:] + flavours[:shift]:
            t, r = cold_start(make)
            ms[name].append(t)
            rss[name].append(r)
    ten_ms = lambda a50, _: a50 <= 10.0  # noqa: E731
    eight_mib = lambda a50, _: a50 <= 8.0  # noqa: E731
    return [
        row("cold start → first `tools/list` reply (incl. initialize, confined self-test), again on its audit log: "
            "browser-shell vs Node SDK peer", ms["browser-shell"], ms["node"], "≤ 10 ms", ten_ms),
        row("cold start → first `tools/list` reply, first start on a new audit log (creates its key): "
            "browser-shell vs Node SDK peer", ms["browser-shell first"], ms["node"], "≤ 10 ms", ten_ms),
        row("cold start → first `tools/list` reply, again on its audit log: browser-shell vs playwright-mcp",
            ms["browser-shell"], ms["playwright-mcp"],
            "≤ 10 ms", ten_ms),
        row("idle RSS in **MiB** after start + 5 `tools/list` (+ `started`): browser-shell vs Node SDK peer", rss["browser-shell"],
            rss["node"], "≤ 8 MiB", eight_mib),
        row("idle RSS in **MiB** after start + 5 `tools/list` (+ `started`): browser-shell vs playwright-mcp", rss["browser-shell"],
            rss["playwright-mcp"], "≤ 8 MiB", eight_mib),
    ]


# --------------------------------------------------------------------------- main


def example(crate: str, name: str, *args: str) -> str:
    out = subprocess.run(["cargo", "run", "--release", "-q", "-p", crate, "--example", name, *args],
                         cwd=ROOT, capture_output=True, text=True, check=True)
    return out.stdout.strip()


def version(*argv: str) -> str:
    try:
        return subprocess.run(list(argv), capture_output=True, text=True, timeout=30).stdout.strip()
    except OSError:
        return f"{argv[0]}: not found"


def host_facts(ab: Path, n: int, only: list[str], now: time.struct_time) -> dict:
    """What the header prints: when, where, which versions, how many runs."""
    versions = [version(str(BIN), "--version"), version(str(ab), "--version"), version("chromium", "--version")]
    if {"smoke", "peer"} & set(only):
        sdk = json.loads((PEERS / "node_modules" / "@modelcontextprotocol" / "sdk" / "package.json").read_text())["version"]
        versions += [f"node {version(node(), '--version')}",
                     f"playwright-mcp {version(node(), str(PLAYWRIGHT_MCP), '--version').removeprefix('Version ')}",
                     f"@modelcontextprotocol/sdk {sdk}"]
    return {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", now), "host": platform.node(), "cpus": os.cpu_count(),
            "platform": platform.platform(), "versions": versions, "n": n,
            "warm_pairs": n * WARM_FACTOR, "smoke_runs": n * SMOKE_FACTOR, "cold_starts": 3 * n, "sections": only}


def header(facts: dict, now: time.struct_time) -> list[str]:
    n = facts["n"]
    return [f"# browser-shell benchmark — {time.strftime('%Y-%m-%d %H:%M UTC', now)}",
            f"{facts['host']}: {facts['cpus']} CPUs, {facts['platform']}; {'; '.join(facts['versions'])}; "
            f"N={n} interleaved (warm calls: {n * WARM_FACTOR}; smoke flow: {n * SMOKE_FACTOR} runs of browser-shell and agent-browser direct, {n} of each playwright-mcp; cold starts: {3 * n} of each); sections: {','.join(facts['sections'])}\n"]


def write_results(path: Path, facts: dict, notes: list[str], outputs: dict[str, str]) -> None:
    """The run as data: the header's facts, every row, the notes, the audit/confine examples' output."""
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {**facts, "rows": RESULTS, "notes": notes, "outputs": outputs}
    path.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")
    print(f"[bench] results written to {path}", file=sys.stderr)


def verify_evidence(evidence: Path) -> str:
    """`browser-shell audit verify` on the audit log of every server the bench ran; the logs are kept
    only if one fails (BENCH_KEEP_EVIDENCE=1 keeps them anyway)."""
    logs = sorted(evidence.glob("audit-*.jsonl"))
    failed = []
    for log in logs:
        run = subprocess.run([str(BIN), "audit", "verify", str(log)], capture_output=True, text=True)
        if run.returncode != 0:
            failed.append(f"{log}: {(run.stdout + run.stderr).strip()[-300:]}")
    if failed or os.environ.get("BENCH_KEEP_EVIDENCE"):
        where = f"; kept in {evidence}"
    else:
        shutil.rmtree(evidence, ignore_errors=True)
        where = ""
    verdict = "all intact" if not failed else f"{len(failed)} NOT intact:\n  " + "\n  ".join(failed)
    return f"audit logs of the bench's servers: {len(logs)} verified with `browser-shell audit verify`, {verdict}{where}"


def plain_defaults_here(n: int, out: Path) -> None:
    """Inside the namespace: the default configuration's rows on a plain-flags Chromium, as data."""
    # A plain-flags Chromium resolves and dials Google's services by itself: refuse to start one
    # anywhere but a network namespace whose only interface is loopback (/proc/net/dev is this
    # process's own namespace).
    interfaces = {line.split(":")[0].strip() for line in Path("/proc/net/dev").read_text().splitlines()[2:]}
    if interfaces != {"lo"}:
        sys.exit(f"--plain-chromium runs only in a loopback-only network namespace (found {sorted(interfaces)}); "
                 "tests/bench/run starts it in `unshare -n` itself")
    ab = Path(os.environ["BROWSER_SHELL_AGENT_BROWSER"])
    evidence = Path(tempfile.mkdtemp(prefix="bsb-audit-", dir="/var/tmp"))
    notes: list[str] = []
    with tempfile.TemporaryDirectory(prefix="bsb-chr") as work, harness.run_chromium(Path(work), plain=True) as chromium, \
            harness.run_web_server() as web:
        rows = bench_defaults(ab, chromium, web, evidence, n, notes, "plain-flags Chromium")
    notes.append(verify_evidence(evidence))
    out.write_text(json.dumps({"rows": rows, "notes": notes, "results": RESULTS}))


def plain_defaults(n: int) -> tuple[list[str], list[str]]:
    """The default configuration's rows on a Chromium with plain flags, which resolves and dials Google's
    services by itself: measured in a loopback-only network namespace (`unshare -n`, root), where
    nothing can leave."""
    out = Path(tempfile.mkstemp(prefix="bsb-plain-", suffix=".json", dir="/var/tmp")[1])
    script = 'ip link set lo up && exec "$0" "$@"'
    try:
        done = subprocess.run(["unshare", "-n", "--", "sh", "-c", script, sys.executable, __file__, str(n),
                               "--plain-chromium", "--out", str(out)], timeout=3600)
        if done.returncode != 0:
            return [], [f"plain-flags Chromium rows not measured: the run in `unshare -n` exited {done.returncode}"]
        data = json.loads(out.read_text())
    except (OSError, ValueError, subprocess.TimeoutExpired) as exc:
        return [], [f"plain-flags Chromium rows not measured: {exc}"]
    finally:
        out.unlink(missing_ok=True)
    RESULTS.extend(data["results"])
    return data["rows"], data["notes"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("n", nargs="?", type=int, default=50, help="runs per measurement (default 50)")
    parser.add_argument("--only", default=",".join(SECTIONS), help=f"comma-separated subset of {','.join(SECTIONS)}")
    parser.add_argument("--out", type=Path, default=None,
                        help="where to write the run's results as JSON (default target/bench/results-<UTC time>.json)")
    parser.add_argument("--plain-chromium", action="store_true",
                        help="(internal) measure only the default configuration's rows on a Chromium with plain flags, "
                             "writing them to --out; the bench runs this itself inside `unshare -n`")
    args = parser.parse_args()
    if args.plain_chromium:
        return plain_defaults_here(args.n, args.out)
    only = [s for s in SECTIONS if s in args.only.split(",")]
    unknown = set(args.only.split(",")) - set(SECTIONS)
    if unknown:
        parser.error(f"unknown section(s) {sorted(unknown)}; known: {','.join(SECTIONS)}")
    n = args.n

    ab = Path(os.environ["BROWSER_SHELL_AGENT_BROWSER"])
    evidence = Path(tempfile.mkdtemp(prefix="bsb-audit-", dir="/var/tmp"))
    rows: list[str] = []
    default_rows: list[str] = []
    notes: list[str] = []
    if {"defaults", "warm", "newsession", "subresources", "smoke", "evidence", "peer", "screenshot"} & set(only):
        with tempfile.TemporaryDirectory(prefix="bsb-chr") as work, harness.run_chromium(Path(work)) as chromium, \
                harness.run_web_server() as web:
            # Cold starts first: after the smoke section, Chromium spends seconds closing tabs and
            # reaping renderers, and on two vCPUs that shows in a 10 ms measurement.
            if "peer" in only:
                rows += bench_peer(ab, chromium, evidence, n, notes)
            if "defaults" in only:
                default_rows += bench_defaults(ab, chromium, web, evidence, n, notes, "project-flags Chromium")
            if "warm" in only:
                rows += bench_warm(ab, chromium, web, evidence, n, notes)
            if "newsession" in only:
                rows += bench_new_session(ab, chromium, evidence, n, notes)
            if "subresources" in only:
                rows += bench_subresources(ab, chromium, evidence, n, notes)
            if "smoke" in only:
                rows += bench_smoke(ab, chromium, web, evidence, n, notes)
            if "evidence" in only:
                rows += bench_evidence(ab, chromium, web, evidence, n, notes)
            if "screenshot" in only:
                rows += bench_screenshot(ab, chromium, web, evidence, n, notes)

    if "defaults" in only:
        plain_rows, plain_notes = plain_defaults(n)
        default_rows += plain_rows
        notes += plain_notes
    # The configuration users run comes first, then the tuned ones.
    rows = default_rows + rows
    now = time.gmtime()
    facts = host_facts(ab, n, only, now)
    out = args.out or ROOT / "target" / "bench" / f"results-{time.strftime('%Y%m%dT%H%M%SZ', now)}.json"
    outputs: dict[str, str] = {}
    print("\n".join(header(facts, now)))
    if rows:
        print("| measurement (ms, p50 / p95) | browser-shell | other (named in the row) | added p50 | ratio | target |")
        print("|---|---|---|---|---|---|")
        for r in rows:
            print(r)
        print()
    for note in notes:
        print(note)
    print(verify_evidence(evidence))
    if "audit" in only:
        print("\naudit: synced appends (group commit) + OTLP copy, `cargo run --release --example audit_otlp_throughput`"
              " (target ≥ 2,000 events/s at 32 writers, 0 lost):")
        outputs["audit"] = example("browser-shell", "audit_otlp_throughput", "/var/tmp", "100")
        print(outputs["audit"])
    if "confine" in only:
        trampoline = BIN.parent / "hardening-trampoline"
        print("\nconfinement cost, `cargo run --release -p hardening --example spawn_cost 300 target/release/hardening-trampoline`"
              " (the trampoline every agent-browser spawn runs):")
        outputs["confine"] = example("hardening", "spawn_cost", "300", str(trampoline))
        print(outputs["confine"])
        print("\nthe same with browser-shell's own binary as the trampoline (its fallback when installed alone):")
        outputs["confine_own_binary"] = example("hardening", "spawn_cost", "300", str(BIN))
        print(outputs["confine_own_binary"])
    write_results(out, facts, notes, outputs)


if __name__ == "__main__":
    main()
