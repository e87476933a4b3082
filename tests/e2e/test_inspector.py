"""The official MCP Inspector CLI (pinned in tests/inspector, with the Node it needs) against
browser-shell over stdio: its strict tool-schema check finds nothing to warn about, it negotiates
2026-07-28 in the modern era and 2025-11-25 in the legacy one, and a screenshot reaches it as an
image. `tests/inspector/install` (run by tests/run) installs it."""

from __future__ import annotations

import base64
import json
import subprocess
from pathlib import Path

import pytest

import harness
from server import ServerConfig

pytestmark = pytest.mark.chromium

INSPECTOR_BIN = harness.REPO_ROOT / "tests" / "inspector" / "node_modules" / ".inspector-bin"


@pytest.fixture(scope="module")
def inspector() -> Path:
    if not (INSPECTOR_BIN / "node").exists() or not (INSPECTOR_BIN / "inspector").exists():
        pytest.fail(f"the MCP Inspector is not installed in {INSPECTOR_BIN.parent.parent}: run tests/inspector/install", pytrace=False)
    return INSPECTOR_BIN


def run_inspector(inspector: Path, cfg: ServerConfig, *args: str) -> subprocess.CompletedProcess[str]:
    cfg.base.mkdir(parents=True, exist_ok=True)
    cfg.write_policy()
    env = {**cfg.env(), "RUST_LOG": "warn"}
    env_args = [a for key, value in env.items() for a in ("-e", f"{key}={value}")]
    argv = [str(inspector / "node"), str(inspector / "inspector"), "--cli", *args, *env_args, "--", *cfg.argv()]
    run = subprocess.run(argv, capture_output=True, text=True, timeout=120, env={"PATH": "/usr/bin:/bin", "HOME": str(cfg.base)})
    print(f"\n[e2e] inspector {' '.join(args)} -> exit {run.returncode}\n{run.stderr[-2000:]}")
    return run


def test_the_strict_schema_check_has_nothing_to_say(inspector, server_config) -> None:
    run = run_inspector(inspector, server_config(tag="bsi"), "--method", "tools/list", "--strict", "--format", "json")
    assert run.returncode == 0, run.stderr
    # What --strict prints per problem (path, issue, suggestion) and as a count when there is any.
    assert "Issue:" not in run.stderr and "warning" not in run.stderr and "error" not in run.stderr, run.stderr
    tool = json.loads(run.stdout)["result"]["tools"][0]
    assert tool["annotations"]["openWorldHint"] is True and tool["annotations"]["readOnlyHint"] is False, tool


@pytest.mark.parametrize(("era", "revision"), [("modern", "2026-07-28"), ("legacy", "2025-11-25")])
def test_each_era_negotiates_its_newest_revision(inspector, server_config, era: str, revision: str) -> None:
    run = run_inspector(
        inspector, server_config(tag="bsi"), "--protocol-era", era, "--method", "initialize", "--format", "json"
    )
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["result"]["protocolVersion"] == revision, run.stdout


def test_a_screenshot_reaches_the_inspector_as_an_image(inspector, server_config, web) -> None:
    # Each CLI run is a server process of its own; the session's daemon and tab outlive it (the next
    # server adopts them), so the second run's screenshot shows the page the first run opened.
    cfg = server_config(tag="bsi")
    arguments = {"session_id": "insp", "argv": ["open", web.url("/measure")]}
    run = run_inspector(
        inspector, cfg, "--protocol-era", "modern", "--method", "tools/call", "--tool-name", "browser-shell",
        "--tool-args-json", json.dumps(arguments), "--format", "json",
    )
    assert run.returncode == 0, run.stderr
    arguments = {"session_id": "insp", "argv": ["screenshot", "insp.png"]}
    run = run_inspector(
        inspector, cfg, "--protocol-era", "modern", "--method", "tools/call", "--tool-name", "browser-shell",
        "--tool-args-json", json.dumps(arguments), "--format", "json",
    )
    assert run.returncode == 0, run.stderr
    content = json.loads(run.stdout)["result"]["content"]
    assert [item["type"] for item in content] == ["text", "image"], content
    assert content[1]["mimeType"] == "image/png"
    assert base64.b64decode(content[1]["data"])[:8] == b"\x89PNG\r\n\x1a\n"
