"""The MCP hub as the image runs it: deploy/aio/mcp-hub.json (exactly one stdio server,
browser-shell, configured through the image's ENV), its strict renderer (render-hub-config.py,
run for real) and the supervisord program that starts it."""

from __future__ import annotations

import configparser
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from deploy_files import AIO, SCRIPTS

pytestmark = pytest.mark.static

# =========================================================================== mcp-hub.json
def test_hub_serves_exactly_one_stdio_server(hub):
    assert list(hub) == ["mcpServers"], "nothing but mcpServers in the hub config"
    servers = hub["mcpServers"]
    assert list(servers) == ["browser-shell"], f"exactly one server, browser-shell; got {list(servers)}"
    server = servers["browser-shell"]
    assert set(server) == {"command", "env"}, f"command and env only (no prefix/hidden/url/args...): {set(server)}"
    assert server["command"] == "${BROWSER_SHELL_BIN}", "the binary's absolute path comes from the image's ENV"
    env = server["env"]
    for key in (
        "BROWSER_SHELL_AGENT_BROWSER",
        "BROWSER_SHELL_CDP_PORT",
        "BROWSER_SHELL_PROTECT_PORTS",
        "BROWSER_SHELL_STATE_DIR",
        "BROWSER_SHELL_OUTPUT_DIR",
        "BROWSER_SHELL_POLICY",
        "BROWSER_SHELL_AUDIT_LOG",
        "OTEL_EXPORTER_OTLP_ENDPOINT",
    ):
        assert key in env, f"browser-shell gets {key} through the hub's env (the child sees nothing else)"
    assert all(isinstance(v, str) for v in env.values())


def test_every_hub_placeholder_is_defined_in_the_image(hub, final_env):
    """render-hub-config resolves ${VAR} strictly: an undefined one fails the start."""
    text = json.dumps(hub)
    names = set(re.findall(r"\$\{([^}]+)\}", text))
    assert names, "config via env placeholders expected"
    for name in names:
        assert re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name), f"only plain ${{NAME}} placeholders: {name}"
        assert name in final_env, f"${{{name}}} is used by mcp-hub.json but not defined by an ENV in the image"


# =========================================================================== render-hub-config
RENDER_HUB = SCRIPTS / "render-hub-config.py"


def render_hub(tmp_path: Path, template: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [shutil.which("python3") or "python3", str(RENDER_HUB), str(template), str(tmp_path / "out.json")],
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **env},
        capture_output=True,
        text=True,
    )


def test_hub_config_renders_with_the_image_env(tmp_path, final_env):
    r = render_hub(tmp_path, AIO / "mcp-hub.json", final_env)
    assert r.returncode == 0, r.stderr
    rendered = json.loads((tmp_path / "out.json").read_text())
    server = rendered["mcpServers"]["browser-shell"]
    assert list(rendered["mcpServers"]) == ["browser-shell"]
    assert server["command"] == "/opt/browser-shell/bin/browser-shell"
    assert server["env"]["BROWSER_SHELL_AUDIT_LOG"] == final_env["BROWSER_SHELL_AUDIT_LOG"]
    assert server["env"]["OTEL_EXPORTER_OTLP_ENDPOINT"] == "", "an empty value is a value"
    assert "${" not in json.dumps(rendered)
    assert (tmp_path / "out.json").stat().st_mode & 0o777 == 0o644


def test_the_hub_config_renderer_refuses_an_unset_placeholder(tmp_path, final_env):
    env = dict(final_env)
    del env["BROWSER_SHELL_POLICY"]
    r = render_hub(tmp_path, AIO / "mcp-hub.json", env)
    assert r.returncode == 1 and "${BROWSER_SHELL_POLICY} is not set" in r.stderr, r.stderr


@pytest.mark.parametrize(
    "config",
    [
        pytest.param({"mcpServers": {"browser-shell": {"command": "browser-shell"}}}, id="relative command"),
        pytest.param({"mcpServers": {"browser-shell": {"command": "/x"}, "other": {"command": "/y"}}}, id="second server"),
        pytest.param({"mcpServers": {"browser_shell": {"command": "/x"}}}, id="other name"),
        pytest.param({"mcpServers": {"browser-shell": {"command": "/x", "prefix": "p"}}}, id="prefix key"),
        pytest.param({"mcpServers": {"browser-shell": {"command": "/x", "env": {"A": "$HOME"}}}}, id="bare $VAR"),
        pytest.param({"mcpServers": {"browser-shell": {"command": "/x", "env": {"A": "${cmd: id}"}}}}, id="command placeholder"),
        pytest.param({"mcpServers": {"browser-shell": {"command": "/x"}}, "x": 1}, id="extra top-level key"),
    ],
)
def test_the_hub_config_renderer_refuses_anything_but_one_absolute_browser_shell_server(tmp_path, final_env, config):
    template = tmp_path / "template.json"
    template.write_text(json.dumps(config))
    r = render_hub(tmp_path, template, final_env)
    assert r.returncode == 1, f"{config}: accepted"


# =========================================================================== supervisord
def read_ini(path: Path) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(interpolation=None, strict=True)
    parser.read_string(path.read_text(), source=str(path))
    return parser


def test_supervisord_runs_the_stateless_hub_on_loopback_as_the_desktop_user(final_env):
    """supervisord's mcp-hub program: start-mcp-hub as the desktop user, which execs mcp-proxy
    --stateless on 127.0.0.1 with the config the entrypoint rendered."""
    ini = read_ini(AIO / "supervisord" / "supervisord.mcp_hub.conf")
    assert ini.sections() == ["program:mcp-hub"]
    program = ini["program:mcp-hub"]
    assert program["command"].strip() == "/opt/browser-shell/bin/start-mcp-hub"
    assert program["user"] == "%(ENV_USER)s", "the hub (and browser-shell) run as the desktop user, not root"
    assert program["autostart"] == "true" and program["autorestart"] == "true"
    assert "0.0.0.0" not in (AIO / "supervisord" / "supervisord.mcp_hub.conf").read_text()
    start = (SCRIPTS / "start-mcp-hub.sh").read_text()
    exec_line = next(line for line in start.splitlines() if line.startswith("exec "))
    assert exec_line == 'exec "$hub" --host 127.0.0.1 --port "$port" --stateless --named-server-config "$config"', exec_line
    assert "hub=/opt/browser-shell/hub-venv/bin/mcp-proxy" in start
    assert "config=/opt/browser-shell/run/mcp-hub.json" in start
    entry = (SCRIPTS / "aio-entrypoint.sh").read_text()
    assert '"$share/bin/render-hub-config" "$share/mcp-hub.json" "$share/run/mcp-hub.json"' in entry
    # An empty MCP_HUB_WAIT_PORTS means the CDP port, never "wait for removed services".
    assert '[ -n "${ports//[[:space:],]/}" ] || ports=$cdp' in start
