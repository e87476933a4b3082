"""Chromium alone, started with the project's flags (chromium_flags in deploy/browser-flags.sh), in a
network namespace with only loopback: its own services (update checks, autofill, optimization hints) try
to reach Google's hosts even with --disable-background-networking. With the flags, it resolves none of
those names itself and dials nothing but the proxy that refuses everything. The same holds for the words
the AIO image's entrypoint gives its Chromium (the flags without whitespace: no host resolver rules),
because a proxied request's name is the proxy's to resolve. Read from Chromium's NetLog."""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import tempfile
from collections import Counter
from pathlib import Path

import pytest

import harness

pytestmark = pytest.mark.chromium

# How long Chromium runs alone: its services start within seconds of launch (seen: 30 s runs).
RUN_SECONDS = 25
# The refusing proxy of chromium_flags; the only address Chromium's own traffic may dial.
REFUSING_PROXY = "127.0.0.1:1"


def netlog_events(path: Path) -> tuple[dict[int, str], list[dict]]:
    text = path.read_text()
    try:
        log = json.loads(text)
    except ValueError:
        # Chromium was stopped before it closed the file, maybe in the middle of an event: keep every
        # event up to the last one written whole (one per line, each followed by a comma).
        log = json.loads(text[: text.rindex("},\n") + 1] + "]}")
    names = {number: name for name, number in log["constants"]["logEventTypes"].items()}
    return names, log["events"]


def aio_words(tmp: Path) -> tuple[str, ...]:
    """What deploy/aio/scripts/aio-entrypoint.sh passes the image's Chromium (its --preflight decision),
    with the image's own --no-sandbox."""
    share = tmp / "share"
    share.mkdir()
    shutil.copy(harness.REPO_ROOT / "deploy" / "browser-flags.sh", share)
    layout = tmp / "layout"
    layout.write_text("AIO_LAYOUT='1.9'\nAIO_VERSION='1.9.3'\nAIO_BASE_ENTRYPOINT='/bin/false'\nAIO_NOVNC_DIR='/opt/novnc'\n")
    env = {"PATH": "/usr/bin:/bin", "BROWSER_SHELL_AIO_LAYOUT_FILE": str(layout), "BROWSER_SHELL_SHARE_DIR": str(share),
           "BROWSER_SHELL_LOCAL_DEV": "1", "BROWSER_SHELL_AUDIT_LOG": "/var/log/browser-shell/audit.jsonl"}
    done = subprocess.run(["bash", str(harness.REPO_ROOT / "deploy" / "aio" / "scripts" / "aio-entrypoint.sh"), "--preflight"],
                          env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    line = next(l for l in done.stdout.splitlines() if l.startswith("browser_extra_args="))
    return ("--no-sandbox", *line.split("=", 1)[1].split())


@pytest.mark.parametrize("flags", ["project", "aio"])
def test_chromium_with_the_projects_flags_resolves_and_dials_nothing_of_its_own(flags: str, tmp_path: Path) -> None:
    exe = harness.resolve_chromium()
    assert exe, "no Chromium"
    assert shutil.which("unshare"), "no unshare (util-linux)"
    work = Path(tempfile.mkdtemp(prefix="bs-ownnet-", dir="/var/tmp"))
    try:
        netlog = work / "netlog.json"
        chromium = shlex.join([
            exe, "--headless", "--disable-gpu", *(harness.chromium_flags() if flags == "project" else aio_words(tmp_path)),
            f"--user-data-dir={work / 'profile'}",
            f"--log-net-log={netlog}", "--net-log-capture-mode=Everything", "about:blank",
        ])
        # A namespace of its own, with only loopback: nothing can leave even if Chromium tried.
        script = f"ip link set lo up && timeout -s INT {RUN_SECONDS} {chromium} >{shlex.quote(str(work / 'out.log'))} 2>&1; true"
        done = subprocess.run(["unshare", "-n", "bash", "-c", script], capture_output=True, text=True, timeout=RUN_SECONDS + 60)
        assert done.returncode == 0, done.stdout + done.stderr
        names, events = netlog_events(netlog)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    def of(kind: str) -> list[dict]:
        return [e.get("params", {}) for e in events if names.get(e["type"]) == kind]

    # Positive control: Chromium's own services did make requests in the time watched.
    own = [p["url"] for p in of("URL_REQUEST_START_JOB") if "url" in p and not p["url"].startswith(("data:", "about:"))]
    assert own, "Chromium made no request of its own while watched: this run proves nothing"
    # No name resolved by Chromium itself (the host resolver answers from the rules, no DNS query)...
    assert not of("DNS_TRANSACTION"), Counter(p.get("hostname") for p in of("DNS_TRANSACTION"))
    assert not of("HOST_RESOLVER_DNS_TASK"), of("HOST_RESOLVER_DNS_TASK")[:3]
    # ...and every TCP connection it tried went to the proxy that refuses them.
    dialled = Counter(p["address"] for p in of("TCP_CONNECT_ATTEMPT") if "address" in p)
    assert dialled and set(dialled) == {REFUSING_PROXY}, (dialled, own[:5])
