"""Fixtures and hooks of the browser-shell end-to-end suite (the helpers they use: server.py,
harness.py, stack.py).

Fixtures
--------
* `chromium` (session): a headless Chromium we start ourselves, DevTools on 127.0.0.1.
* `web` (session): a tiny ThreadingHTTPServer on 127.0.0.1 serving /form, /submit, /next, /slow.
* `server_bin`, `agent_browser_bin`, `binaries` (session): the binaries under test; a missing one
  fails the run up front.
* `start_server` (function): factory that spawns `browser-shell serve ...` over stdio with the
  official `mcp` client and returns a started `server.BlockingServer`; `server` is one of them.
* `server_config` (function): factory of `server.ServerConfig`s for servers a test starts by hand.
* `canary_server` (module): a server whose `--agent-browser` only records each exec.
* `scratch` (function), `e2e_workdir` (session): temp dirs, kept with BROWSER_SHELL_E2E_KEEP=1.

Hooks
-----
On a failing test the tail of every browser-shell stderr log involved is attached to the report.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import harness
from server import (
    SERVER_BASES,
    STDERR_LOGS,
    Binaries,
    BlockingServer,
    Canary,
    ServerConfig,
    cleanup_server,
    describe,
    log,
    make_canary,
    new_server_config,
    require_executable,
)

# --------------------------------------------------------------------------- reporting hooks


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    STDERR_LOGS.new_test()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        for path in STDERR_LOGS.all():
            report.sections.append((f"browser-shell stderr tail: {path}", harness.tail(path)))


# --------------------------------------------------------------------------- binaries


@pytest.fixture(scope="session")
def agent_browser_bin() -> Path:
    return require_executable(
        harness.resolve_agent_browser(),
        "agent-browser binary",
        "set BROWSER_SHELL_AGENT_BROWSER, or install the pin in deploy/agent-browser with `npm ci`",
    )


@pytest.fixture(scope="session")
def server_bin() -> Path:
    return require_executable(
        harness.resolve_server_bin(), "browser-shell server binary", "set BROWSER_SHELL_BIN or run `cargo build` first"
    )


@pytest.fixture(scope="session")
def binaries(agent_browser_bin: Path, server_bin: Path) -> Binaries:
    return Binaries(server=server_bin, agent_browser=agent_browser_bin)


# --------------------------------------------------------------------------- loopback fixtures


@pytest.fixture(scope="session")
def e2e_workdir() -> Iterator[Path]:
    # Short path under /tmp: agent-browser's unix socket path must stay <= 103 bytes.
    path = Path(tempfile.mkdtemp(prefix="bse2e", dir="/tmp"))
    yield path
    if os.environ.get("BROWSER_SHELL_E2E_KEEP"):
        log(f"keeping work dir {path}")
    else:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def scratch() -> Iterator[Any]:
    """Factory: scratch(prefix, under="/tmp") -> a new directory, removed at teardown (kept with
    BROWSER_SHELL_E2E_KEEP). Audit logs and keys, policy files and stand-in binaries need one under
    /var/tmp: the confined agent-browser may write all of /tmp, and the server refuses them there."""
    made: list[Path] = []

    def _make(prefix: str, under: str = "/tmp") -> Path:
        path = Path(tempfile.mkdtemp(prefix=prefix, dir=under))
        # Enterable, not listable: the children run as uids of their own (--child-uids) and may
        # need to reach what a test puts here (a stand-in binary, a state dir).
        path.chmod(0o711)
        made.append(path)
        return path

    yield _make
    for path in made:
        if os.environ.get("BROWSER_SHELL_E2E_KEEP"):
            log(f"keeping scratch dir {path}")
        else:
            shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def chromium(e2e_workdir: Path) -> Iterator[harness.Chromium]:
    with harness.run_chromium(e2e_workdir) as browser:
        log(f"chromium pid={browser.pid} cdp=127.0.0.1:{browser.port} log={browser.log_path}")
        try:
            yield browser
        finally:
            # agent-browser daemons outlive their CLI (and, by design, a stopped server: a new one
            # adopts them); at the end of the run none of the suite's may be left behind.
            for pid in harness.daemons_under(SERVER_BASES):
                with contextlib.suppress(ProcessLookupError):  # exited since the scan
                    os.kill(pid, signal.SIGKILL)
                    log(f"stopped leftover agent-browser daemon pid={pid}")


@pytest.fixture(scope="session")
def web() -> Iterator[harness.WebServer]:
    with harness.run_web_server() as srv:
        log(f"web server on 127.0.0.1:{srv.port}")
        yield srv


# --------------------------------------------------------------------------- the server


@pytest.fixture
def server_config(binaries: Binaries, chromium: harness.Chromium) -> Iterator[Any]:
    """Factory: server_config(tag=..., agent_browser=...) -> a ServerConfig for a server the test
    starts by hand. At teardown its dirs are removed, and any process left behind is stopped."""
    made: list[ServerConfig] = []

    def _make(**kwargs: Any) -> ServerConfig:
        cfg = new_server_config(binaries, chromium.port, **kwargs)
        made.append(cfg)
        return cfg

    yield _make
    for cfg in made:
        cleanup_server(cfg)


@pytest.fixture
def start_server(binaries: Binaries, chromium: harness.Chromium) -> Iterator[Any]:
    """Factory: start_server(agent_browser=None) -> started BlockingServer (stopped at teardown)."""
    started: list[BlockingServer] = []

    def _start(
        agent_browser: Path | None = None,
        extra_read_exec: list[str] | None = None,
        audit_log: Path | None = None,
        extra_args: list[str] | None = None,
        **overrides: Any,
    ) -> BlockingServer:
        cfg = new_server_config(binaries, chromium.port, agent_browser, extra_read_exec=extra_read_exec)
        cfg.audit_log_path = audit_log
        cfg.extra_args = list(extra_args or [])
        for key, value in overrides.items():
            setattr(cfg, key, value)
        srv = BlockingServer(cfg)
        started.append(srv)
        return srv.start()

    yield _start
    for srv in reversed(started):
        try:
            srv.stop()
        finally:
            cleanup_server(srv.cfg)
    faults = [f for srv in started for f in srv.faults]
    assert not faults, f"browser-shell wrote stdout that is not valid JSON-RPC: {faults}"


@pytest.fixture
def server(start_server: Any) -> BlockingServer:
    return start_server()


@pytest.fixture(scope="module")
def canary_server(binaries: Binaries, chromium: harness.Chromium) -> Iterator[tuple[BlockingServer, Canary]]:
    """A browser-shell whose --agent-browser is a shell script that only records each exec.

    The positive control (an allowed call DOES leave a line in the marker) is asserted here, so
    every test using this fixture knows the detector works.
    """
    canary_dir = Path(tempfile.mkdtemp(prefix="bscan", dir="/tmp"))
    canary_bin = Path(tempfile.mkdtemp(prefix="bscan-bin-", dir="/var/tmp"))
    canary = make_canary(canary_dir, canary_bin)
    # The canary is a /bin/sh script: under confinement its interpreter must be executable too.
    cfg = new_server_config(
        binaries, chromium.port, agent_browser=canary.script, tag="bsc", extra_read_exec=["/usr"]
    )
    srv = BlockingServer(cfg)
    STDERR_LOGS.watch_long_lived(cfg.stderr_log)
    try:
        srv.start()
        before = canary.lines()
        is_error, reply = srv.call("canary", ["get", "url"], 10)
        after = canary.settle_after_allowed_call(before)
        assert len(after) > len(before), (
            "positive control failed: an allowed call through the canary server did not exec "
            f"the --agent-browser script (marker unchanged).\nreply={describe(reply)}\n"
            f"--- server stderr ---\n{srv.stderr_tail()}"
        )
        log(f"canary positive control ok: is_error={is_error} reply={reply} marker+={after[len(before):]}")
        yield srv, canary
    finally:
        try:
            srv.stop()
        finally:
            STDERR_LOGS.forget_long_lived(cfg.stderr_log)
            cleanup_server(cfg)
            shutil.rmtree(canary_dir, ignore_errors=True)
            shutil.rmtree(canary_bin, ignore_errors=True)
    assert not srv.faults, f"browser-shell wrote stdout that is not valid JSON-RPC: {srv.faults}"
