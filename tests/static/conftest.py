"""Fixtures of the static suite: the deploy files, parsed (parsers in deploy_files.py). Nothing
here starts a browser, a server or a network listener."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from deploy_files import (
    AIO,
    NGINX_SRC,
    SCRIPTS,
    Gateway,
    Stage,
    env_pairs,
    load_gateway,
    parse_dockerfile,
    parse_yaml_subset,
    python_render,
    render_values,
)


@pytest.fixture(scope="module")
def rendered(tmp_path_factory) -> Path:
    """deploy/aio/nginx rendered by render-nginx.sh, as the entrypoint does."""
    out = tmp_path_factory.mktemp("nginx-rendered")
    values = render_values(out)
    if shutil.which("envsubst") and shutil.which("bash"):
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **values}
        subprocess.run(["bash", str(SCRIPTS / "render-nginx.sh"), str(NGINX_SRC), str(out)], env=env, check=True)
    else:  # the same substitution, for machines without gettext-base
        python_render(values, out)
    return out


@pytest.fixture(scope="module")
def gw(rendered) -> Gateway:
    """The gateway with auth: the image's default."""
    return load_gateway(rendered, "with")


@pytest.fixture(scope="module")
def gw_dev(rendered) -> Gateway:
    """The gateway without auth (BROWSER_SHELL_LOCAL_DEV=1, the local stack)."""
    return load_gateway(rendered, "without")


@pytest.fixture(scope="module")
def dockerfile() -> tuple[list[str], list[Stage]]:
    """deploy/aio/Dockerfile: (the ARGs before the first FROM, the stages)."""
    return parse_dockerfile((AIO / "Dockerfile").read_text())


@pytest.fixture(scope="module")
def final_env(dockerfile) -> dict[str, str]:
    """Every ENV of the image's final stage."""
    env: dict[str, str] = {}
    for args in dockerfile[1][-1].of("ENV"):
        env.update(env_pairs(args))
    return env


@pytest.fixture(scope="module")
def hub() -> dict:
    """deploy/aio/mcp-hub.json, the hub's config template."""
    return json.loads((AIO / "mcp-hub.json").read_text())


@pytest.fixture(scope="module")
def compose() -> dict:
    """deploy/aio/docker-compose.yml."""
    return parse_yaml_subset((AIO / "docker-compose.yml").read_text())


@pytest.fixture
def needs_bash():
    """Skip where the entrypoint's shell tools are missing."""
    for tool in ("bash", "base64", "grep"):
        if not shutil.which(tool):
            pytest.skip(f"{tool} is not available")
