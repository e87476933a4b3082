"""The image's entrypoint (deploy/aio/scripts/aio-entrypoint.sh), run for real in its check modes:
`--preflight` prints its decisions (one `key=value` a line) or refuses to start, `--install-nginx`
installs the gateway into a stand-in AIO tree. Nothing is started."""

from __future__ import annotations

import os
import shutil
import subprocess
from base64 import b64encode
from pathlib import Path

import pytest

from deploy_files import NGINX_SRC, ROOT, SCRIPTS, is_comment_only

pytestmark = pytest.mark.static

PEM = "-----BEGIN PUBLIC KEY-----\nMIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEA\n-----END PUBLIC KEY-----\n"
JWT = b64encode(PEM.encode()).decode()


def run_entrypoint(tmp_path: Path, layout: str, *args: str, **env: str) -> subprocess.CompletedProcess:
    share = tmp_path / "share-flags"
    share.mkdir(exist_ok=True)
    shutil.copy(ROOT / "deploy" / "browser-flags.sh", share / "browser-flags.sh")
    layout_file = tmp_path / f"layout-{layout}"
    layout_file.write_text(
        f"AIO_LAYOUT='{layout}'\nAIO_VERSION='{'1.0.0.152' if layout == '1.0' else '1.9.3'}'\n"
        f"AIO_BASE_ENTRYPOINT='/bin/false'\nAIO_NOVNC_DIR='/opt/novnc'\n"
    )
    base = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "BROWSER_SHELL_AIO_LAYOUT_FILE": str(layout_file),
        "BROWSER_SHELL_AUDIT_LOG": "/var/log/browser-shell/audit.jsonl",
        "BROWSER_SHELL_STATE_DIR": "/tmp/browser-shell-state",
        "BROWSER_SHELL_OUTPUT_DIR": "/tmp/browser-shell",
        "BROWSER_SHELL_CDP_PORT": "9222",
        "BROWSER_SHELL_POLICY": "/etc/agent-browser/browser-shell.policy.json",
        "BROWSER_SHELL_SHARE_DIR": str(share),
    }
    return subprocess.run(
        ["bash", str(SCRIPTS / "aio-entrypoint.sh"), *args],
        env={**base, **env},
        capture_output=True,
        text=True,
    )


def decisions(r: subprocess.CompletedProcess) -> dict[str, str]:
    assert r.returncode == 0, r.stderr
    pairs = [line.split("=", 1) for line in r.stdout.splitlines()]
    keys = [key for key, _ in pairs]
    assert len(keys) == len(set(keys)), f"a decision printed twice: {r.stdout!r}"
    return dict(pairs)


@pytest.mark.parametrize("layout", ["1.0", "1.9"])
def test_entrypoint_refuses_to_start_without_a_credential(tmp_path, needs_bash, layout):
    for env in ({}, {"JWT_PUBLIC_KEY": "   "}, {"BROWSER_SHELL_LOCAL_DEV": "0"}, {"BROWSER_SHELL_LOCAL_DEV": "true"}):
        r = run_entrypoint(tmp_path, layout, "--preflight", **env)
        assert r.returncode == 1, (env, r.stdout)
        assert "refusing to start without a credential" in r.stderr and "BROWSER_SHELL_LOCAL_DEV=1" in r.stderr
    # The real start path fails too (here already for want of the image's
    # layout record, which the test overrides only in the check modes).
    assert run_entrypoint(tmp_path, layout).returncode == 1


@pytest.mark.parametrize("layout", ["1.0", "1.9"])
def test_the_entrypoint_decides_auth_ports_and_audit_dir_from_the_layout_and_the_credential(tmp_path, needs_bash, layout):
    d = decisions(run_entrypoint(tmp_path, layout, "--preflight", JWT_PUBLIC_KEY=JWT))
    assert d["auth"] == "on" and d["layout"] == layout
    assert d["auth_service_port"] == ("8088" if layout == "1.0" else "8091")
    assert d["wait_ports"] == f"{d['auth_service_port']},8079"
    assert d["mcp_hub_wait_ports"] == "9222"
    assert d["audit_dir"] == "/var/log/browser-shell"
    d = decisions(run_entrypoint(tmp_path, layout, "--preflight", JWT_PUBLIC_KEY=JWT, MCP_HUB_WAIT_PORTS=""))
    assert d["mcp_hub_wait_ports"] == "9222", "an empty MCP_HUB_WAIT_PORTS must not fall back to removed services"
    d = decisions(run_entrypoint(tmp_path, layout, "--preflight", BROWSER_SHELL_LOCAL_DEV="1"))
    assert d["auth"] == "off"


