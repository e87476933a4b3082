"""The browser-shell side of the end-to-end suite: configure, start, talk to and clean up after a
`browser-shell serve` process. No fixtures here: conftest.py wraps these in fixtures.

* `ServerConfig` / `new_server_config`: one server instance's flags, private dirs and environment.
* `BlockingServer`: a synchronous facade whose MCP session (the official `mcp` client over stdio)
  lives in an anyio event loop on a helper thread (anyio blocking portal). Tests stay plain sync
  functions; async code (concurrency, cancellation) runs through `server.run(async_fn, ...)`.
* `call(session, sid, argv, timeout_sec=None)`: the async helper every tool call goes through. It
  checks the reply envelope (structuredContent == json.loads(content[0].text), required keys,
  echoed session id) and returns `(is_error, structured_dict)`.
* `cleanup_server`: stops whatever a server instance left behind and removes its dirs.
* `Canary` / `make_canary`: an `--agent-browser` stand-in script that records each exec.
* `STDERR_LOGS`: the browser-shell stderr logs whose tails a failing test's report carries.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import stat
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.from_thread import BlockingPortal, start_blocking_portal

from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

import harness

REPLY_KEYS = ("session_id", "exit_code", "stdout", "stderr")


def log(msg: str) -> None:
    print(f"[e2e] {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- stderr logs for reports


class StderrLogs:
    """The browser-shell stderr logs opened during the current test, and long-lived ones (a
    module-scoped server's): on a failing test, conftest attaches the tail of each to the report."""

    def __init__(self) -> None:
        self.this_test: list[Path] = []
        self.long_lived: list[Path] = []

    def new_test(self) -> None:
        self.this_test.clear()

    def watch(self, path: Path) -> None:
        """A log of the current test (forgotten when the next test starts)."""
        self.this_test.append(path)

    def watch_long_lived(self, path: Path) -> None:
        self.long_lived.append(path)

    def forget_long_lived(self, path: Path) -> None:
        self.long_lived.remove(path)

    def all(self) -> list[Path]:
        """Every log to report, each once, in the order they were opened."""
        return list(dict.fromkeys([*self.this_test, *self.long_lived]))


STDERR_LOGS = StderrLogs()


# --------------------------------------------------------------------------- binaries


@dataclass(frozen=True)
class Binaries:
    server: Path
    agent_browser: Path


def require_executable(path: Path, what: str, hint: str) -> Path:
    """Fail the whole run up front (not as 200 confusing errors) when a binary is missing."""
    if not (path.is_file() and os.access(path, os.X_OK)):
        pytest.fail(f"{what} not found/executable at {path} ({hint})", pytrace=False)
    return path


# --------------------------------------------------------------------------- one server instance


@dataclass
class ServerConfig:
    server_bin: Path
    agent_browser: Path
    cdp_port: int
    base: Path
    # Outside every writable root of the confinement (not /tmp): the server refuses an audit log
    # the confined agent-browser could edit.
    evidence: Path
    env_extra: dict[str, str] = field(default_factory=dict)
    extra_read_exec: list[str] = field(default_factory=list)
    audit_log_path: Path | None = None
    extra_args: list[str] = field(default_factory=list)
    # The URL policy written for this server; None: no file (the built-in default policy).
    # Tests serve pages on 127.0.0.1, which the default refuses as loopback.
    policy_json: dict | None = field(default_factory=lambda: {"open": {"allow_private_cidrs": ["127.0.0.1/32"]}})
    # Where it is written; None: in `evidence`. Not under /tmp, even when no file is written: the
    # server refuses a policy path the confined agent-browser could write (or create).
    policy_path: Path | None = None
    # Pass --allow-child-writable-inputs: see binaries_under_tmp.
    allow_child_writable_inputs: bool = False
    # `--pool`: 0 unless a test says otherwise (None: the server's own default, `auto`). Most tests
    # count daemons, tabs and records exactly; the pool's own tests and the tests of the README's
    # configurations run it.
    pool: str | None = "0"
    # The client's answer to the server's elicitation requests (async (context, params) -> result);
    # None: the client declares no elicitation capability.
    elicitation_callback: Any = None

    @property
    def state_dir(self) -> Path:
        return self.base / "state"

    @property
    def output_dir(self) -> Path:
        return self.base / "out"

    @property
    def audit_log(self) -> Path:
        return self.audit_log_path or self.evidence / "audit.jsonl"

    @property
    def policy(self) -> Path:
        return self.policy_path or self.evidence / "policy.json"

    def agent_browser_env(self) -> dict[str, str]:
        """The environment browser-shell gives agent-browser, for tests that run agent-browser by
        hand on the same state (e.g. to plant an unconfined daemon on its socket dir)."""
        return {
            "HOME": str(self.state_dir / "home"),
            "PATH": "/usr/bin:/bin",
            "AGENT_BROWSER_CONFIG": str(self.state_dir / "agent-browser.config.json"),
            "AGENT_BROWSER_SOCKET_DIR": str(self.state_dir / "sock"),
            "AGENT_BROWSER_NO_VERSION_CHECK": "1",
            "AGENT_BROWSER_IDLE_TIMEOUT_MS": "60000",
        }

    def write_policy(self) -> None:
        if self.policy_json is not None:
            self.policy.write_text(json.dumps(self.policy_json))

    @property
    def stderr_log(self) -> Path:
        return self.base / "server.stderr.log"

    def args(self) -> list[str]:
        # The policy named below exists whenever the server is started from these flags: a missing
        # --policy path other than the default stops the start.
        self.write_policy()
        return [
            "serve",
            "--agent-browser",
            str(self.agent_browser),
            "--cdp-port",
            str(self.cdp_port),
            "--state-dir",
            str(self.state_dir),
            "--output-dir",
            str(self.output_dir),
            "--audit-log",
            str(self.audit_log),
            # No file and no path of its own: no --policy, so the default path (missing here) applies.
            *(["--policy", str(self.policy)] if self.policy_json is not None or self.policy_path else []),
            *[arg for path in self.extra_read_exec for arg in ("--extra-read-exec", path)],
            *(["--allow-child-writable-inputs"] if self.allow_child_writable_inputs else []),
            *(["--pool", self.pool] if self.pool is not None and "--pool" not in self.extra_args else []),
            *self.extra_args,
        ]

    def argv(self) -> list[str]:
        return [str(self.server_bin), *self.args()]

    def env(self) -> dict[str, str]:
        env = {
            "PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
            "HOME": os.environ.get("HOME", "/root"),
            "RUST_LOG": os.environ.get("BS_TEST_RUST_LOG", "info"),
        }
        env.update(self.env_extra)
        return env


# Every server base dir the suite created, for the end-of-run daemon sweep.
SERVER_BASES: list[Path] = []


def under_tmp(path: Path) -> bool:
    """`path`, as spelled or resolved, lies under /tmp (which the confined agent-browser may write)."""
    return any(p == Path("/tmp") or Path("/tmp") in p.parents for p in (path.absolute(), path.resolve()))


def binaries_under_tmp(binaries: Binaries) -> bool:
    """The server, agent-browser or this checkout (whose target/ holds the probe) lies under /tmp,
    as in a CI clone there. browser-shell refuses to start on a binary the confined child could
    replace; the suite then passes --allow-child-writable-inputs, since what its tests check is
    something else. Elsewhere the flag stays off, so every server runs with the refusal on."""
    return any(under_tmp(p) for p in (binaries.server, binaries.agent_browser, harness.REPO_ROOT))


# The content boundary around page text (src/call/boundary.rs): one nonce opens and closes it.
BOUNDARY = re.compile(
    r"\A--- AGENT_BROWSER_PAGE_CONTENT nonce=(?P<nonce>[0-9a-f]{32}) origin=(?P<origin>\S+) ---\n"
    r"(?P<text>.*)\n--- END_AGENT_BROWSER_PAGE_CONTENT nonce=(?P=nonce) ---\Z",
    re.S,
)


def unmarked(data: Any) -> Any:
    """`data` with each page text's content boundary checked and taken off (tests compare the
    page's text; test_flow checks the markers themselves)."""
    if isinstance(data, dict):
        return {k: unmarked(v) for k, v in data.items()}
    if isinstance(data, str) and data.startswith("--- AGENT_BROWSER_PAGE_CONTENT"):
        match = BOUNDARY.match(data)
        assert match, f"a malformed content boundary: {data[:300]!r}"
        return match["text"]
    return data


def new_server_config(
    binaries: Binaries,
    cdp_port: int,
    agent_browser: Path | None = None,
    tag: str = "bs",
    extra_read_exec: list[str] | None = None,
) -> ServerConfig:
    base = Path(tempfile.mkdtemp(prefix=tag, dir="/tmp"))
    # The children run as uids of their own (--child-uids): they must get through to their dirs.
    base.chmod(0o711)
    SERVER_BASES.append(base)
    evidence = Path(tempfile.mkdtemp(prefix=f"{tag}-audit-", dir="/var/tmp"))
    return ServerConfig(
        server_bin=binaries.server,
        agent_browser=agent_browser or binaries.agent_browser,
        cdp_port=cdp_port,
        base=base,
        evidence=evidence,
        extra_read_exec=list(extra_read_exec or []),
        allow_child_writable_inputs=binaries_under_tmp(binaries),
    )


async def call(
    session: ClientSession,
    sid: str,
    argv: Sequence[Any],
    timeout_sec: int | None = None,
    *,
    read_timeout: float | None = None,
) -> tuple[bool, dict[str, Any]]:
    """One `browser-shell` tool call; returns (is_error, structuredContent).

    Asserts the reply envelope: structuredContent is an object carrying the contract keys, the
    echoed session id is ours, and content[0].text is the same object serialised as JSON.
    """
    arguments: dict[str, Any] = {"session_id": sid, "argv": list(argv)}
    if timeout_sec is not None:
        arguments["timeout_sec"] = timeout_sec
    return await call_raw(session, arguments, read_timeout=read_timeout, expect_sid=sid)


async def call_raw(
    session: ClientSession,
    arguments: Any,
    *,
    read_timeout: float | None = None,
    expect_sid: str | None = None,
    tool: str = "browser-shell",
) -> tuple[bool, dict[str, Any]]:
    result = await session.call_tool(tool, arguments, read_timeout_seconds=read_timeout)
    return check_envelope(result, expect_sid)


def check_envelope(result: Any, expect_sid: str | None) -> tuple[bool, dict[str, Any]]:
    structured = result.structured_content
    assert isinstance(structured, dict), f"structuredContent is not an object: {result!r}"
    missing = [k for k in REPLY_KEYS if k not in structured]
    assert not missing, f"structuredContent lacks {missing}: {structured!r}"
    assert isinstance(structured["exit_code"], int), structured
    assert isinstance(structured["stdout"], str), structured
    assert isinstance(structured["stderr"], str), structured
    assert result.content, f"reply has no content blocks: {result!r}"
    first = result.content[0]
    assert getattr(first, "type", None) == "text", f"content[0] is not text: {first!r}"
    try:
        as_json = json.loads(first.text)
    except ValueError as exc:
        raise AssertionError(f"content[0].text is not JSON ({exc}): {first.text!r}") from None
    assert as_json == structured, (
        f"content[0].text and structuredContent differ:\n text={as_json!r}\n structured={structured!r}"
    )
    if expect_sid is not None:
        assert structured["session_id"] == expect_sid, (
            f"reply carries session_id {structured['session_id']!r}, expected {expect_sid!r}"
        )
    return bool(result.is_error), structured


def describe(structured: Mapping[str, Any]) -> str:
    return json.dumps(structured, indent=1)[:3000]


@asynccontextmanager
async def open_session(cfg: ServerConfig, faults: list[str] | None = None):
    """stdio_client + ClientSession + initialize. Transport faults (e.g. a stdout line that is not
    JSON-RPC) are appended to `faults` instead of being silently dropped."""
    cfg.base.mkdir(parents=True, exist_ok=True)
    cfg.write_policy()
    params = StdioServerParameters(command=str(cfg.server_bin), args=cfg.args(), env=cfg.env())

    async def on_message(message: Any) -> None:
        if isinstance(message, Exception) and faults is not None:
            faults.append(f"{type(message).__name__}: {message}")

    with open(cfg.stderr_log, "a", encoding="utf-8") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write):
            async with ClientSession(
                read, write, message_handler=on_message, elicitation_callback=cfg.elicitation_callback
            ) as session:
                with anyio.fail_after(30):
                    await session.initialize()
                yield session


