"""Self-checks of the harness itself (no browser-shell involved).

If these fail, the browser-shell tests cannot mean anything: fix the environment first.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import urllib.request
from pathlib import Path

import pytest

import harness

pytestmark = pytest.mark.chromium


def _get(url: str) -> tuple[int, str]:
    with urllib.request.urlopen(url, timeout=5) as resp:
        return resp.status, resp.read().decode()


def test_chromium_devtools_answers_on_loopback(chromium: harness.Chromium) -> None:
    status, body = _get(chromium.version_url)
    assert status == 200
    info = json.loads(body)
    assert info["webSocketDebuggerUrl"].startswith(f"ws://127.0.0.1:{chromium.port}/"), info


def test_web_server_serves_the_fixture_pages(web: harness.WebServer) -> None:
    status, body = _get(web.url("/form"))
    assert status == 200 and "<title>Form page</title>" in body and 'id="q"' in body
    before = len(web.submitted())
    status, body = _get(web.url("/submit?q=self+check"))
    assert status == 200 and "<title>Submitted</title>" in body
    assert web.submitted()[before:] == ["self check"]
    status, body = _get(web.url("/next"))
    assert "<title>Next page</title>" in body


def test_agent_browser_drives_our_chromium_directly(
    agent_browser_bin: Path, chromium: harness.Chromium, web: harness.WebServer
) -> None:
    """The pinned agent-browser can talk to the fixture Chromium at all (baseline for the suite)."""
    socket_dir = Path(tempfile.mkdtemp(prefix="bsab", dir="/tmp"))
    env = {"PATH": os.environ["PATH"], "HOME": str(socket_dir), "AGENT_BROWSER_SOCKET_DIR": str(socket_dir)}
    # A tab of its own: the shared Chromium also holds browser-shell sessions' tabs, each in a browser
    # context whose proxy is that session's egress (gone once its server stopped).
    base = [str(agent_browser_bin), "--cdp", str(chromium.port), "--json", "--session", "selfcheck", "--pin-tab"]
    try:
        run = subprocess.run(
            [*base, "batch", "--bail"],
            input=json.dumps([["open", web.url("/next")], ["get", "title"]]),
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        )
        assert run.returncode == 0, f"rc={run.returncode}\nstdout={run.stdout}\nstderr={run.stderr}"
        results = json.loads(run.stdout)
        assert results[-1]["result"]["title"] == "Next page", results
    finally:
        subprocess.run([*base, "close"], capture_output=True, env=env, timeout=30)
        subprocess.run(["rm", "-rf", str(socket_dir)], check=False)
