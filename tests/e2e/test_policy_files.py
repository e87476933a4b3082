"""The shipped policy files (deploy/policy): the example matches the JSON schema and loads, and
whatever the schema rejects, `browser-shell policy check` rejects too. Runs the built binary's CLI
only: no browser, no server."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import jsonschema
import pytest

pytestmark = pytest.mark.binary

POLICY_DIR = Path(__file__).resolve().parents[2] / "deploy" / "policy"


def test_the_shipped_example_policy_matches_the_schema_and_loads(server_bin: Path) -> None:
    schema = json.loads((POLICY_DIR / "browser-shell.policy.schema.json").read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    example = POLICY_DIR / "browser-shell.policy.example.json"
    jsonschema.validate(json.loads(example.read_text()), schema)
    run = subprocess.run([str(server_bin), "policy", "check", str(example)], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["allow_private_cidrs"] == ["10.20.0.0/16"]


@pytest.mark.parametrize(
    "bad",
    [
        {"open": {"allow_schemes": ["file"]}},
        {"open": {"allow_hostz": []}},
        {"open": {"deny_hosts": ["*.evil.example"]}},
        {"open": {"dns_timeout_ms": 0}},
        {"opne": {}},
        {"approvals": {"rules": [{"subcommands": ["click"]}]}},
        {"approvals": {"wait_sec": 0}},
        {"approvals": {"rules": [{"name": "a", "element_word": ["pay"]}]}},
    ],
    ids=["file-scheme", "unknown-key", "wildcard", "zero-timeout", "typo-section", "unnamed-rule", "zero-wait", "typo-criterion"],
)
def test_what_the_schema_rejects_the_server_rejects_too(server_bin: Path, tmp_path: Path, bad: dict) -> None:
    schema = json.loads((POLICY_DIR / "browser-shell.policy.schema.json").read_text())
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema)
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps(bad))
    run = subprocess.run([str(server_bin), "policy", "check", str(policy)], capture_output=True, text=True)
    assert run.returncode == 2 and "policy file" in run.stderr, (run.returncode, run.stderr)


def test_policy_check_and_explain_name_their_file_and_refuse_a_missing_one_as_serve_does(
    server_bin: Path, tmp_path: Path
) -> None:
    present = tmp_path / "policy.json"
    present.write_text(json.dumps({"open": {"allow_private_cidrs": ["127.0.0.1:8765", "[::1]:8765"]}}))
    run = subprocess.run([str(server_bin), "policy", "check", str(present)], capture_output=True, text=True)
    assert run.returncode == 0 and f"policy file: {present}" in run.stderr, run.stderr
    assert json.loads(run.stdout)["allow_private_cidrs"] == ["127.0.0.1/32:8765", "[::1]/128:8765"]
    missing = tmp_path / "typo.json"
    run = subprocess.run([str(server_bin), "policy", "check", str(missing)], capture_output=True, text=True)
    # As `serve --policy` would: only the default path may be missing.
    assert run.returncode == 2 and f"{missing}: no such file" in run.stderr and not run.stdout, run.stderr
    run = subprocess.run(
        [str(server_bin), "policy", "explain", "http://127.0.0.1:8765/", "--policy", str(present)],
        capture_output=True, text=True,
    )
    assert run.returncode == 0 and run.stdout.startswith("allowed:"), run.stdout + run.stderr
    assert f"policy file: {present}" in run.stderr, run.stderr
    run = subprocess.run(
        [str(server_bin), "policy", "explain", "http://127.0.0.1:8766/", "--policy", str(present)],
        capture_output=True, text=True,
    )
    assert run.returncode == 1 and "refused [address.private]" in run.stdout, run.stdout


def test_an_approval_rule_naming_no_subcommand_is_refused(server_bin: Path, tmp_path: Path) -> None:
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps({"approvals": {"rules": [{"name": "pay", "subcommands": ["click", "clik"]}]}}))
    run = subprocess.run([str(server_bin), "policy", "check", str(policy)], capture_output=True, text=True)
    assert run.returncode == 2 and "no such subcommand: clik" in run.stderr, (run.returncode, run.stderr)
    policy.write_text(json.dumps({"approvals": {"rules": [{"name": "pay", "subcommands": ["click"]}]}}))
    run = subprocess.run([str(server_bin), "policy", "check", str(policy)], capture_output=True, text=True)
    assert run.returncode == 0 and json.loads(run.stdout)["approvals"]["rules"][0]["name"] == "pay", run.stderr


def test_explain_says_which_approval_an_open_waits_for(server_bin: Path, tmp_path: Path) -> None:
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps({
        "open": {"allow_private_cidrs": ["127.0.0.0/8"]},
        "approvals": {"rules": [{"name": "the admin", "subcommands": ["open"], "open_hosts": ["127.0.0.2"]}]},
    }))
    run = subprocess.run([str(server_bin), "policy", "explain", "http://127.0.0.2:8080/", "--policy", str(policy)],
                         capture_output=True, text=True)
    assert run.returncode == 0 and 'approval: `open` waits for a person\'s yes (rule "the admin")' in run.stdout, run.stdout
    run = subprocess.run([str(server_bin), "policy", "explain", "http://127.0.0.1:8080/", "--policy", str(policy)],
                         capture_output=True, text=True)
    assert run.returncode == 0 and "approval" not in run.stdout, run.stdout