def find_server_pid(cfg: ServerConfig) -> int | None:
    """The server process: a child of ours running cfg.server_bin with our unique --state-dir; of two
    started on the same flags (side by side), the one started last."""
    me = os.getpid()
    found = [
        pid for pid, argv in harness.proc_cmdlines().items()
        if str(cfg.server_bin) in argv[:2] and str(cfg.state_dir) in argv and harness.parent_pid(pid) == me
    ]
    return max(found, key=started_at, default=None)


def started_at(pid: int) -> int:
    """When `pid` started, in clock ticks since boot (/proc/PID/stat's 22nd field)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0
    return int(stat.rsplit(")", 1)[1].split()[19])


class BlockingServer:
    """Synchronous facade over one MCP session with one browser-shell process."""

    def __init__(self, cfg: ServerConfig) -> None:
        self.cfg = cfg
        self._portal_cm: AbstractContextManager[BlockingPortal] | None = None
        self.portal: BlockingPortal | None = None
        self._session_cm: AbstractContextManager[ClientSession] | None = None
        self.session: ClientSession | None = None
        self.pid: int | None = None
        # Transport-level faults seen by the client: non-JSON-RPC lines on the server's stdout.
        self.faults: list[str] = []

    def start(self) -> BlockingServer:
        STDERR_LOGS.watch(self.cfg.stderr_log)
        self._portal_cm = start_blocking_portal()
        self.portal = self._portal_cm.__enter__()
        try:
            self._session_cm = self.portal.wrap_async_context_manager(open_session(self.cfg, self.faults))
            self.session = self._session_cm.__enter__()
        except BaseException as exc:
            self._portal_cm.__exit__(None, None, None)
            raise RuntimeError(
                f"could not start/initialize browser-shell: {exc!r}\n"
                f"argv={self.cfg.argv()}\n--- stderr tail ---\n{harness.tail(self.cfg.stderr_log)}"
            ) from exc
        self.pid = find_server_pid(self.cfg)
        log(f"browser-shell pid={self.pid} base={self.cfg.base}")
        return self

    def stop(self) -> None:
        try:
            if self._session_cm is not None:
                self._session_cm.__exit__(None, None, None)
        finally:
            self._session_cm = None
            self.session = None
            if self._portal_cm is not None:
                self._portal_cm.__exit__(None, None, None)
            self._portal_cm = None
            self.portal = None

    # -- calls -----------------------------------------------------------------

    def run(self, fn, *args: Any) -> Any:
        """Run `await fn(session, *args)` on the session's event loop and return its result."""
        assert self.portal is not None and self.session is not None, "server not started"
        return self.portal.call(fn, self.session, *args)

    def call(
        self, sid: str, argv: Sequence[Any], timeout_sec: int | None = None, *, deadline: float = 150
    ) -> tuple[bool, dict[str, Any]]:
        async def _go(session: ClientSession) -> tuple[bool, dict[str, Any]]:
            with anyio.fail_after(deadline):
                return await call(session, sid, argv, timeout_sec)

        return self.run(_go)

    def call_raw(self, arguments: Any, *, tool: str = "browser-shell", deadline: float = 60) -> tuple[bool, dict[str, Any]]:
        async def _go(session: ClientSession) -> tuple[bool, dict[str, Any]]:
            with anyio.fail_after(deadline):
                return await call_raw(session, arguments, tool=tool)

        return self.run(_go)

    def ok(self, sid: str, argv: Sequence[Any], timeout_sec: int | None = None) -> dict[str, Any]:
        """A call that must succeed (isError false, exit 0); returns stdout parsed as JSON."""
        is_error, reply = self.call(sid, argv, timeout_sec)
        assert not is_error and reply["exit_code"] == 0, (
            f"call {list(argv)!r} in session {sid!r} failed:\n{describe(reply)}"
        )
        try:
            data = json.loads(reply["stdout"])
        except ValueError as exc:
            raise AssertionError(
                f"stdout of {list(argv)!r} is not JSON ({exc}): {reply['stdout']!r}"
            ) from None
        return unmarked(data)

    def alive(self) -> bool:
        return self.pid is not None and not harness.is_zombie(self.pid)

    def stderr_tail(self) -> str:
        return harness.tail(self.cfg.stderr_log)


