"""README's "Use it from your MCP client", done as a user does it: the Chromium its `sh` block starts
(deploy/local/chromium), and the `mcpServers` JSON it shows, run by the official Python MCP client
over stdio (as a client starts a configured server): initialize, tools/list, `open` of a loopback
page and `get url`. The JSON is read from the README, not copied here; only its paths and ports
are replaced by this run's, flag by flag, and a flag the test cannot place fails it.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, get_default_environment, stdio_client

import harness
from server import Binaries, binaries_under_tmp, call, describe, log

pytestmark = pytest.mark.chromium

README = harness.REPO_ROOT / "README.md"
SECTION = "## Use it from your MCP client\n"


def readme_section() -> str:
    text = README.read_text()
    assert SECTION in text, "README has no 'Use it from your MCP client' section"
    return text.split(SECTION, 1)[1].split("\n## ", 1)[0]


def fenced(section: str, lang: str) -> list[str]:
    return re.findall(rf"^```{lang}\n(.*?)^```", section, re.S | re.M)


def readme_chromium_command(section: str) -> list[str]:
    """The one command of the section's `sh` block (its comment dropped)."""
    (block,) = fenced(section, "sh")
    lines = [line for line in block.splitlines() if line.strip()]
    assert len(lines) == 1, f"expected one command, got {lines}"
    return shlex.split(lines[0], comments=True)


@pytest.fixture
def readme_chromium(scratch) -> Iterator[int]:
    """The README's Chromium command, on a free port (9222 may be someone's stack): its DevTools port."""
    argv = readme_chromium_command(readme_section())
    assert argv == ["deploy/local/chromium"], argv
    port = harness.free_port()
    logfile = scratch("bs-chromium-log-") / "chromium.log"
    with open(logfile, "wb") as out:
        proc = subprocess.Popen(
            [str(harness.REPO_ROOT / argv[0]), "--port", str(port)],
            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )
    profile = None
    try:
        said = lambda: f"DevTools on 127.0.0.1:{port}" in logfile.read_text(errors="replace")  # noqa: E731
        harness.poll(lambda: said() or proc.poll() is not None, within=60)
        assert said() and proc.poll() is None, f"deploy/local/chromium did not come up:\n{harness.tail(logfile)}"
        profile = Path(re.search(r"profile (\S+);", logfile.read_text(errors="replace"))[1])
        # A fresh profile, outside /tmp (which the confined agent-browser may write).
        assert profile.is_dir() and profile.parent == Path("/var/tmp"), profile
        yield port
    finally:
        # SIGTERM to the script: it stops its Chromium and removes the fresh profile.
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        finally:
            harness.kill_process_group(proc)
    assert not profile.exists(), f"deploy/local/chromium left its fresh profile {profile}"


def placed(
    config: dict, *, server: Path, agent_browser: Path, cdp_port: int, audit_log: Path, policy: Path, secrets: Path
) -> tuple[str, list[str]]:
    """(command, args) of the README's server entry with this run's paths and port, flag by flag."""
    assert list(config) == ["mcpServers"] and list(config["mcpServers"]) == ["browser-shell"], config
    entry = config["mcpServers"]["browser-shell"]
    assert set(entry) == {"command", "args"}, f"the entry has more than command and args: {entry}"
    args = list(entry["args"])
    assert args[0] == "serve", args
    values = {
        "--agent-browser": agent_browser, "--cdp-port": cdp_port, "--audit-log": audit_log, "--policy": policy,
        "--secrets": secrets,
    }
    # Settings, not places: kept as the README writes them.
    settings = {"--on-exit"}
    out = ["serve"]
    rest = args[1:]
    while rest:
        flag = rest.pop(0)
        assert flag in values or flag in settings, f"the README's JSON has {flag!r}, which this test does not know how to place"
        assert rest and not rest[0].startswith("--"), f"{flag} has no value in the README's JSON"
        value = rest.pop(0)
        out += [flag, value if flag in settings else str(values.pop(flag))]
    assert not values, f"the README's JSON lacks {sorted(values)}"
    return str(server), out


