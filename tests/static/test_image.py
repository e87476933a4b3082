"""The AIO image as a whole (deploy/aio/Dockerfile, its build context, aio-setup.sh and the image's
ENV), and the files around it that must agree with it: the local stack's launcher and
deploy/README.md. Static: nothing is built or started (there is no Docker engine here)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from deploy_files import AIO, ROOT, SCRIPTS, copy_parts

pytestmark = pytest.mark.static

# =========================================================================== Dockerfile
def test_base_is_an_arg_without_default_and_the_final_stage(dockerfile):
    global_args, stages = dockerfile
    assert "AIO_IMAGE" in global_args, "ARG AIO_IMAGE must be declared before the first FROM"
    assert not any(a.startswith("AIO_IMAGE=") for a in global_args), "AIO_IMAGE must have no default"
    final = stages[-1]
    assert final.image == "${AIO_IMAGE}", f"the final stage is FROM {final.image}, not the pinned AIO base"
    assert "AIO_IMAGE" in final.of("ARG"), "the final stage must re-declare AIO_IMAGE to check its pin"
    # The base appears twice: the final image, and the stage that builds the hub's venv with the
    # base's own python3 (so the venv runs in the final image).
    assert [s.name for s in stages if s.image == "${AIO_IMAGE}"] == ["mcp-hub", final.name]


DIGEST = "a" * 64


@pytest.fixture
def run_setup():
    """aio-setup.sh with an image reference, as the Dockerfile's RUN calls it."""
    if not shutil.which("bash"):
        pytest.skip("bash is not available")
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    return lambda image: subprocess.run(
        ["bash", str(SCRIPTS / "aio-setup.sh"), image], env=env, capture_output=True, text=True
    )


@pytest.mark.parametrize(
    "image",
    [
        "ghcr.io/agent-infra/sandbox:latest",
        "ghcr.io/agent-infra/sandbox:1.0.0.152",
        f"ghcr.io/agent-infra/sandbox@sha256:{DIGEST}",
        f"ghcr.io/agent-infra/sandbox:latest@sha256:{DIGEST}",
        f"ghcr.io/agent-infra/sandbox:1.0.0.152@sha256:{DIGEST[:-1]}",
        "",
    ],
    ids=["latest", "tag-only", "digest-only", "latest-and-digest", "short-digest", "empty"],
)
def test_the_setup_script_refuses_a_base_not_pinned_by_version_and_digest(run_setup, image):
    r = run_setup(image)
    assert r.returncode == 1 and "pinned by version tag AND digest" in r.stderr, (image, r.stderr)


def test_the_setup_script_passes_a_pinned_base_to_its_next_check(run_setup):
    """A pinned reference passes the pin check and stops at the next one (no /etc/aio_version
    here), before anything is changed."""
    if Path("/etc/aio_version").exists():
        pytest.skip("/etc/aio_version exists: this is an AIO image, where the script would go on")
    r = run_setup(f"ghcr.io/agent-infra/sandbox:1.0.0.152@sha256:{DIGEST}")
    assert r.returncode == 1 and "/etc/aio_version is missing" in r.stderr, r.stderr


def test_rust_builder_stage_builds_for_targetarch(dockerfile):
    _, stages = dockerfile
    build = next(s for s in stages if s.name == "build")
    assert re.fullmatch(r"rust:\d+\.\d+(\.\d+)?-bookworm", build.image), build.image
    assert "TARGETARCH" in build.of("ARG")
    runs = " ".join(build.of("RUN"))
    assert "amd64) triple=x86_64-unknown-linux-gnu" in runs
    assert "arm64) triple=aarch64-unknown-linux-gnu" in runs
    # The server and the trampoline are built statically, as they ship, then installed.
    assert re.search(r"deploy/static-link --release --locked --target \"\$triple\";", runs)
    assert runs.index("deploy/static-link") < runs.index('target/$triple/release/browser-shell') < runs.index(
        'target/$triple/release/hardening-trampoline')
    assert 'rustup target add "$triple"' in runs


