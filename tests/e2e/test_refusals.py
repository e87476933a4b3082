"""Everything browser-shell refuses is refused up front: exit 126, a named rule, and no process spawned.

"No process spawned" is proven with a canary: a browser-shell instance whose --agent-browser is a
shell script that appends one line per exec to a marker file. The module fixture asserts the
positive control (an allowed call does append), then every case here must leave the marker as is.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from mcp import MCPError

from server import describe

pytestmark = pytest.mark.chromium

REFUSED = re.compile(r"^refused \[([A-Za-z0-9_.-]+)\]: \S")

DENIED = (
    "eval evaluate upload download route unroute network read connect inspect record state trace "
    "profiler auth plugin stream dashboard mcp chat install upgrade batch cookies storage set tab"
).split()
# Not in the original list but equally dangerous; refused by design as well.
DENIED_EXTRA = ["doctor", "session"]

OK_ARGV = ["get", "url"]

# Acceptable rule names per kind of refusal. The brief names the generic rules
# (request.invalid, args.invalid); the server may name a more specific one for the same
# violation (session_id.invalid, argv.invalid, timeout.invalid, args.global_flag), which
# still names the rule that decided.
FLAG = {"args.invalid", "args.global_flag"}
SESSION = {"request.invalid", "session_id.invalid"}
ARGV = {"request.invalid", "args.invalid", "argv.invalid"}
TIMEOUT = {"request.invalid", "timeout.invalid"}

# (id, arguments, acceptable rules)
CASES: list[tuple[str, Any, set[str]]] = []


def case(case_id: str, arguments: Any, rules: set[str]) -> None:
    CASES.append((case_id, arguments, rules))


for sub in DENIED:
    case(f"denied-{sub}", {"session_id": "r1", "argv": [sub]}, {"subcommand.denied"})
    case(f"denied-{sub}-with-arg", {"session_id": "r1", "argv": [sub, "x"]}, {"subcommand.denied"})
for sub in DENIED_EXTRA:
    case(f"denied-{sub}", {"session_id": "r1", "argv": [sub]}, {"subcommand.denied"})
case("denied-wait--fn", {"session_id": "r1", "argv": ["wait", "--fn", "window.x"]}, {"subcommand.denied"})
case("denied-close--all", {"session_id": "r1", "argv": ["close", "--all"]}, {"subcommand.denied", "args.invalid"})
case("denied-get-cdp-url", {"session_id": "r1", "argv": ["get", "cdp-url"]}, {"subcommand.denied", "args.invalid"})
case("unknown-frobnicate", {"session_id": "r1", "argv": ["frobnicate"]}, {"subcommand.unknown"})

# Flags in positions where they are flags, not free text.
case("flag-get-url--cdp", {"session_id": "r1", "argv": ["get", "url", "--cdp", "9333"]}, FLAG)
case("flag-snapshot--cdp=", {"session_id": "r1", "argv": ["snapshot", "--cdp=9333"]}, FLAG)
case("flag-click--session", {"session_id": "r1", "argv": ["click", "#q", "--session", "x"]}, FLAG)
case("flag-snapshot--json", {"session_id": "r1", "argv": ["snapshot", "--json"]}, FLAG)
case("flag-snapshot--config", {"session_id": "r1", "argv": ["snapshot", "--config", "/tmp/x"]}, FLAG)
case("flag-snapshot--debug", {"session_id": "r1", "argv": ["snapshot", "--debug"]}, FLAG)
case(
    "flag-leading--cdp",
    {"session_id": "r1", "argv": ["--cdp", "9333", "get", "url"]},
    FLAG | {"subcommand.unknown", "subcommand.denied"},
)

# Session ids outside ^[a-zA-Z0-9._-]{1,64}$.
for sid_id, sid in (
    ("empty", ""),
    ("space", "a b"),
    ("slash", "a/b"),
    ("65-chars", "a" * 65),
    ("non-ascii", "é"),
):
    case(f"session-id-{sid_id}", {"session_id": sid, "argv": OK_ARGV}, SESSION)

# Size limits.
case("argv-33-items", {"session_id": "r1", "argv": ["fill", "#free", *(["x"] * 31)]}, ARGV)
case("argv-item-4097-bytes", {"session_id": "r1", "argv": ["fill", "#free", "a" * 4097]}, ARGV)
case("argv-item-4097-bytes-multibyte", {"session_id": "r1", "argv": ["fill", "#free", "é" * 2049]}, ARGV)
case("argv-empty", {"session_id": "r1", "argv": []}, ARGV)

# Wrong types / shapes.
case("argv-is-string", {"session_id": "r1", "argv": "get url"}, ARGV)
case("argv-item-object", {"session_id": "r1", "argv": ["get", {"url": 1}]}, ARGV)
case("argv-item-null", {"session_id": "r1", "argv": ["get", None]}, ARGV)
case("argv-item-array", {"session_id": "r1", "argv": ["get", ["url"]]}, ARGV)
case("timeout-0", {"session_id": "r1", "argv": OK_ARGV, "timeout_sec": 0}, TIMEOUT)
case("timeout-121", {"session_id": "r1", "argv": OK_ARGV, "timeout_sec": 121}, TIMEOUT)
case("timeout-string", {"session_id": "r1", "argv": OK_ARGV, "timeout_sec": "x"}, TIMEOUT)
case("timeout-fraction", {"session_id": "r1", "argv": OK_ARGV, "timeout_sec": 1.5}, TIMEOUT)
case("extra-property", {"session_id": "r1", "argv": OK_ARGV, "cdp_port": 9333}, {"request.invalid"})
case("missing-argv", {"session_id": "r1"}, ARGV)
case("missing-session-id", {"argv": OK_ARGV}, SESSION)
case("session-id-number", {"session_id": 5, "argv": OK_ARGV}, SESSION)

# Control characters.
case("nul-in-item", {"session_id": "r1", "argv": ["fill", "#free", "a\u0000b"]}, ARGV)

# URL schemes other than http(s).
for scheme_id, url in (
    ("file", "file:///etc/passwd"),
    ("javascript", "javascript:alert(1)"),
    ("chrome", "chrome://version"),
    ("data", "data:text/html,x"),
):
    case(f"open-{scheme_id}", {"session_id": "r1", "argv": ["open", url]}, {"url.scheme"})


@pytest.mark.parametrize(("arguments", "rules"), [(a, r) for _, a, r in CASES], ids=[c[0] for c in CASES])
def test_a_refused_call_is_answered_126_with_its_rule_and_spawns_nothing(canary_server, arguments: Any, rules: set[str]) -> None:
    """A tool result (not a JSON-RPC error): isError, exit 126, `refused [<rule>]: ...` naming an
    acceptable rule, no stdout, our session id echoed when it is valid; the canary saw no exec."""
    srv, canary = canary_server
    before = canary.lines()
    try:
        is_error, reply = srv.call_raw(arguments)
    except MCPError as exc:
        pytest.fail(
            f"expected a refusal result (isError, exit 126) but the server answered a JSON-RPC error "
            f"{exc.code}: {exc.message}\n(canary marker grew by {canary.lines()[len(before):]})",
            pytrace=False,
        )
    after = canary.lines()
    assert after == before, f"refused call still spawned agent-browser: marker grew by {after[len(before):]}"
    assert is_error, f"expected isError=true:\n{describe(reply)}"
    assert reply["exit_code"] == 126, f"expected exit_code 126:\n{describe(reply)}"
    m = REFUSED.match(reply["stderr"])
    assert m, f"stderr does not start with 'refused [<rule>]: ...': {reply['stderr']!r}"
    assert m.group(1) in rules, f"refused under rule {m.group(1)!r}, expected one of {sorted(rules)}: {reply['stderr']!r}"
    assert reply["stdout"] == "", f"a refusal should carry no stdout: {reply['stdout']!r}"
    if isinstance(arguments, dict) and isinstance(arguments.get("session_id"), str):
        sid = arguments["session_id"]
        if re.fullmatch(r"[a-zA-Z0-9._-]{1,64}", sid):
            assert reply["session_id"] == sid, reply


def test_unknown_tool_name_is_refused_without_spawning(canary_server) -> None:
    srv, canary = canary_server
    before = canary.lines()
    with pytest.raises(MCPError) as info:
        srv.call_raw({"session_id": "r1", "argv": OK_ARGV}, tool="frobnicate")
    assert info.value.code == -32602, f"code {info.value.code}: {info.value.message}"
    assert canary.lines() == before, "unknown tool name still spawned agent-browser"
    # What was asked is on the record: the name it asked for (capped), its session, its argv's MAC.
    records = [json.loads(line) for line in srv.cfg.audit_log.read_text().splitlines()]
    refused = [r for r in records if r.get("rule") == "tool.unknown"][-1]
    assert refused["tool"] == "frobnicate" and refused["session_id"] == "r1", refused
    assert len(refused["argv_mac"]) == 64, refused
    with pytest.raises(MCPError):
        srv.call_raw({"session_id": "r1", "argv": OK_ARGV}, tool="x" * 5000)
    records = [json.loads(line) for line in srv.cfg.audit_log.read_text().splitlines()]
    long_name = [r for r in records if r.get("rule") == "tool.unknown"][-1]["tool"]
    assert long_name.startswith("x" * 128) and len(long_name) < 300, long_name


def test_an_allowed_call_still_reaches_the_canary_at_the_end(canary_server) -> None:
    """The detector keeps working for the whole module (positive control at the end, too)."""
    srv, canary = canary_server
    before = canary.lines()
    srv.call("canary-late", ["get", "url"], 10)
    assert len(canary.lines()) > len(before), "an allowed call no longer reaches the canary"
    canary.settle_after_allowed_call(before)  # its standby, too, before any later test looks
