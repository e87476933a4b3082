"""The code map's invariants (docs/design.md, "Code layout"), held against the source: the folders of
src/ import each other without a cycle, the gate never imports a call's stages, only the runner starts
processes, a call never opens a socket nor sees the whole server, and only the audit crate mints the proof that an intent is
durable. Read from the files; nothing is built."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.static

SRC = Path(__file__).resolve().parents[2] / "src"


def strip_tests(text: str) -> str:
    """`text` without its `#[cfg(test)]` items (tests may do anything): each up to the `;` of a
    `mod x;` or the brace that closes its block, whatever follows kept. Braces inside string
    literals and `'{'`, `'}'` do not count."""
    out, at = [], 0
    while (start := text.find("#[cfg(test)]", at)) != -1:
        out.append(text[at:start])
        i, depth, in_string = start + len("#[cfg(test)]"), 0, False
        while i < len(text):
            c = text[i]
            if in_string:
                if c == "\\":
                    i += 1
                elif c == '"':
                    in_string = False
            elif text.startswith(("'{'", "'}'"), i):
                i += 2
            elif c == '"':
                in_string = True
            elif c == "{":
                depth += 1
            elif c == "}":
                depth -= 1
                if depth == 0:
                    break
            elif c == ";" and depth == 0:
                break
            i += 1
        at = i + 1
    out.append(text[at:])
    return "".join(out)


def production_code(path: Path) -> str:
    """The file without comments and without its `#[cfg(test)]` items."""
    if path.name.endswith("tests.rs"):
        return ""
    text = strip_tests(path.read_text())
    return "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("//"))


SAMPLE = """fn before() {}
#[cfg(test)]
mod tests {
    fn inside() { let s = format!("{x}"); }
}
pub(crate) fn after() { std::process::Command::new("x"); }
#[cfg(test)]
#[path = "x_tests.rs"]
mod sibling;
fn last() {}
"""


def test_code_after_a_test_module_is_still_scanned() -> None:
    """Only the `#[cfg(test)]` item is left out, not the rest of the file: production code below a
    test module (or a `mod tests;` line) was never held to the rules."""
    kept = strip_tests(SAMPLE)
    assert "fn before" in kept and "fn after" in kept and "fn last" in kept, kept
    assert "fn inside" not in kept and "mod sibling" not in kept, kept


def test_the_runner_and_the_gate_meet_only_in_daemons() -> None:
    graph = imports()
    assert "daemons" in graph["runner"] and "daemons" in graph["gate"], "the scan would prove nothing"
    assert "gate" not in graph["runner"] and "runner" not in graph["gate"], (graph["runner"], graph["gate"])


def folders() -> dict[str, list[Path]]:
    found: dict[str, list[Path]] = {}
    for entry in SRC.iterdir():
        if entry.name in ("lib.rs", "main.rs", "bin"):
            continue
        name = entry.name.removesuffix(".rs")
        found[name] = sorted(entry.rglob("*.rs")) if entry.is_dir() else [entry]
    return found


def imports() -> dict[str, set[str]]:
    """Folder → the folders its production code names as `crate::<folder>`."""
    mods = folders()
    graph: dict[str, set[str]] = {name: set() for name in mods}
    for name, files in mods.items():
        for path in files:
            code = production_code(path)
            named = set(re.findall(r"crate::(\w+)", code))
            for group in re.findall(r"use crate::\{([^;]*)\};", code, re.S):
                named |= {m.group(1) for item in re.split(r",(?![^{]*\})", group) if (m := re.match(r"\s*(\w+)", item))}
            graph[name] |= {n for n in named if n in mods and n != name}
    return graph


def test_the_folders_of_src_import_each_other_without_a_cycle() -> None:
    graph = imports()
    assert graph["call"], "the scan found no imports: the check below would prove nothing"
    state: dict[str, str] = {}

    def visit(node: str, path: list[str]) -> None:
        state[node] = "open"
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                raise AssertionError(f"a cycle of folders: {' → '.join([*path, node, nxt])}\n{graph}")
            if nxt not in state:
                visit(nxt, [*path, node])
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node, [])


def test_the_gate_never_imports_a_calls_stages_or_the_server() -> None:
    assert not imports()["gate"] & {"call", "server", "transport", "cli"}, imports()["gate"]


def files_matching(pattern: str) -> set[str]:
    return {
        str(path.relative_to(SRC))
        for files in folders().values()
        for path in files
        if re.search(pattern, production_code(path))
    }


def test_only_the_runner_starts_processes() -> None:
    spawning = files_matching(r"process::Command|Command::new")
    assert spawning and all(f.startswith("runner/") for f in spawning), spawning


def test_a_call_never_opens_a_socket() -> None:
    assert not {f for f in files_matching(r"TcpStream|UnixStream|TcpListener|UdpSocket") if f.startswith("call/")}


def test_a_calls_stages_take_the_services_they_use_never_the_whole_server() -> None:
    naming = files_matching(r"\bServer\b")
    assert "transport/mcp.rs" in naming, "the scan found no `Server` at all: the check would prove nothing"
    assert not {f for f in naming if f.startswith("call/")}, naming


def test_only_the_audit_crate_mints_the_intents_proof() -> None:
    assert not files_matching(r"IntentSynced::minted|IntentSynced\s*\{"), "the binary builds its own proof"


def test_the_egress_knows_no_gate_and_no_call() -> None:
    assert not imports()["egress"] & {"gate", "call", "server", "transport", "cli", "runner"}, imports()["egress"]


def long_functions(limit: int) -> list[str]:
    """Production functions (crates' src/, tests cut off) longer than `limit` lines, brace to brace."""
    found = []
    for path in sorted(SRC.parent.glob("*/src/**/*.rs")) + sorted(SRC.rglob("*.rs")):
        if path.name.endswith("tests.rs") or "target" in path.parts:
            continue
        lines = strip_tests(path.read_text()).split("\n")
        i = 0
        while i < len(lines):
            m = re.match(r"^(\s*)(pub(\([^)]*\))?\s+)?(const\s+)?(async\s+)?fn\s+(\w+)", lines[i])
            if m and not lines[i].rstrip().endswith(";"):
                indent, start = len(m.group(1)), i
                end = start
                while end < len(lines) and not (
                    lines[end].startswith(" " * indent + "}") and len(lines[end]) - len(lines[end].lstrip()) == indent
                ):
                    end += 1
                if end - start + 1 > limit:
                    found.append(f"{path.relative_to(SRC.parent)}: {m.group(6)} ({end - start + 1} lines)")
                i = end
            i += 1
    return found


def test_no_production_function_is_longer_than_eighty_lines() -> None:
    assert long_functions(limit=10), "the scan found no function over 10 lines: it would prove nothing"
    assert not long_functions(limit=80), long_functions(limit=80)


def production_files() -> list[Path]:
    return [p for p in sorted(SRC.parent.glob("*/src/**/*.rs")) + sorted(SRC.rglob("*.rs"))
            if "target" not in p.parts]


def test_no_production_file_is_longer_than_six_hundred_lines() -> None:
    """Production text: comments and test items left out, as everywhere in this file."""
    lengths = {str(p.relative_to(SRC.parent)): len(production_code(p).splitlines()) for p in production_files()}
    assert max(lengths.values()) > 300, "the scan found no file over 300 lines: it would prove nothing"
    assert not {f: n for f, n in lengths.items() if n > 600}, sorted(lengths.items(), key=lambda kv: -kv[1])[:5]


def test_tests_longer_than_sixty_lines_live_in_a_sibling_file() -> None:
    """One layout: `#[cfg(test)] #[path = "x_tests.rs"] mod tests;` for anything over ~60 lines."""
    inline = {}
    for path in sorted(SRC.parent.glob("*/src/**/*.rs")) + sorted(SRC.rglob("*.rs")):
        text = path.read_text()
        at = text.find("#[cfg(test)]\nmod tests {")
        if at >= 0:
            inline[str(path.relative_to(SRC.parent))] = text[at:].count("\n")
    assert inline, "no inline test module found: the check would prove nothing"
    assert not {f: n for f, n in inline.items() if n > 60}, inline


def string_errors(code: str) -> list[str]:
    """Every `Result<T, String>` in `code`, nested generics included."""
    found = []
    for m in re.finditer(r"\bResult<", code):
        depth, i, top_comma = 1, m.end(), None
        while i < len(code) and depth:
            c = code[i]
            depth += c == "<"
            depth -= c == ">"
            if c == "," and depth == 1:
                top_comma = i
            i += 1
        if top_comma is not None and code[top_comma + 1:i - 1].strip() == "String":
            found.append(code[m.start():i])
    return found


# Errors that stay words, each for one of three reasons. Where code branches on a failure, it is a type
# (gate::GateError, audit::VouchFailure, audit::AuditError, policy::PolicyError, …); these are only ever
# read, by a person or a record.
A_PERSONS_WORDS = "a parser's or validator's message, which its caller wraps with the file or flag it read"
STOPS_THE_START = "a start-up step whose failure stops the start, with its message"
CROSSES_EXEC = "the trampoline's failure line, which crosses an exec and is read back as text"
WORDS_FOR_A_REASON = {
    "src/policy/address.rs": A_PERSONS_WORDS,
    "src/policy/url_policy.rs": A_PERSONS_WORDS,
    "src/policy/approvals.rs": A_PERSONS_WORDS,
    "src/policy/secrets.rs": A_PERSONS_WORDS,
    "src/daemons/uid_claim.rs": A_PERSONS_WORDS,
    "src/daemons/identities.rs": A_PERSONS_WORDS,
    "src/runner/child_policy.rs": A_PERSONS_WORDS,
    "audit/src/report/mod.rs": A_PERSONS_WORDS,
    "src/runner/spawn.rs": STOPS_THE_START,
    "hardening/src/trampoline.rs": CROSSES_EXEC,
}


def test_errors_outside_cli_are_types_but_for_words_kept_for_a_reason() -> None:
    assert string_errors("fn f() -> Result<Vec<Option<u8>>, String> {}") == ["Result<Vec<Option<u8>>, String>"]
    assert not string_errors("Mutex<HashMap<u64, Sender<Result<Value, GateError>>>>, map: HashMap<String, String>")
    found = {}
    for path in production_files():
        name = str(path.relative_to(SRC.parent))
        if not name.startswith("src/cli/") and (errors := string_errors(production_code(path))):
            found[name] = errors
    unreasoned = {f: e for f, e in found.items() if f not in WORDS_FOR_A_REASON}
    assert not unreasoned, unreasoned
    # The list stays honest: a file whose words became a type leaves it.
    assert not set(WORDS_FOR_A_REASON) - set(found), set(WORDS_FOR_A_REASON) - set(found)