def test_agent_browser_comes_from_the_pinned_npm_package(dockerfile):
    _, stages = dockerfile
    stage = next(s for s in stages if s.name == "agent-browser")
    copies = [copy_parts(a) for a in stage.of("COPY")]
    sources = {src for _, srcs, _ in copies for src in srcs}
    assert {"deploy/agent-browser/package.json", "deploy/agent-browser/package-lock.json"} <= sources
    runs = " ".join(stage.of("RUN"))
    assert "npm ci --ignore-scripts" in runs
    assert "amd64) suffix=x64" in runs and "arm64) suffix=arm64" in runs
    assert "node_modules/agent-browser/bin/agent-browser-linux-musl-$suffix" in runs
    lock = json.loads((ROOT / "deploy/agent-browser/package-lock.json").read_text())
    assert lock["packages"]["node_modules/agent-browser"]["version"] == "0.41.2"
    assert lock["packages"]["node_modules/agent-browser"]["integrity"].startswith("sha512-")


def test_final_image_has_no_toolchain_and_no_extra_browser(dockerfile):
    _, stages = dockerfile
    final = stages[-1]
    # The browser's managed policy (downloads blocked) lands in its policy dirs: not a browser.
    text = " ".join(
        args for op, args in final.instructions if not (op == "COPY" and "/policies/managed/" in args)
    ).lower()
    for word in ("cargo ", "rustup", "apt-get", "apk add", "chromium", "google-chrome", "playwright install", "npx "):
        assert word not in text, f"the final stage mentions '{word.strip()}'"
    for flags, srcs, _ in (copy_parts(a) for a in final.of("COPY")):
        if flags.get("from") == "build":
            assert srcs in (["/out/browser-shell"], ["/out/hardening-trampoline"]), \
                f"only browser-shell and its trampoline may leave the build stage, not {srcs}"


def test_binaries_land_where_the_hub_and_env_say(dockerfile, final_env, hub):
    _, stages = dockerfile
    dests = {}
    for flags, srcs, dest in (copy_parts(a) for a in stages[-1].of("COPY")):
        if "from" in flags:
            dests[(flags["from"], tuple(srcs))] = dest
    server = hub["mcpServers"]["browser-shell"]
    assert server["command"] == "${BROWSER_SHELL_BIN}"
    assert dests[("build", ("/out/browser-shell",))] == final_env["BROWSER_SHELL_BIN"]
    # Beside the server: where it finds the trampoline without a flag.
    assert dests[("build", ("/out/hardening-trampoline",))] == str(Path(final_env["BROWSER_SHELL_BIN"]).parent / "hardening-trampoline")
    assert dests[("agent-browser", ("/out/agent-browser",))] == final_env["BROWSER_SHELL_AGENT_BROWSER"]
    assert dests[("mcp-hub", ("/opt/browser-shell/hub-venv",))] == "/opt/browser-shell/hub-venv"


def test_the_image_forbids_downloads_and_unproxied_webrtc_by_managed_policy(dockerfile):
    """Chromium is not confined: beside browser-shell's CDP deny, a managed policy blocks downloads, and
    WebRTC may not send UDP around the sessions' egress proxy."""
    _, stages = dockerfile
    copies = [copy_parts(a) for a in stages[-1].of("COPY")]
    dests = {dest for _, srcs, dest in copies if srcs == ["deploy/aio/browser-policy.json"]}
    assert dests == {
        "/etc/chromium/policies/managed/browser-shell.json",
        "/etc/opt/chrome/policies/managed/browser-shell.json",
    }, copies
    policy = json.loads((ROOT / "deploy/aio/browser-policy.json").read_text())
    assert policy == {"DownloadRestrictions": 3, "WebRtcIPHandling": "disable_non_proxied_udp"}


def test_hub_is_the_hash_pinned_mcp_proxy_in_a_venv_on_the_base(dockerfile):
    _, stages = dockerfile
    stage = next(s for s in stages if s.name == "mcp-hub")
    copies = [copy_parts(a) for a in stage.of("COPY")]
    assert [(srcs, dest) for _, srcs, dest in copies] == [(["deploy/mcp-hub/requirements.txt"], "/tmp/hub-requirements.txt")]
    runs = " ".join(stage.of("RUN"))
    for needle in ("python3 -m venv", "--require-hashes", "--no-deps", "--only-binary=:all:", "-r /tmp/hub-requirements.txt",
                   '= "mcp-proxy 0.13.0"'):
        assert needle in runs, needle
    # Every requirement is pinned to one version and carries hashes; nothing comes from elsewhere.
    text = (ROOT / "deploy" / "mcp-hub" / "requirements.txt").read_text()
    entries = re.split(r"\n(?=[a-z])", text[text.index("\n\n") + 2 :].strip())
    names = {}
    for entry in entries:
        m = re.match(r"([a-z0-9-]+)==([0-9][\w.]*) \\\n", entry)
        assert m, f"not an exact pin: {entry[:80]!r}"
        assert len(re.findall(r"--hash=sha256:[0-9a-f]{64}", entry)) >= 1, f"{m.group(1)} has no hash"
        names[m.group(1)] = m.group(2)
    assert names["mcp-proxy"] == "0.13.0" and names["mcp"].startswith("1."), names
    assert "exceptiongroup" in names, "anyio needs exceptiongroup on Python 3.10 (AIO 1.9.x)"
    assert not re.search(r"^\s*(-i|--index-url|--extra-index-url|-f|--find-links)\b", text, re.M)
    # The local stack installs the very same file the same way.
    local = (ROOT / "deploy" / "local" / "install-stack-deps").read_text()
    assert 'req="$root/deploy/mcp-hub/requirements.txt"' in local and "--require-hashes" in local


