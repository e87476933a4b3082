"""The deploy files the static suite reads, and the small strict parsers it reads them with.

There is no Docker engine where the suite runs, so the AIO image is never built here. What can be
checked without one is checked: the Dockerfile, compose file, hub config, supervisord program and
nginx files are parsed (the parsers below: no PyYAML, no nginx needed) and every invariant of the
gateway is asserted on the *rendered* nginx configuration, the very files the image's entrypoint
installs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
AIO = ROOT / "deploy" / "aio"
NGINX_SRC = AIO / "nginx"
SCRIPTS = AIO / "scripts"

PLACEHOLDERS = (
    "PUBLIC_LISTEN_IPV4",
    "PUBLIC_PORT",
    "AUTH_BACKEND_PORT",
    "AUTH_SERVICE_PORT",
    "MCP_HUB_PORT",
    "WEBSOCKET_PROXY_PORT",
    "NGINX_ROUTES_DIR",
    "NOVNC_DIR",
    "GATEWAY_HOST_ENTRIES",
    "GATEWAY_ORIGIN_ENTRIES",
)
HUB_PORT = 8079
AUTH_BACKEND_PORT = 8081
AUTH_SERVICE_PORT = 8088
WEBSOCKET_PORT = 6080
PUBLIC_PORT = 8080

# The routes the gateway may serve, and nothing else: (modifier, path).
ALLOWED_ROUTES = {("=", "/mcp"), ("", "/vnc/"), ("=", "/websockify"), ("=", "/tickets"), ("", "/")}


# =========================================================================== parsers
# --------------------------------------------------------------------------- nginx


@dataclass
class Directive:
    name: str
    args: list[str]
    block: list["Directive"] | None = None
    source: str = ""

    def children(self, name: str) -> list["Directive"]:
        return [d for d in self.block or [] if d.name == name]

    def child(self, name: str) -> "Directive":
        found = self.children(name)
        assert len(found) == 1, f"{self.name} {self.args}: expected one '{name}', found {len(found)}"
        return found[0]

    def values(self, name: str) -> list[list[str]]:
        return [d.args for d in self.children(name)]


def nginx_tokens(text: str, source: str) -> list[tuple[str, bool]]:
    """(token, quoted) pairs; '{', '}' and ';' are tokens of their own."""
    tokens: list[tuple[str, bool]] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c.isspace():
            i += 1
        elif c == "#":
            while i < n and text[i] != "\n":
                i += 1
        elif c in "{};":
            tokens.append((c, False))
            i += 1
        elif c in "\"'":
            j, buf = i + 1, []
            while j < n and text[j] != c:
                if text[j] == "\\" and j + 1 < n:
                    buf.append(text[j : j + 2])
                    j += 2
                    continue
                buf.append(text[j])
                j += 1
            assert j < n, f"{source}: unterminated quote"
            tokens.append(("".join(buf), True))
            i = j + 1
        else:
            j = i
            while j < n and not text[j].isspace() and text[j] not in ";'\"":
                if text[j] == "{" and not (j > i and text[j - 1] == "$"):
                    break
                if text[j] == "}" and "${" not in text[i:j]:
                    break
                j += 1
            tokens.append((text[i:j], False))
            i = j
    return tokens


def parse_nginx(text: str, source: str = "<nginx>") -> list[Directive]:
    tokens = nginx_tokens(text, source)
    pos = 0

    def block() -> list[Directive]:
        nonlocal pos
        out: list[Directive] = []
        while pos < len(tokens):
            tok, quoted = tokens[pos]
            if tok == "}" and not quoted:
                return out
            assert not (tok in "{;" and not quoted), f"{source}: stray '{tok}'"
            name, args = tok, []
            pos += 1
            while pos < len(tokens) and not (tokens[pos][0] in "{};" and not tokens[pos][1]):
                args.append(tokens[pos][0])
                pos += 1
            assert pos < len(tokens), f"{source}: directive '{name}' not terminated"
            end = tokens[pos][0]
            pos += 1
            if end == ";":
                out.append(Directive(name, args, None, source))
            elif end == "{":
                inner = block()
                assert pos < len(tokens) and tokens[pos][0] == "}", f"{source}: '{name}' block not closed"
                pos += 1
                out.append(Directive(name, args, inner, source))
            else:
                raise AssertionError(f"{source}: unexpected '}}' after '{name}'")
        return out

    parsed = block()
    assert pos == len(tokens), f"{source}: unbalanced '}}'"
    return parsed


def walk(directives: list[Directive]):
    for d in directives:
        yield d
        if d.block:
            yield from walk(d.block)


def is_comment_only(path: Path) -> bool:
    return all(not line.strip() or line.lstrip().startswith("#") for line in path.read_text().splitlines())


# --------------------------------------------------------------------------- YAML subset
class YamlSubsetError(AssertionError):
    pass


def _strip_yaml_comment(line: str) -> str:
    quote = None
    for i, c in enumerate(line):
        if quote:
            if c == quote:
                quote = None
        elif c in "\"'":
            quote = c
        elif c == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i]
    return line


def _yaml_scalar(text: str, lineno: int):
    text = text.strip()
    if text.startswith('"'):
        if not text.endswith('"') or len(text) < 2:
            raise YamlSubsetError(f"line {lineno}: bad double-quoted scalar")
        body = text[1:-1]
        return re.sub(r"\\(.)", r"\1", body)
    if text.startswith("'"):
        if not text.endswith("'") or len(text) < 2:
            raise YamlSubsetError(f"line {lineno}: bad single-quoted scalar")
        return text[1:-1].replace("''", "'")
    if text[:1] in set("[{&*!|>%@`"):
        raise YamlSubsetError(f"line {lineno}: unsupported YAML ({text!r})")
    if re.fullmatch(r"-?\d+", text):
        return int(text)
    if text in ("true", "false"):
        return text == "true"
    if text in ("null", "~", ""):
        return None
    return text


_KEY = re.compile(r'^(?:"(?P<dq>[^"]*)"|\'(?P<sq>[^\']*)\'|(?P<plain>[^\s"\'#:][^:#]*?))\s*:(?:\s+(?P<rest>.*)|$)')


def _yaml_key(content: str):
    m = _KEY.match(content)
    if not m:
        return None
    key = m.group("dq") if m.group("dq") is not None else m.group("sq") if m.group("sq") is not None else m.group("plain")
    return key.strip(), (m.group("rest") or "").strip()


def parse_yaml_subset(text: str):
    """Block mappings, block sequences and scalars; anything else is an error."""
    lines: list[tuple[int, str, int]] = []
    for lineno, raw in enumerate(text.splitlines(), 1):
        if "\t" in raw[: len(raw) - len(raw.lstrip())]:
            raise YamlSubsetError(f"line {lineno}: tab indentation")
        content = _strip_yaml_comment(raw).rstrip()
        if not content.strip():
            continue
        if content.strip() in ("---", "..."):
            raise YamlSubsetError(f"line {lineno}: multiple documents")
        lines.append((len(content) - len(content.lstrip(" ")), content.strip(), lineno))
    if not lines:
        return None

    def is_item(s: str) -> bool:
        return s == "-" or s.startswith("- ")

    def block(i: int, indent: int):
        return seq(i, indent) if is_item(lines[i][1]) else mapping(i, indent)

    def mapping(i: int, indent: int):
        out: dict = {}
        while i < len(lines) and lines[i][0] == indent and not is_item(lines[i][1]):
            _, content, lineno = lines[i]
            kv = _yaml_key(content)
            if kv is None:
                raise YamlSubsetError(f"line {lineno}: expected 'key: value', got {content!r}")
            key, rest = kv
            if key in out:
                raise YamlSubsetError(f"line {lineno}: duplicate key {key!r}")
            i += 1
            if rest:
                out[key] = _yaml_scalar(rest, lineno)
            elif i < len(lines) and (lines[i][0] > indent or (lines[i][0] == indent and is_item(lines[i][1]))):
                out[key], i = block(i, lines[i][0])
            else:
                out[key] = None
        if i < len(lines) and lines[i][0] > indent:
            raise YamlSubsetError(f"line {lines[i][2]}: unexpected indentation")
        return out, i

    def seq(i: int, indent: int):
        out: list = []
        while i < len(lines) and lines[i][0] == indent and is_item(lines[i][1]):
            _, content, lineno = lines[i]
            rest = content[1:].lstrip()
            if not rest:
                i += 1
                if i >= len(lines) or lines[i][0] <= indent:
                    raise YamlSubsetError(f"line {lineno}: empty list item")
                value, i = block(i, lines[i][0])
                out.append(value)
            elif _yaml_key(rest) is not None and not rest.startswith(("'", '"')) or re.match(r'^["\'][^"\']*["\']\s*:', rest):
                column = indent + (len(content) - len(rest))
                lines[i] = (column, rest, lineno)
                value, i = mapping(i, column)
                out.append(value)
            else:
                out.append(_yaml_scalar(rest, lineno))
                i += 1
        return out, i

    value, i = block(0, lines[0][0])
    if i != len(lines):
        raise YamlSubsetError(f"line {lines[i][2]}: unexpected content")
    return value


# --------------------------------------------------------------------------- Dockerfile
@dataclass
class Stage:
    image: str
    name: str | None
    platform: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def of(self, keyword: str) -> list[str]:
        return [args for kw, args in self.instructions if kw == keyword]


def parse_dockerfile(text: str) -> tuple[list[str], list[Stage]]:
    logical: list[str] = []
    buf = ""
    for raw in text.splitlines():
        stripped = raw.strip()
        if stripped.startswith("#") or (not stripped and not buf):
            continue
        if stripped.endswith("\\"):
            buf += stripped[:-1] + " "
            continue
        logical.append((buf + stripped).strip())
        buf = ""
    assert not buf, "Dockerfile ends inside a line continuation"
    global_args: list[str] = []
    stages: list[Stage] = []
    for line in logical:
        if not line:
            continue
        keyword, _, args = line.partition(" ")
        keyword = keyword.upper()
        args = args.strip()
        if keyword == "FROM":
            words = args.split()
            platform = None
            while words and words[0].startswith("--"):
                flag = words.pop(0)
                if flag.startswith("--platform="):
                    platform = flag.split("=", 1)[1]
            image = words[0]
            name = words[2] if len(words) == 3 and words[1].upper() == "AS" else None
            assert len(words) in (1, 3), f"odd FROM: {line}"
            stages.append(Stage(image, name, platform))
        elif not stages:
            assert keyword == "ARG", f"only ARG may precede the first FROM, got {keyword}"
            global_args.append(args)
        else:
            stages[-1].instructions.append((keyword, args))
    return global_args, stages


def env_pairs(args: str) -> dict[str, str]:
    pairs = {}
    for m in re.finditer(r'(\w+)=("(?:[^"\\]|\\.)*"|\S*)', args):
        value = m.group(2)
        pairs[m.group(1)] = value[1:-1] if value.startswith('"') else value
    return pairs


def copy_parts(args: str) -> tuple[dict[str, str], list[str], str]:
    words = args.split()
    flags = {}
    while words and words[0].startswith("--"):
        key, _, value = words.pop(0)[2:].partition("=")
        flags[key] = value
    return flags, words[:-1], words[-1]


# =========================================================================== the rendered gateway
def python_render(values: dict[str, str], out: Path) -> None:
    for sub in ("http", "routes"):
        (out / sub).mkdir(parents=True, exist_ok=True)
        for f in sorted((NGINX_SRC / sub).iterdir()):
            text = f.read_text()
            for key in PLACEHOLDERS:
                text = text.replace("${" + key + "}", values[key])
            (out / sub / f.name).write_text(text)


def render_values(out: Path) -> dict[str, str]:
    return {
        "PUBLIC_LISTEN_IPV4": "0.0.0.0",
        "PUBLIC_PORT": str(PUBLIC_PORT),
        "AUTH_BACKEND_PORT": str(AUTH_BACKEND_PORT),
        "AUTH_SERVICE_PORT": str(AUTH_SERVICE_PORT),
        "MCP_HUB_PORT": str(HUB_PORT),
        "WEBSOCKET_PROXY_PORT": str(WEBSOCKET_PORT),
        "NGINX_ROUTES_DIR": str(out / "routes"),
        "NOVNC_DIR": "/opt/novnc",
        # What render-nginx.sh renders without GATEWAY_ALLOWED_HOSTS.
        "GATEWAY_HOST_ENTRIES": "    # GATEWAY_ALLOWED_HOSTS: none",
        "GATEWAY_ORIGIN_ENTRIES": "    # GATEWAY_ALLOWED_HOSTS: none",
    }


@dataclass
class Gateway:
    http: list[Directive]
    public: Directive
    internal: Directive
    routes: dict[str, list[Directive]]
    maps: dict[str, Directive]


def load_gateway(rendered: Path, variant: str) -> Gateway:
    path = rendered / "http" / f"nginx-server-{variant}-auth.conf"
    http = parse_nginx(path.read_text(), path.name)
    servers = [d for d in http if d.name == "server"]
    assert len(servers) == 2, f"{path.name}: expected the public and the internal server"
    public, internal = servers
    routes = {}
    for inc in internal.values("include"):
        pattern = inc[0]
        assert pattern == str(rendered / "routes") + "/*.conf", f"internal server includes {pattern}"
        for f in sorted((rendered / "routes").glob("*.conf")):
            routes[f.name] = parse_nginx(f.read_text(), f.name)
    maps = {d.args[1]: d for d in http if d.name == "map"}
    return Gateway(http, public, internal, routes, maps)


def route_locations(gw: Gateway) -> dict[tuple[str, str], Directive]:
    found: dict[tuple[str, str], Directive] = {}
    for name, directives in gw.routes.items():
        for d in directives:
            assert d.name == "location", f"{name}: only location blocks belong in a route file, found '{d.name}'"
            modifier, path = (d.args[0], d.args[1]) if len(d.args) == 2 else ("", d.args[0])
            assert (modifier, path) not in found, f"duplicate location {modifier} {path}"
            found[(modifier, path)] = d
    return found


def match_location(locations: dict[tuple[str, str], Directive], uri: str) -> tuple[str, str]:
    """nginx's choice for a normalised URI (exact, then longest prefix; no regex locations)."""
    if ("=", uri) in locations:
        return ("=", uri)
    prefixes = [k for k in locations if k[0] in ("", "^~") and uri.startswith(k[1])]
    assert prefixes, f"no location matches {uri}"
    return max(prefixes, key=lambda k: len(k[1]))


def map_lookup(map_block: Directive, key: str) -> str:
    default, exact, regexes = None, {}, []
    for entry in map_block.block or []:
        assert entry.block is None and len(entry.args) == 1, f"odd map entry {entry}"
        if entry.name == "default":
            default = entry.args[0]
        elif entry.name.startswith("~"):
            # PCRE's \z (very end) is Python's \Z; PCRE's \Z is not used.
            pattern = entry.name.lstrip("~*").replace(r"\z", r"\Z")
            assert r"\Z" not in entry.name, "PCRE \\Z also matches before a final newline: use \\z"
            regexes.append((re.compile(pattern, re.I if entry.name.startswith("~*") else 0), entry.args[0]))
        else:
            exact[entry.name] = entry.args[0]
    if key in exact:
        return exact[key]
    for regex, value in regexes:
        if regex.search(key):
            return value
    return default