def _leftover_processes(cfg: ServerConfig) -> dict[int, list[str]]:
    """Processes (other than ours) that still reference this server instance's private dirs."""
    needle = str(cfg.base)
    hits: dict[int, list[str]] = {}
    me = os.getpid()
    for pid, argv in harness.proc_cmdlines().items():
        if pid == me:
            continue
        if any(needle in a for a in argv):
            hits[pid] = argv
            continue
        env = harness.proc_environ(pid)
        if any(needle in v for v in env.values()):
            hits[pid] = argv
    return hits


def dispose_contexts(cfg: ServerConfig) -> None:
    """Dispose of the browser contexts the servers on these flags remembered in their state dirs (the
    first's, and `<state>.N` of each further live one), on Chromium's own port."""
    contexts = []
    for memo in [cfg.state_dir / "contexts.json", *cfg.base.glob(f"{cfg.state_dir.name}.*/contexts.json")]:
        try:
            remembered = json.loads(memo.read_text())
        except (OSError, ValueError):
            continue
        contexts += [entry["context"] for entry in remembered.values()]
    if contexts:
        harness.cdp_browser_call(cfg.cdp_port, [("Target.disposeBrowserContext", {"browserContextId": c}) for c in contexts])


def cleanup_server(cfg: ServerConfig) -> None:
    leftovers = _leftover_processes(cfg)
    if leftovers:
        # Only processes provably spawned for this test's server instance (they carry its
        # private temp dir in argv/environment) are signalled, one PID at a time.
        log(f"processes left behind by browser-shell ({cfg.base}) after shutdown: {leftovers}")
        for pid in leftovers:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        time.sleep(0.5)
        for pid in _leftover_processes(cfg):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    # A server keeps its sessions' browser contexts for the next server on its state dir (which adopts
    # them with their daemons); no server comes after a test's, and the shared Chromium stays lean.
    dispose_contexts(cfg)
    if os.environ.get("BROWSER_SHELL_E2E_KEEP"):
        log(f"keeping server dir {cfg.base}")
    else:
        shutil.rmtree(cfg.base, ignore_errors=True)
        shutil.rmtree(cfg.evidence, ignore_errors=True)