def test_an_api_key_alone_needs_the_1_9_layout_and_16_characters_and_a_jwt_key_must_be_a_pem(tmp_path, needs_bash):
    key = "k" * 32
    assert decisions(run_entrypoint(tmp_path, "1.9", "--preflight", SANDBOX_API_KEY=key))["auth"] == "on"
    r = run_entrypoint(tmp_path, "1.0", "--preflight", SANDBOX_API_KEY=key)
    assert r.returncode == 1 and "checks JWTs only" in r.stderr
    r = run_entrypoint(tmp_path, "1.9", "--preflight", SANDBOX_API_KEY="short")
    assert r.returncode == 1
    r = run_entrypoint(tmp_path, "1.9", "--preflight", JWT_PUBLIC_KEY="not-a-key")
    assert r.returncode == 1 and "not a base64-encoded PEM" in r.stderr


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"PROXY_SERVER": "http://p:3128"}, "tinyproxy/gost are removed"),
        ({"PROXY_MAP": "a>b"}, "tinyproxy/gost are removed"),
        ({"EXTRA_MCP_SERVERS": '{"x":{}}'}, "exactly one tool"),
        ({"BROWSER_SHELL_AUDIT_LOG": "/tmp/audit/audit.jsonl"}, "which the confined agent-browser may write"),
        ({"BROWSER_SHELL_AUDIT_LOG": "audit.jsonl"}, "absolute path"),
        ({"BROWSER_REMOTE_DEBUGGING_PORT": "9333"}, "differs"),
    ],
    ids=["proxy-server", "proxy-map", "extra-mcp-servers", "audit-log-under-tmp", "relative-audit-log", "other-debugging-port"],
)
def test_the_entrypoint_refuses_a_setting_it_cannot_honour_safely(tmp_path, needs_bash, env, message):
    r = run_entrypoint(tmp_path, "1.9", "--preflight", JWT_PUBLIC_KEY=JWT, **env)
    assert r.returncode == 1 and message in r.stderr, (env, r.stderr)


def test_entrypoint_drops_dangerous_chrome_flags(tmp_path, needs_bash):
    dangerous = ["--disable-web-security", "--disable-site-isolation-trials", "--remote-allow-origins=*",
                 "--remote-debugging-address=0.0.0.0"]
    kept = ["--window-size=1280,720", "--lang=en-US"]
    args = " ".join([kept[0], *dangerous, kept[1]])
    r = run_entrypoint(tmp_path, "1.9", "--preflight", JWT_PUBLIC_KEY=JWT,
                       BROWSER_EXTRA_ARGS=args, BROWSER_COMMANDLINE_ARGS="--remote-allow-origins=* --mute-audio")
    d = decisions(r)
    # The user's words first, then the project's (test_entrypoint_adds_the_projects_chromium_flags).
    assert d["browser_extra_args"].split()[:2] == kept, d
    assert not set(dangerous) & set(d["browser_extra_args"].split()), d
    assert d["browser_commandline_args"].split() == ["--mute-audio"], d
    for flag in dangerous:
        assert f"dropping Chrome flag {flag}" in r.stderr, r.stderr
    # Nothing to drop: the same words pass through.
    assert decisions(run_entrypoint(tmp_path, "1.9", "--preflight", JWT_PUBLIC_KEY=JWT,
                                    BROWSER_EXTRA_ARGS=" ".join(kept)))["browser_extra_args"].startswith(" ".join(kept) + " ")
    # A newline in the flags stays inside their one line: it cannot print a decision of its own.
    d = decisions(run_entrypoint(tmp_path, "1.9", "--preflight", JWT_PUBLIC_KEY=JWT,
                                 BROWSER_EXTRA_ARGS="--lang=en-US\nauth=off\n"))
    assert d["auth"] == "on" and d["browser_extra_args"].startswith("--lang=en-US auth=off "), d


