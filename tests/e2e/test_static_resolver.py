"""The server resolves host names with glibc's built-in `files` and `dns` only: whatever else the host's
/etc/nsswitch.conf names (mdns, systemd-resolved's `resolve`, …) is never loaded into it. The shipped
binary is static (deploy/static-link), and a static glibc that loads a host's NSS module runs that
module's libc beside its own (docs/design.md, "One static server"). Runs the binary's CLI in a
loopback-only network namespace, so the lookup it makes reaches nothing."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.binary


def hosts_modules() -> list[str]:
    line = next((l for l in Path("/etc/nsswitch.conf").read_text().splitlines() if l.startswith("hosts:")), "")
    return [w for w in line.split()[1:] if not w.startswith("[")]


def test_resolving_a_name_loads_no_nss_module_from_the_host(server_bin: Path, tmp_path: Path) -> None:
    others = [m for m in hosts_modules() if m not in ("files", "dns")]
    if not others:
        pytest.skip("this host's nsswitch.conf names only files and dns: nothing else could be loaded")
    if not shutil.which("strace") or not shutil.which("unshare"):
        pytest.fail("strace and unshare are needed (tests/run installs them)")
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps({"open": {"allow_private_cidrs": ["127.0.0.1/32"]}}))
    trace = tmp_path / "openat.txt"
    # `.local` is what mdns modules answer; in this namespace no query leaves the host.
    run = subprocess.run(
        ["unshare", "-n", "sh", "-c", 'ip link set lo up && exec "$@"', "sh",
         "strace", "-f", "-qq", "-e", "trace=openat", "-o", str(trace),
         str(server_bin), "policy", "explain", "--policy", str(policy), "http://printer.local:8080/"],
        capture_output=True, text=True, timeout=60,
    )
    assert run.returncode == 1 and "refused [dns.failed]" in run.stdout, run.stdout + run.stderr
    opened = trace.read_text()
    # The lookup did consult NSS (so the check below looks at a real lookup) ...
    assert "/etc/nsswitch.conf" in opened or "/etc/hosts" in opened, opened
    # ... and took no code from the host for it.
    loaded = re.findall(r'"([^"]*\.so[^"]*)"', opened)
    assert not loaded, f"the server loaded {loaded} to resolve a name (nsswitch names {others})"
