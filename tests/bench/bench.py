"""browser-shell benchmark: what the wrapper costs on top of agent-browser, side by side.

Measurements are interleaved (A, B, A, B, …) against one real headless Chromium; medians and p95 of
N runs; the table is the output. No assertion: targets are printed next to the results.

    tests/bench/run [N]        (builds release binaries, starts Chromium on a free loopback port)
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "e2e"))
import harness  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
BIN = ROOT / "target" / "release" / "browser-shell"
N = int(sys.argv[1]) if len(sys.argv) > 1 else 50


def pct(values: list[float], p: int) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, len(values) * p // 100)]


class Server:
    """browser-shell over stdio with a raw JSON-RPC client (no client library in the timing)."""

    def __init__(self, ab: Path, cdp: int, web_cidr: str, evidence: Path, extra: list[str] | None = None):
        self.base = Path(tempfile.mkdtemp(prefix="bsb", dir="/tmp"))
        (self.base / "policy.json").write_text(json.dumps({"open": {"allow_private_cidrs": [web_cidr]}}))
        self.audit = evidence / f"audit-{self.base.name}.jsonl"
        self.started = time.perf_counter()
        self.proc = subprocess.Popen(
            [str(BIN), "serve", "--agent-browser", str(ab), "--cdp-port", str(cdp), "--state-dir", str(self.base / "s"),
             "--output-dir", str(self.base / "o"), "--audit-log", str(self.audit), "--policy", str(self.base / "policy.json"),
             *(extra or [])],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
            env={"PATH": "/usr/bin:/bin"},
        )
        self.ids = 0
        self.rpc({"jsonrpc": "2.0", "id": 0, "method": "initialize",
                  "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bench", "version": "0"}}})

    def rpc(self, message: dict) -> dict:
        self.proc.stdin.write(json.dumps(message) + "\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())

    def call(self, sid: str, argv: list) -> dict:
        self.ids += 1
        reply = self.rpc({"jsonrpc": "2.0", "id": self.ids, "method": "tools/call",
                          "params": {"name": "browser-shell", "arguments": {"session_id": sid, "argv": argv}}})
        return reply["result"]["structuredContent"]

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


def raw_env(srv: Server) -> dict:
    s = srv.base / "s"
    return {"HOME": str(s / "home"), "PATH": "/usr/bin:/bin", "AGENT_BROWSER_CONFIG": str(s / "agent-browser.config.json"),
            "AGENT_BROWSER_SOCKET_DIR": str(s / "sock"), "AGENT_BROWSER_NO_VERSION_CHECK": "1", "AGENT_BROWSER_IDLE_TIMEOUT_MS": "600000"}


def timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return (time.perf_counter() - t) * 1000


def row(name: str, a: list[float], b: list[float] | None, target: str) -> str:
    a50, a95 = statistics.median(a), pct(a, 95)
    if b is None:
        return f"| {name} | {a50:.2f} / {a95:.2f} | – | – | – | {target} |"
    b50, b95 = statistics.median(b), pct(b, 95)
    return f"| {name} | {a50:.2f} / {a95:.2f} | {b50:.2f} / {b95:.2f} | {a50 - b50:+.2f} | {a50 / b50:.2f} | {target} |"


def main() -> None:
    ab = Path(os.environ["BROWSER_SHELL_AGENT_BROWSER"])
    evidence = Path(tempfile.mkdtemp(prefix="bsb-audit-", dir="/var/tmp"))
    with tempfile.TemporaryDirectory(prefix="bsb-chr") as work, harness.run_chromium(Path(work)) as chromium, harness.run_web_server() as web:
        srv = Server(ab, chromium.port, "127.0.0.1/32", evidence)
        page = web.url("/form")
        assert srv.call("b1", ["open", page])["exit_code"] == 0
        raw = [str(ab), "--cdp", str(chromium.port), "--json", "--session", "b1", "--pin-tab"]
        env = raw_env(srv)

        def through(argv):
            return lambda: srv.call("b1", argv)

        def direct(argv):
            return lambda: subprocess.run(raw + argv, env=env, capture_output=True, check=True)

        rows = []
        for argv, target in ((["get", "url"], "added ≤ 1.0 ms"), (["snapshot", "-i"], "added ≤ 1.0 ms")):
            through(argv)(); direct(argv)()  # warm
            a, b = [], []
            for _ in range(N):
                a.append(timed(through(argv)))
                b.append(timed(direct(argv)))
            rows.append(row(f"warm `{' '.join(argv)}`: browser-shell vs agent-browser", a, b, target))

        denied = [timed(lambda: srv.call("b1", ["eval", "1"])) for _ in range(N)]
        rows.append(row("refused call (nothing spawned)", denied, None, "≤ 1 ms"))
        listing = [timed(lambda: srv.rpc({"jsonrpc": "2.0", "id": 9, "method": "tools/list"})) for _ in range(N)]
        rows.append(row("`tools/list` round trip (transport floor)", listing, None, "–"))
        rss = next(int(l.split()[1]) for l in Path(f"/proc/{srv.proc.pid}/status").read_text().splitlines() if l.startswith("VmRSS:"))
        srv.close()

        cold = []
        for _ in range(max(5, N // 5)):
            t = time.perf_counter()
            s = Server(ab, chromium.port, "127.0.0.1/32", evidence)
            s.rpc({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
            cold.append((time.perf_counter() - t) * 1000)
            s.close()
        rows.append(row("cold start → first `tools/list` reply (incl. confined self-test)", cold, None, "≤ 10 ms"))

    def example(crate: str, name: str, *args: str) -> str:
        out = subprocess.run(["cargo", "run", "--release", "-q", "-p", crate, "--example", name, *args],
                             cwd=ROOT, capture_output=True, text=True, check=True)
        return out.stdout.strip()

    versions = subprocess.run([str(BIN), "--version"], capture_output=True, text=True).stdout.strip()
    abv = subprocess.run([str(ab), "--version"], capture_output=True, text=True).stdout.strip()
    chrome = subprocess.run(["chromium", "--version"], capture_output=True, text=True).stdout.strip()
    print(f"# browser-shell benchmark — {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print(f"{platform.node()}: {os.cpu_count()} CPUs, {platform.platform()}; {versions}; {abv}; {chrome}; N={N} interleaved\n")
    print("| measurement (ms, p50 / p95) | browser-shell | agent-browser direct | added p50 | ratio | target |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(r)
    print(f"\nidle RSS of the server after the run: {rss / 1024:.1f} MiB (target ≤ 8 MiB)\n")
    print("audit durable writes (group commit), `cargo run --release -p audit --example throughput`:")
    print(example("audit", "throughput", "/var/tmp", "100"))
    print("\nconfinement cost, `cargo run --release -p hardening --example spawn_cost`:")
    print(example("hardening", "spawn_cost", "300"))


if __name__ == "__main__":
    main()
