"""deploy/aio/docker-compose.yml, read with the strict YAML-subset parser (deploy_files.py): the
service publishes only the gateway, on the host's loopback, requires its key, and mounts the policy
read-only and the audit log on a volume that outlives the container."""

from __future__ import annotations

from pathlib import Path

import pytest

from deploy_files import AIO, YamlSubsetError, parse_yaml_subset

pytestmark = pytest.mark.static


def test_yaml_subset_parser_is_strict():
    assert parse_yaml_subset("a:\n  b: \"x: y\"\n  c:\n    - 1\n    - k: v\n      l: w\n") == {
        "a": {"b": "x: y", "c": [1, {"k": "v", "l": "w"}]}
    }
    for bad in ("a: [1, 2]\n", "a: &x 1\n", "a: 1\na: 2\n", "a:\n\tb: 1\n", "a: |\n  x\n"):
        with pytest.raises(YamlSubsetError):
            parse_yaml_subset(bad)


def test_compose_publishes_only_the_gateway_on_host_loopback_and_requires_the_key(compose, final_env):
    """One service, built from deploy/aio/Dockerfile with a required AIO_IMAGE: only the gateway's
    port, on 127.0.0.1; the JWT key required; no local-dev switch; Jupyter and code-server off; the
    hub waits for the CDP port; resource limits; a bridge network of its own."""
    (name,) = compose["services"]
    svc = compose["services"][name]
    assert svc["ports"] == ["127.0.0.1:8080:8080"], "publish the gateway on the host's loopback only"
    assert "expose" not in svc and "network_mode" not in svc and not svc.get("privileged")
    assert svc["build"]["dockerfile"] == "deploy/aio/Dockerfile"
    assert (AIO / svc["build"]["context"] / svc["build"]["dockerfile"]).resolve() == (AIO / "Dockerfile").resolve()
    assert svc["build"]["args"]["AIO_IMAGE"].startswith("${AIO_IMAGE:?")
    env = svc["environment"]
    assert env["DISABLE_JUPYTER"] == "true" and env["DISABLE_CODE_SERVER"] == "true"
    assert env["MCP_HUB_WAIT_PORTS"] == final_env["BROWSER_SHELL_CDP_PORT"] == "9222", "wait for a port that comes up"
    assert env["JWT_PUBLIC_KEY"].startswith("${JWT_PUBLIC_KEY:?"), "the key is required, not defaulted"
    assert "BROWSER_SHELL_LOCAL_DEV" not in env and "SANDBOX_API_KEY" not in env
    assert env["OTEL_EXPORTER_OTLP_ENDPOINT"].startswith("${OTEL_EXPORTER_OTLP_ENDPOINT")
    assert svc["shm_size"] and svc["mem_limit"] and svc["cpus"] and isinstance(svc["pids_limit"], int)
    assert svc["networks"] == ["browser-shell"] and compose["networks"]["browser-shell"]["driver"] == "bridge"


def test_compose_mounts_the_policy_read_only_and_the_audit_log_on_a_named_volume(compose, final_env):
    svc = next(iter(compose["services"].values()))
    mounts = {m["target"]: m for m in svc["volumes"]}
    policy = mounts[final_env["BROWSER_SHELL_POLICY"]]
    assert policy["type"] == "bind" and policy["read_only"] is True
    assert policy["source"].startswith("${BROWSER_SHELL_POLICY_FILE:?")
    audit = mounts[str(Path(final_env["BROWSER_SHELL_AUDIT_LOG"]).parent)]
    assert audit["type"] == "volume", "the audit trail lives on a named volume and survives the container"
    assert audit["source"] in compose["volumes"]
    assert set(mounts) == {final_env["BROWSER_SHELL_POLICY"], str(Path(final_env["BROWSER_SHELL_AUDIT_LOG"]).parent)}
