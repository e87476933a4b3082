"""SKILL.md's examples against the demo site a user starts (deploy/local/demo-site) and a real
server over stdio, configured as the site's `--help` says (its policy and its `demo_login`
secret). Every call in SKILL.md's ```json blocks runs in order, and each reply is held against the
one SKILL.md shows (exit code, and the keys and text it shows; `…` stands for any text). The
examples are read from SKILL.md, not copied here; the demo origin http://127.0.0.1:8000 becomes
the site's free loopback port.
"""

from __future__ import annotations

import base64
import json
import re
import subprocess
import urllib.parse
from collections.abc import Iterator
from typing import Any

import anyio
import pytest
from mcp import ClientSession

import harness
from stack import reply_matches, skill_examples

pytestmark = pytest.mark.chromium

SKILL = harness.REPO_ROOT / "skills" / "browser-shell" / "SKILL.md"
DEMO_ORIGIN = "http://127.0.0.1:8000"


@pytest.fixture
def demo_site(scratch) -> Iterator[str]:
    """deploy/local/demo-site on a free port (--port 0): its origin."""
    log = scratch("bs-demo-site-") / "demo-site.log"
    with open(log, "wb") as err:
        proc = subprocess.Popen(
            [str(harness.DEMO_SITE_SCRIPT), "--port", "0"],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err, start_new_session=True,
        )
    try:
        first = proc.stdout.readline().decode().strip()  # the site's URL, once it listens
        assert re.fullmatch(r"http://127\.0\.0\.1:\d+/", first), f"{first!r}\n{harness.tail(log)}"
        yield first.rstrip("/")
    finally:
        harness.kill_process_group(proc)
        proc.stdout.close()


def site_help_config(port: int) -> tuple[dict, dict]:
    """The policy and the secrets the demo site's --help tells the operator to write, as its shell
    lines write them (the secret's value included: the help's value works as it is), for the site
    on `port`."""
    done = subprocess.run([str(harness.DEMO_SITE_SCRIPT), "--help"], capture_output=True, text=True, timeout=30, check=True)
    found = {}
    for name in ("policy.json", "secrets.json"):
        line = re.search(rf"echo '(\{{.*\}})' > {re.escape(name)}", done.stdout)
        assert line, f"demo-site --help writes no {name}:\n{done.stdout}"
        found[name] = json.loads(line[1].replace("127.0.0.1:8000", f"127.0.0.1:{port}"))
    return found["policy.json"], found["secrets.json"]


def test_skill_md_examples_reply_as_shown_against_the_demo_site(start_server, scratch, demo_site: str) -> None:
    text = SKILL.read_text()
    assert DEMO_ORIGIN in text
    port = urllib.parse.urlsplit(demo_site).port
    policy, secrets = site_help_config(port)
    secrets_file = scratch("bs-demo-secrets-", under="/var/tmp") / "secrets.json"
    secret = secrets["demo_login"]["value"]
    secrets_file.write_text(json.dumps(secrets))
    secrets_file.chmod(0o600)
    server = start_server(policy_json=policy, extra_args=["--secrets", str(secrets_file)])

    def here(value: Any) -> Any:
        return value and json.loads(json.dumps(value).replace(DEMO_ORIGIN, demo_site))

    examples = [(here(c), here(r)) for c, r in skill_examples(text)]
    # The examples cover what the page promises: flows, refusals, a secret typed, shown replies.
    argvs = [c["argv"] for c, _ in examples]
    assert {"open", "snapshot", "click", "fill", "press", "wait", "get", "select", "check", "screenshot", "close", "eval"} <= {a[0] for a in argvs}
    assert ["fill", "#password", "{{secret:demo_login}}"] in argvs
    assert len([r for _, r in examples if r and r["exit_code"] == 126]) >= 4
    assert len([r for _, r in examples if r]) >= 12

    async def go(session: ClientSession) -> list[str]:
        failures: list[str] = []
        for call_args, expected in examples:
            with anyio.fail_after(150):
                result = await session.call_tool("browser-shell", call_args)
            actual = result.structured_content
            want = expected or {"session_id": call_args["session_id"], "exit_code": 0}
            if not reply_matches(want, actual):
                failures.append(f"{json.dumps(call_args)}\n  shown:  {json.dumps(want)}\n  actual: {json.dumps(actual)}")
            if secret in json.dumps(actual) or secret in json.dumps([c.model_dump() for c in result.content if c.type == "text"]):
                failures.append(f"{json.dumps(call_args)}: the secret's value is in the reply: {json.dumps(actual)}")
            if call_args["argv"][0] == "screenshot" and actual["exit_code"] == 0:
                # As SKILL.md says: the picture follows the JSON.
                images = [c for c in result.content[1:] if c.type == "image" and c.mime_type == "image/png"]
                if len(images) != 1 or base64.b64decode(images[0].data)[:8] != b"\x89PNG\r\n\x1a\n":
                    failures.append(f"{json.dumps(call_args)}: no PNG image after the JSON: {[c.type for c in result.content]}")
        return failures

    failures = server.run(go)
    assert not failures, f"{len(failures)} of {len(examples)} SKILL.md examples do not reply as shown:\n" + "\n".join(failures)