def test_every_copied_source_exists_and_is_in_the_build_context(dockerfile):
    _, stages = dockerfile
    patterns = [
        line.strip()
        for line in (AIO / "Dockerfile.dockerignore").read_text().splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    assert patterns[0] == "**", "the build context is an allowlist: exclude everything first"
    reincluded = [p[1:] for p in patterns if p.startswith("!")]

    def covered(src: str) -> bool:
        s = src.rstrip("/")
        return any(
            s == r or (r.endswith("/**") and (s == r[:-3] or s.startswith(r[:-3] + "/"))) for r in reincluded
        )

    for stage in stages:
        for flags, srcs, _ in (copy_parts(a) for a in stage.of("COPY")):
            if "from" in flags:
                continue
            for src in srcs:
                assert list(ROOT.glob(src.rstrip("/"))), f"COPY source {src} does not exist"
                assert covered(src), f"COPY source {src} is not in Dockerfile.dockerignore's allowlist"


def test_entrypoint_is_the_fail_closed_wrapper(dockerfile):
    _, stages = dockerfile
    final = stages[-1]
    (entry,) = final.of("ENTRYPOINT")
    assert json.loads(entry) == ["/opt/browser-shell/bin/aio-entrypoint"]
    copies = {dest: srcs for _, srcs, dest in (copy_parts(a) for a in final.of("COPY"))}
    assert copies["/opt/browser-shell/bin/aio-entrypoint"] == ["deploy/aio/scripts/aio-entrypoint.sh"]
    runs = " ".join(final.of("RUN"))
    assert '/opt/browser-shell/bin/aio-setup "$AIO_IMAGE"' in runs
    assert final.of("EXPOSE") == ["8080"]


def test_the_image_env_gives_browser_shell_one_cdp_port_its_policy_and_an_audit_log_out_of_reach(final_env):
    """The image's ENV: browser-shell, the browser and the hub's wait agree on one CDP port, the
    policy file is the mounted one, degraded confinement is off, Jupyter and code-server are off,
    the audit log and every file the server trusts lie outside every root the confined child may
    write, agent-browser's directory holds nothing else of ours, and the state dir is short enough
    for agent-browser's sockets."""
    env = final_env
    assert env["BROWSER_SHELL_CDP_PORT"] == "9222"
    # The image's own services are out of the agent's reach whatever the policy allows.
    assert {"8079", "8080", "8088", "6080", "5900"} <= set(env["BROWSER_SHELL_PROTECT_PORTS"].split(",")), env
    assert env["BROWSER_REMOTE_DEBUGGING_PORT"] == env["BROWSER_SHELL_CDP_PORT"]
    assert env["BROWSER_SHELL_POLICY"] == "/etc/agent-browser/browser-shell.policy.json"
    assert env["BROWSER_SHELL_AGENT_BROWSER"].startswith("/")
    assert env["BROWSER_SHELL_ALLOW_DEGRADED_CONFINEMENT"] == "false"
    assert env["MCP_HUB_WAIT_PORTS"] == "9222"
    assert env["DISABLE_JUPYTER"] == "true" and env["DISABLE_CODE_SERVER"] == "true"
    audit = Path(env["BROWSER_SHELL_AUDIT_LOG"])
    assert audit.is_absolute()
    # The server refuses an audit log the confined child may write, and files it trusts there: its
    # own binary, agent-browser's, the policy, the audit and checkpoint keys (beside the log).
    trusted = [audit, Path(f"{audit}.key"), Path(f"{audit}.checkpoint-key")] + [
        Path(env[k]) for k in ("BROWSER_SHELL_BIN", "BROWSER_SHELL_AGENT_BROWSER", "BROWSER_SHELL_POLICY")
    ]
    for writable in ("/tmp", "/dev/shm", env["BROWSER_SHELL_STATE_DIR"], env["BROWSER_SHELL_OUTPUT_DIR"]):
        for path in trusted:
            assert not str(path).startswith(writable.rstrip("/") + "/"), f"{path} lies under {writable}"
    # agent-browser's read/exec root is its binary's directory: nothing else of ours there.
    assert Path(env["BROWSER_SHELL_AGENT_BROWSER"]).parent != Path("/opt/browser-shell/bin")
    state = env["BROWSER_SHELL_STATE_DIR"]
    assert len(state) <= 27, "state dir too long for agent-browser's socket paths (browser-shell allows 27 bytes)"


# =========================================================================== aio-setup.sh
def _bash_array(script: str, name: str) -> list[str]:
    m = re.search(rf"\b{name}=\(([^)]*)\)", script)
    assert m, f"{name}=(...) not found"
    return m.group(1).split()


def test_setup_keeps_the_needed_programs_and_removes_the_rest():
    script = (SCRIPTS / "aio-setup.sh").read_text()
    keep10 = re.search(r"1\.0\) keep=\(([^)]*)\)", script).group(1).split()
    keep19 = re.search(r"1\.9\) keep=\(([^)]*)\)", script).group(1).split()
    optional = _bash_array(script, "optional")
    for keep, auth in ((keep10, "srv.conf"), (keep19, "supervisord.python_srv.conf")):
        assert {"browser.conf", "vnc.conf", "openbox.conf", "nginx.conf", auth} <= set(keep)
        kept = set(keep) | set(optional)
        for removed in (
            "supervisord.mcp.conf",
            "supervisord.code_server.conf",
            "supervisord.jupyter.conf",
            "supervisord.tinyproxy.conf",
            "supervisord.gost.conf",
            "supervisord.nodejs_repl_22.conf",
            "supervisord.mcp_hub.conf",  # replaced by ours, never the stock one
        ):
            assert removed not in kept
    assert "supervisord.python_srv.conf" not in keep10, "1.0.0.x needs no python-server"
    # Removed as programs on disk, not just disabled.
    for name in ("mcp-server-browser", "chrome-devtools-mcp", "code-server", "tinyproxy", "gost", "jupyter", "jupyter-lab"):
        assert re.search(rf"for name in [^;\n]*\b{re.escape(name)}\b", script), f"{name} is not purged"
    assert "@agent-infra/mcp-server-browser chrome-devtools-mcp" in script
    assert 'install -m 0644 "$share/supervisord/supervisord.mcp_hub.conf" "$sv/supervisord.mcp_hub.conf"' in script
    assert "nginx -t -c" in script


# =========================================================================== the local stack
def test_local_stack_runs_the_image_files_not_a_fork():
    """deploy/local/up renders the image's own nginx and hub files with the image's own renderers
    and runs the hub with the image's flags (tests/e2e/test_stack.py then runs it for real)."""
    up = (ROOT / "deploy" / "local" / "up").read_text()
    assert 'bash "$root/deploy/aio/scripts/render-nginx.sh" "$root/deploy/aio/nginx" "$run/nginx"' in up
    assert '"$root/deploy/aio/scripts/render-hub-config.py" \\\n  "$root/deploy/aio/mcp-hub.json" "$run/mcp-hub.json"' in up
    assert '--host 127.0.0.1 --port "$MCP_HUB_PORT" \\\n  --stateless --named-server-config "$run/mcp-hub.json"' in up
    assert "PUBLIC_LISTEN_IPV4=127.0.0.1" in up


# =========================================================================== README
def test_readme_documents_the_image():
    text = (ROOT / "deploy" / "README.md").read_text()
    assert re.search(r"AIO_IMAGE=ghcr\.io/agent-infra/sandbox:\d[\w.]*@sha256:", text), "a version+digest example"
    for needle in (
        "port-proxy",
        "$request_uri",
        "$uri",
        "1.0.0.152",
        "1.9.3",
        "tools/list",
        "ss -ltnp",
        "Host: 8091-x",
        "/websockify?x=.png",
        "never built",
        "digest",
        "BROWSER_SHELL_LOCAL_DEV=1",
    ):
        assert needle in text, f"deploy/README.md does not mention {needle!r}"