def test_the_readmes_client_config_runs_with_the_python_client(
    binaries: Binaries, readme_chromium: int, web: harness.WebServer, scratch
) -> None:
    section = readme_section()
    (block,) = fenced(section, "json")
    config = json.loads(block)
    evidence = scratch("bs-client-", under="/var/tmp")
    policy = evidence / "policy.json"
    # What the README tells the user to write before the start: here, the loopback page's origin.
    policy.write_text(json.dumps({"open": {"allow_private_cidrs": [f"127.0.0.1:{web.port}"]}}))
    # And the secrets file it names, with one secret bound to that origin (mode 0600, as it says).
    secrets = evidence / "secrets.json"
    secrets.write_text(json.dumps({"demo_login": {"value": "readme-s3cret", "hosts": [f"127.0.0.1:{web.port}"]}}))
    secrets.chmod(0o600)
    audit_log = evidence / "audit.jsonl"
    command, args = placed(
        config, server=binaries.server, agent_browser=binaries.agent_browser,
        cdp_port=readme_chromium, audit_log=audit_log, policy=policy, secrets=secrets,
    )
    # The environment a client gives a server it starts; state and output dirs of this test's own
    # (the defaults under /tmp may be a real server's), and from a checkout under /tmp the flag
    # the whole suite needs there (server.binaries_under_tmp).
    base = scratch("bsc")  # short: agent-browser's socket paths under the state dir are bounded
    env = {
        **get_default_environment(),
        "BROWSER_SHELL_STATE_DIR": str(base / "s"),
        "BROWSER_SHELL_OUTPUT_DIR": str(base / "out"),
        **({"BROWSER_SHELL_ALLOW_CHILD_WRITABLE_INPUTS": "true"} if binaries_under_tmp(binaries) else {}),
    }
    page = web.url("/form")

    async def run() -> tuple[list[str], *tuple[tuple[bool, dict], ...]]:
        params = StdioServerParameters(command=command, args=args, env=env)
        with open(base / "server.stderr.log", "w") as errlog:
            async with stdio_client(params, errlog=errlog) as (read, write):
                async with ClientSession(read, write) as session:
                    with anyio.fail_after(60):
                        await session.initialize()
                        tools = [t.name for t in (await session.list_tools()).tools]
                    with anyio.fail_after(150):
                        opened = await call(session, "readme", ["open", page])
                        filled = await call(session, "readme", ["fill", "#q", "{{secret:demo_login}}"])
                        url = await call(session, "readme", ["get", "url"])
                        # A second session, left open: the client leaves with it live.
                        left = await call(session, "readme-left", ["open", page])
                        closed = await call(session, "readme", ["close"])
        return tools, opened, filled, url, left, closed

    try:
        tools, opened, filled, url, left, closed = anyio.run(run)
    except BaseException:
        log(f"server stderr:\n{harness.tail(base / 'server.stderr.log')}")
        raise
    finally:
        # Seen before they are stopped here: with the README's --on-exit, none is left.
        leftover = harness.daemons_under([base])
        for pid in leftover:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    assert tools == ["browser-shell"], tools
    for is_error, reply in (opened, filled, url, left, closed):
        assert not is_error and reply["exit_code"] == 0, f"{describe(reply)}\n{harness.tail(base / 'server.stderr.log')}"
    assert json.loads(url[1]["stdout"]) == {"url": page}, url
    # As the README says of its entry's --on-exit: the session the client left open ended with the server.
    ended = [
        r for r in map(json.loads, audit_log.read_text().splitlines())
        if r["phase"] == "lifecycle" and r.get("session_id") == "readme-left"
    ]
    assert [r["outcome"] for r in ended] == ["closed"], ended
    assert not leftover, f"daemons {leftover} outlived the README's server and its client"
    # The audit log the README names is the server's, and intact.
    verify = subprocess.run(
        [str(binaries.server), "audit", "verify", *map(str, sorted(evidence.glob("audit.jsonl*")))],
        capture_output=True, text=True, timeout=60,
    )
    assert verify.returncode == 0, verify.stdout + verify.stderr


def test_the_readmes_chromium_preloads_no_webui_omnibox_popup_in_a_new_context(readme_chromium: int) -> None:
    # Each window would preload the WebUI omnibox popups in renderers of its own; a session's context is a
    # window, and they were most of what a new session cost Chromium (docs/benchmarks.md).
    def ui_targets() -> list[str]:
        (listed,) = harness.cdp_browser_call(readme_chromium, [("Target.getTargets", {"filter": [{}]})])
        return [t["url"] for t in listed["result"]["targetInfos"] if t["type"] == "browser_ui"]

    (made,) = harness.cdp_browser_call(readme_chromium, [("Target.createBrowserContext", {})])
    context = made["result"]["browserContextId"]
    harness.cdp_browser_call(readme_chromium, [("Target.createTarget", {"url": "about:blank", "browserContextId": context})])
    time.sleep(1)
    assert not [u for u in ui_targets() if "omnibox-popup" in u], ui_targets()