def project_flags() -> list[str]:
    listed = subprocess.run(["bash", "-c", '. "$1" && printf "%s\\0" "${chromium_flags[@]}"', "bash",
                             str(ROOT / "deploy" / "browser-flags.sh")], capture_output=True, text=True, check=True)
    return [f for f in listed.stdout.split("\0") if f]


def test_entrypoint_adds_the_projects_chromium_flags(tmp_path, needs_bash):
    """The image's Chromium gets browser-flags.sh: every flag without whitespace (its start script splits
    on it), one --disable-features with the user's merged in, and the refusing proxy unless the user
    named an egress proxy of their own."""
    r = run_entrypoint(tmp_path, "1.9", "--preflight", JWT_PUBLIC_KEY=JWT,
                       BROWSER_EXTRA_ARGS="--lang=en-US --disable-features=Translate")
    words = decisions(r)["browser_extra_args"].split()
    wanted = [f for f in project_flags() if " " not in f and not f.startswith(("--no-sandbox", "--remote-debugging-address", "--disable-features"))]
    assert "--proxy-server=http://127.0.0.1:1" in wanted and "--disable-quic" in wanted, wanted
    assert words[0] == "--lang=en-US" and set(wanted) <= set(words), words
    features = [w for w in words if w.startswith("--disable-features=")]
    assert len(features) == 1 and features[0].endswith(",Translate") and "WebUIOmniboxPopup" in features[0], words
    assert "left out (it has whitespace" in r.stderr and "--host-resolver-rules" in r.stderr, r.stderr
    own = decisions(run_entrypoint(tmp_path, "1.9", "--preflight", JWT_PUBLIC_KEY=JWT,
                                   BROWSER_EXTRA_ARGS="--proxy-server=http://127.0.0.1:3128"))["browser_extra_args"].split()
    assert [w for w in own if w.startswith("--proxy-server=")] == ["--proxy-server=http://127.0.0.1:3128"], own


def test_entrypoint_installs_the_gateway_and_prunes_stock_routes(tmp_path, needs_bash):
    if not shutil.which("envsubst"):
        pytest.skip("envsubst is not available")
    gem = tmp_path / "gem"
    share = tmp_path / "share"
    (gem / "nginx").mkdir(parents=True)
    (share / "bin").mkdir(parents=True)
    (share / "bin" / "render-nginx").symlink_to(SCRIPTS / "render-nginx.sh")
    (share / "nginx").symlink_to(NGINX_SRC)
    stock = ["python_srv.conf", "header_proxy.conf", "gembrowser_compat.conf", "nginx.mcp_hub.conf", "code_server.conf"]
    for name in stock:
        (gem / "nginx" / name).write_text("location / { return 200; }\n")
    (gem / "nginx-server-port-proxy.conf").write_text("server { server_name ~^(?<port>\\d+)-(.+)$; }\n")
    for auth, active in (("on", "with"), ("off", "without")):
        r = run_entrypoint(
            tmp_path,
            "1.9",
            "--install-nginx",
            auth,
            BROWSER_SHELL_AIO_ROOT=str(gem),
            BROWSER_SHELL_SHARE_DIR=str(share),
        )
        assert r.returncode == 0, r.stderr
        assert sorted(p.name for p in (gem / "nginx").iterdir()) == [
            "legacy.conf",
            "mcp_hub.conf",
            "srv.conf",
            "vnc.conf",
            "zz_deny_all.conf",
        ]
        assert (gem / "nginx-server-active.conf").read_text() == (gem / f"nginx-server-{active}-auth.conf").read_text()
        for name in ("nginx-server-port-proxy.conf", "nginx-server-port-proxy.conf.template", "nginx-proxy-map.conf", "nginx.legacy.conf"):
            assert is_comment_only(gem / name), name
        for name in ("nginx.srv.conf", "nginx.vnc.conf", "nginx-server-with-auth.conf", "nginx/mcp_hub.conf"):
            assert "${" not in (gem / name).read_text(), f"{name} must be installed rendered"
        assert "127.0.0.1:8091/tickets" in (gem / "nginx" / "srv.conf").read_text(), "1.9.x: tickets from python-server"
        assert "127.0.0.1:8079/servers/browser-shell/mcp" in (gem / "nginx" / "mcp_hub.conf").read_text(), "1.9.x: /mcp to the hub"