# --------------------------------------------------------------------------- canary agent-browser


@dataclass
class Canary:
    script: Path
    marker: Path

    def lines(self) -> list[str]:
        try:
            return self.marker.read_text().splitlines()
        except FileNotFoundError:
            return []

    def settle_after_allowed_call(self, before: list[str], within: float = 10.0) -> list[str]:
        """An allowed call execs the canary once; a moment after its reply, browser-shell spawns the
        session's standby for its next call (src/runner/standby.rs), which execs it once more. Wait for
        exactly those two, so a later "nothing was spawned" comparison cannot catch that standby."""
        end = time.monotonic() + within
        while len(self.lines()) < len(before) + 2 and time.monotonic() < end:
            time.sleep(0.02)
        time.sleep(0.1)  # nothing more may follow
        after = self.lines()
        assert len(after) == len(before) + 2, f"expected the call's exec and its standby's, got {after[len(before):]}"
        return after


def make_canary(directory: Path, bin_dir: Path) -> Canary:
    """The marker goes in `directory`, which the confined script must be able to write (under
    /tmp); the script in `bin_dir`, which it must not (e.g. under /var/tmp): browser-shell refuses
    an --agent-browser the confined child could replace."""
    directory.mkdir(parents=True, exist_ok=True)
    marker = directory / "marker"
    # Every session's child runs as a uid of its own: each must reach the script and append (and
    # some canaries leave files of their own beside the marker).
    directory.chmod(0o1777)
    bin_dir.chmod(0o755)
    marker.touch()
    marker.chmod(0o666)
    script = bin_dir / "agent-browser"
    script.write_text(f'#!/bin/sh\necho "$$ $*" >> {marker}\n')
    script.chmod(script.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return Canary(script=script, marker=marker)
