"""Static checks of the derived AIO image (deploy/aio/, deploy/README.md).

There is no Docker engine where this runs, so the image is never built here.
What can be checked without one is checked: the Dockerfile, compose file, hub
config, supervisord program and nginx files are parsed (small strict parsers
below: no PyYAML, no nginx needed) and every invariant of the gateway is
asserted on the *rendered* nginx configuration, the very files the image's
entrypoint installs. The entrypoint's checks and both renderers (nginx, hub
config) are executed for real; `nginx -t` runs when an nginx binary is
available (NGINX_BIN, or nginx on PATH).
"""

from __future__ import annotations

import configparser
import json
import os
import re
import shutil
import subprocess
from base64 import b64encode
from dataclasses import dataclass, field
from pathlib import Path

import pytest

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


# =========================================================================== fixtures
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
    }


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


@pytest.fixture(scope="module")
def gw(rendered) -> Gateway:
    return load_gateway(rendered, "with")


@pytest.fixture(scope="module")
def gw_dev(rendered) -> Gateway:
    return load_gateway(rendered, "without")


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


# =========================================================================== Dockerfile
@pytest.fixture(scope="module")
def dockerfile() -> tuple[list[str], list[Stage]]:
    return parse_dockerfile((AIO / "Dockerfile").read_text())


@pytest.fixture(scope="module")
def final_env(dockerfile) -> dict[str, str]:
    env: dict[str, str] = {}
    for args in dockerfile[1][-1].of("ENV"):
        env.update(env_pairs(args))
    return env


@pytest.fixture(scope="module")
def hub() -> dict:
    return json.loads((AIO / "mcp-hub.json").read_text())


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


def test_the_setup_script_refuses_an_unpinned_base():
    if not shutil.which("bash"):
        pytest.skip("bash is not available")
    script = SCRIPTS / "aio-setup.sh"
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    digest = "a" * 64
    for image in (
        "ghcr.io/agent-infra/sandbox:latest",
        "ghcr.io/agent-infra/sandbox:1.0.0.152",
        f"ghcr.io/agent-infra/sandbox@sha256:{digest}",
        f"ghcr.io/agent-infra/sandbox:latest@sha256:{digest}",
        f"ghcr.io/agent-infra/sandbox:1.0.0.152@sha256:{digest[:-1]}",
        "",
    ):
        r = subprocess.run(["bash", str(script), image], env=env, capture_output=True, text=True)
        assert r.returncode == 1 and "pinned by version tag AND digest" in r.stderr, (image, r.stderr)
    # A pinned reference passes the pin check and stops at the next one (no
    # /etc/aio_version here), before anything is changed.
    if not Path("/etc/aio_version").exists():
        r = subprocess.run(
            ["bash", str(script), f"ghcr.io/agent-infra/sandbox:1.0.0.152@sha256:{digest}"],
            env=env,
            capture_output=True,
            text=True,
        )
        assert r.returncode == 1 and "/etc/aio_version is missing" in r.stderr, r.stderr


def test_rust_builder_stage_builds_for_targetarch(dockerfile):
    _, stages = dockerfile
    build = next(s for s in stages if s.name == "build")
    assert re.fullmatch(r"rust:\d+\.\d+(\.\d+)?-bookworm", build.image), build.image
    assert "TARGETARCH" in build.of("ARG")
    runs = " ".join(build.of("RUN"))
    assert "amd64) triple=x86_64-unknown-linux-gnu" in runs
    assert "arm64) triple=aarch64-unknown-linux-gnu" in runs
    assert re.search(r"cargo build --release --locked --target \"\$triple\" --bin browser-shell", runs)
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
    text = " ".join(args for _, args in final.instructions).lower()
    for word in ("cargo ", "rustup", "apt-get", "apk add", "chromium", "google-chrome", "playwright install", "npx "):
        assert word not in text, f"the final stage mentions '{word.strip()}'"
    for flags, srcs, _ in (copy_parts(a) for a in final.of("COPY")):
        if flags.get("from") == "build":
            assert srcs == ["/out/browser-shell"], f"only the browser-shell binary may leave the build stage, not {srcs}"


def test_binaries_land_where_the_hub_and_env_say(dockerfile, final_env, hub):
    _, stages = dockerfile
    dests = {}
    for flags, srcs, dest in (copy_parts(a) for a in stages[-1].of("COPY")):
        if "from" in flags:
            dests[(flags["from"], tuple(srcs))] = dest
    server = hub["mcpServers"]["browser-shell"]
    assert server["command"] == "${BROWSER_SHELL_BIN}"
    assert dests[("build", ("/out/browser-shell",))] == final_env["BROWSER_SHELL_BIN"]
    assert dests[("agent-browser", ("/out/agent-browser",))] == final_env["BROWSER_SHELL_AGENT_BROWSER"]
    assert dests[("mcp-hub", ("/opt/browser-shell/hub-venv",))] == "/opt/browser-shell/hub-venv"


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


def test_browser_shell_configuration(final_env):
    env = final_env
    assert env["BROWSER_SHELL_CDP_PORT"] == "9222"
    assert env["BROWSER_REMOTE_DEBUGGING_PORT"] == env["BROWSER_SHELL_CDP_PORT"]
    assert env["BROWSER_SHELL_POLICY"] == "/etc/agent-browser/browser-shell.policy.json"
    assert env["BROWSER_SHELL_AGENT_BROWSER"].startswith("/")
    assert env["BROWSER_SHELL_ALLOW_DEGRADED_CONFINEMENT"] == "false"
    assert env["MCP_HUB_WAIT_PORTS"] == "9222"
    assert env["DISABLE_JUPYTER"] == "true" and env["DISABLE_CODE_SERVER"] == "true"
    audit = Path(env["BROWSER_SHELL_AUDIT_LOG"])
    assert audit.is_absolute()
    # The server refuses an audit log the confined child may write.
    for writable in ("/tmp", "/dev/shm", env["BROWSER_SHELL_STATE_DIR"], env["BROWSER_SHELL_OUTPUT_DIR"]):
        assert not str(audit).startswith(writable.rstrip("/") + "/"), f"audit log {audit} lies under {writable}"
    # agent-browser's read/exec root is its binary's directory: nothing else of ours there.
    assert Path(env["BROWSER_SHELL_AGENT_BROWSER"]).parent != Path("/opt/browser-shell/bin")
    state = env["BROWSER_SHELL_STATE_DIR"]
    assert len(state) <= 27, "state dir too long for agent-browser's socket paths (browser-shell allows 27 bytes)"


# =========================================================================== hub
def test_hub_serves_exactly_one_stdio_server(hub):
    assert list(hub) == ["mcpServers"], "nothing but mcpServers in the hub config"
    servers = hub["mcpServers"]
    assert list(servers) == ["browser-shell"], f"exactly one server, browser-shell; got {list(servers)}"
    server = servers["browser-shell"]
    assert set(server) == {"command", "env"}, f"command and env only (no prefix/hidden/url/args...): {set(server)}"
    assert server["command"] == "${BROWSER_SHELL_BIN}", "the binary's absolute path comes from the image's ENV"
    env = server["env"]
    for key in (
        "BROWSER_SHELL_AGENT_BROWSER",
        "BROWSER_SHELL_CDP_PORT",
        "BROWSER_SHELL_STATE_DIR",
        "BROWSER_SHELL_OUTPUT_DIR",
        "BROWSER_SHELL_POLICY",
        "BROWSER_SHELL_AUDIT_LOG",
        "OTEL_EXPORTER_OTLP_ENDPOINT",
    ):
        assert key in env, f"browser-shell gets {key} through the hub's env (the child sees nothing else)"
    assert all(isinstance(v, str) for v in env.values())


def test_every_hub_placeholder_is_defined_in_the_image(hub, final_env):
    """render-hub-config resolves ${VAR} strictly: an undefined one fails the start."""
    text = json.dumps(hub)
    names = set(re.findall(r"\$\{([^}]+)\}", text))
    assert names, "config via env placeholders expected"
    for name in names:
        assert re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name), f"only plain ${{NAME}} placeholders: {name}"
        assert name in final_env, f"${{{name}}} is used by mcp-hub.json but not defined by an ENV in the image"


RENDER_HUB = SCRIPTS / "render-hub-config.py"


def render_hub(tmp_path: Path, template: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [shutil.which("python3") or "python3", str(RENDER_HUB), str(template), str(tmp_path / "out.json")],
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **env},
        capture_output=True,
        text=True,
    )


def test_hub_config_renders_with_the_image_env(tmp_path, final_env):
    r = render_hub(tmp_path, AIO / "mcp-hub.json", final_env)
    assert r.returncode == 0, r.stderr
    rendered = json.loads((tmp_path / "out.json").read_text())
    server = rendered["mcpServers"]["browser-shell"]
    assert list(rendered["mcpServers"]) == ["browser-shell"]
    assert server["command"] == "/opt/browser-shell/bin/browser-shell"
    assert server["env"]["BROWSER_SHELL_AUDIT_LOG"] == final_env["BROWSER_SHELL_AUDIT_LOG"]
    assert server["env"]["OTEL_EXPORTER_OTLP_ENDPOINT"] == "", "an empty value is a value"
    assert "${" not in json.dumps(rendered)
    assert (tmp_path / "out.json").stat().st_mode & 0o777 == 0o644


def test_hub_config_renderer_refuses(tmp_path, final_env):
    env = dict(final_env)
    del env["BROWSER_SHELL_POLICY"]
    r = render_hub(tmp_path, AIO / "mcp-hub.json", env)
    assert r.returncode == 1 and "${BROWSER_SHELL_POLICY} is not set" in r.stderr, r.stderr
    cases = {
        "relative command": {"mcpServers": {"browser-shell": {"command": "browser-shell"}}},
        "second server": {"mcpServers": {"browser-shell": {"command": "/x"}, "other": {"command": "/y"}}},
        "other name": {"mcpServers": {"browser_shell": {"command": "/x"}}},
        "prefix key": {"mcpServers": {"browser-shell": {"command": "/x", "prefix": "p"}}},
        "bare $VAR": {"mcpServers": {"browser-shell": {"command": "/x", "env": {"A": "$HOME"}}}},
        "command placeholder": {"mcpServers": {"browser-shell": {"command": "/x", "env": {"A": "${cmd: id}"}}}},
        "extra top-level key": {"mcpServers": {"browser-shell": {"command": "/x"}}, "x": 1},
    }
    for what, config in cases.items():
        template = tmp_path / "template.json"
        template.write_text(json.dumps(config))
        r = render_hub(tmp_path, template, final_env)
        assert r.returncode == 1, f"{what}: accepted"


# =========================================================================== supervisord
def read_ini(path: Path) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(interpolation=None, strict=True)
    parser.read_string(path.read_text(), source=str(path))
    return parser


def test_hub_program(final_env):
    ini = read_ini(AIO / "supervisord" / "supervisord.mcp_hub.conf")
    assert ini.sections() == ["program:mcp-hub"]
    program = ini["program:mcp-hub"]
    assert program["command"].strip() == "/opt/browser-shell/bin/start-mcp-hub"
    assert program["user"] == "%(ENV_USER)s", "the hub (and browser-shell) run as the desktop user, not root"
    assert program["autostart"] == "true" and program["autorestart"] == "true"
    assert "0.0.0.0" not in (AIO / "supervisord" / "supervisord.mcp_hub.conf").read_text()
    start = (SCRIPTS / "start-mcp-hub.sh").read_text()
    exec_line = next(line for line in start.splitlines() if line.startswith("exec "))
    assert exec_line == 'exec "$hub" --host 127.0.0.1 --port "$port" --stateless --named-server-config "$config"', exec_line
    assert "hub=/opt/browser-shell/hub-venv/bin/mcp-proxy" in start
    assert "config=/opt/browser-shell/run/mcp-hub.json" in start
    entry = (SCRIPTS / "aio-entrypoint.sh").read_text()
    assert '"$share/bin/render-hub-config" "$share/mcp-hub.json" "$share/run/mcp-hub.json"' in entry
    # An empty MCP_HUB_WAIT_PORTS means the CDP port, never "wait for removed services".
    assert '[ -n "${ports//[[:space:],]/}" ] || ports=$cdp' in start


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


# =========================================================================== nginx: templates
def test_templates_use_only_known_placeholders():
    for f in sorted(NGINX_SRC.rglob("*")):
        if f.is_file():
            for name in re.findall(r"\$\{([^}]*)\}", f.read_text()):
                assert name in PLACEHOLDERS, f"{f.name}: unknown placeholder ${{{name}}}"


def test_renderer_output_matches_and_validates(rendered, tmp_path):
    python_out = tmp_path / "py"
    python_render(render_values(rendered), python_out)
    for sub in ("http", "routes"):
        for f in (rendered / sub).iterdir():
            assert "${" not in f.read_text(), f"{f.name}: placeholder left"
            assert f.read_text() == (python_out / sub / f.name).read_text(), f"{f.name}: renderer differs"
    if not (shutil.which("envsubst") and shutil.which("bash")):
        return
    bad = dict(render_values(tmp_path / "x"), AUTH_BACKEND_PORT=str(PUBLIC_PORT))
    r = subprocess.run(
        ["bash", str(SCRIPTS / "render-nginx.sh"), str(NGINX_SRC), str(tmp_path / "bad")],
        env={"PATH": os.environ.get("PATH", ""), **bad},
        capture_output=True,
        text=True,
    )
    assert r.returncode == 1 and "both" in r.stderr, r.stderr
    for key, value in (("MCP_HUB_PORT", "80;x"), ("NOVNC_DIR", "relative"), ("PUBLIC_LISTEN_IPV4", "")):
        r = subprocess.run(
            ["bash", str(SCRIPTS / "render-nginx.sh"), str(NGINX_SRC), str(tmp_path / "bad")],
            env={"PATH": os.environ.get("PATH", ""), **dict(render_values(tmp_path / "x"), **{key: value})},
            capture_output=True,
            text=True,
        )
        assert r.returncode == 1, (key, value)


def test_all_files_parse(rendered):
    for f in sorted(rendered.rglob("*")):
        if f.is_file():
            parse_nginx(f.read_text(), f.name)


# =========================================================================== nginx: bypass 1
def test_bypass1_port_proxy_server_is_gone(rendered):
    for name in ("nginx-server-port-proxy.conf.template", "nginx-server-port-proxy.conf", "nginx-proxy-map.conf"):
        assert is_comment_only(NGINX_SRC / "http" / name), f"{name} must be comment-only"
        assert is_comment_only(rendered / "http" / name)
    for f in sorted(rendered.rglob("*.conf*")):
        for d in walk(parse_nginx(f.read_text(), f.name)):
            if d.name == "server_name":
                assert d.args == ["_"], f"{f.name}: server_name {d.args} (no Host-based servers)"
            if d.name == "proxy_pass":
                assert re.fullmatch(r"http://127\.0\.0\.1:\d+(/\S*|\$uri)?", d.args[0]), (
                    f"{f.name}: proxy_pass {d.args[0]} (only fixed loopback upstreams)"
                )


def test_gateway_servers_and_listeners(gw, gw_dev):
    for g in (gw, gw_dev):
        listens = g.public.values("listen")
        assert listens == [[f"0.0.0.0:{PUBLIC_PORT}", "default_server"]], listens
        assert g.internal.values("listen") == [[f"127.0.0.1:{AUTH_BACKEND_PORT}"]], "internal server: loopback only"
        assert g.public.values("client_max_body_size") == [["1m"]]
        assert not g.public.children("include"), "the public server routes nothing itself"
        # The only condition: the canonical-path gate, answering 403.
        for d in walk(g.public.block):
            if d.name == "if":
                assert d.args == ["($request_uri", "!=", "$uri$is_args$args", ")"], d.args
                assert [(c.name, c.args) for c in d.block] == [("return", ["403"])]


# =========================================================================== nginx: bypass 2
def test_bypass2_auth_map_keys_on_uri_without_query(gw):
    workflow = gw.maps["$browser_shell_workflow"]
    assert workflow.args[0] == "$request_method:$uri", f"the auth map must key on $uri, not {workflow.args[0]}"
    for d in walk(gw.http):
        if d.name == "map":
            assert "$request_uri" not in d.args[0], f"map {d.args}: never key routing or auth on $request_uri"
    entries = [e for e in workflow.block if e.name != "default"]
    assert workflow.child("default").args == ["@proxy_with_auth"], "everything is authenticated by default"
    for e in entries:
        assert e.args == ["@proxy_without_auth"]
        assert e.name.startswith("~^GET:/vnc/"), f"only GET of /vnc/ static files may skip auth: {e.name}"


EXEMPT = [
    "GET:/vnc/app/ui.js",
    "GET:/vnc/core/rfb.js",
    "GET:/vnc/app/styles/base.css",
    "GET:/vnc/app/images/icons/novnc-16x16.png",
    "GET:/vnc/app/locale/de.json",
    "GET:/vnc/app/sounds/bell.oga",
    "GET:/vnc/vendor/pako/lib/zlib/inflate.js",
    # noVNC's pages are static too; the WebSocket they open needs a ticket.
    "GET:/vnc/vnc.html",
    "GET:/vnc/index.html",
    "GET:/vnc/vnc_lite.html",
]
NOT_EXEMPT = [
    "GET:/websockify",
    "GET:/websockify?x=.png",
    "GET:/mcp",
    "POST:/mcp",
    "POST:/tickets",
    "GET:/v1/file/download",
    "GET:/v1/file/download?path=/etc/shadow&x=.js",
    "GET:/v1/file/download.js",
    "GET:/cdp/json/version.js",
    "GET:/cdp/json/version?x=.js",
    "GET:/json/version.json",
    "GET:/vnc/",
    "GET:/vnc/vnc.htm",
    "GET:/vnc/vnc.html/",
    "GET:/vnc/../vnc.html",
    "GET:/index.html",
    "GET:/mcp.html",
    "GET:/websockify.html",
    "POST:/vnc/vnc.html",
    "POST:/vnc/app/ui.js",
    "HEAD:/vnc/app/ui.js",
    "GET:/VNC/app/ui.js",
    "GET:/vnc/../mcp.js",
    "GET:/vnc/app/../../mcp.js",
    "GET:/vnc/%2e%2e/mcp.js",
    "GET:/vnc//ui.js",
    "GET:/vnc/app/ui.js/",
    "GET:/vnc/app/ui.js?x=.png",
    "GET:/vnc/app/ui.js\n.png",
    "GET:/vnc/app/ui.js\n",
    "GET:/xvnc/app/ui.js",
    "GET:/v1/vnc/app/ui.js",
]


def test_bypass2_only_vnc_static_files_skip_auth(gw):
    workflow = gw.maps["$browser_shell_workflow"]
    for key in EXEMPT:
        assert map_lookup(workflow, key) == "@proxy_without_auth", key
    for key in NOT_EXEMPT:
        assert map_lookup(workflow, key) == "@proxy_with_auth", key


def test_authenticated_and_exempt_workflows(gw):
    named = {tuple(d.args): d for d in gw.public.children("location")}
    with_auth = named[("@proxy_with_auth",)]
    without = named[("@proxy_without_auth",)]
    assert with_auth.values("auth_request") == [["/_auth_handler"]]
    assert not without.children("auth_request")
    assert without.values("proxy_pass") == [[f"http://127.0.0.1:{AUTH_BACKEND_PORT}$uri"]], (
        "exempt requests are proxied by their checked path only, without the query string"
    )
    assert ["Authorization", ""] in without.values("proxy_set_header"), "no credentials on exempt requests"
    for loc in (with_auth, without):
        assert loc.values("proxy_buffering") == [["off"]]
        assert loc.values("proxy_read_timeout") == [["600s"]]
    handler = named[("=", "/_auth_handler")]
    assert handler.children("internal"), "the auth handler is internal"
    assert handler.values("proxy_pass") == [[f"http://127.0.0.1:{AUTH_SERVICE_PORT}/auth"]]
    assert handler.values("proxy_pass_request_body") == [["off"]]
    assert set(named) == {("@proxy_with_auth",), ("@proxy_without_auth",), ("=", "/_auth_handler"), ("/",)}
    root = named[("/",)]
    assert root.values("try_files") == [["", "$browser_shell_workflow"]]
    (gate,) = root.children("if")
    assert gate.args == ["($request_uri", "!=", "$uri$is_args$args", ")"], "the canonical-path gate"
    assert [(d.name, d.args) for d in gate.block] == [("return", ["403"])]


def test_local_dev_gateway_has_no_auth_but_the_same_routing(gw_dev):
    assert not any(d.name == "auth_request" for d in walk(gw_dev.http))
    named = {tuple(d.args): d for d in gw_dev.public.children("location")}
    assert set(named) == {("@proxy_local_dev",), ("/",)}
    (gate,) = named[("/",)].children("if")
    assert gate.args == ["($request_uri", "!=", "$uri$is_args$args", ")"]
    assert [(d.name, d.args) for d in gate.block] == [("return", ["403"])]


def test_access_log_has_no_query_strings(gw):
    (fmt,) = [d for d in gw.http if d.name == "log_format"]
    text = " ".join(fmt.args[1:])
    for leak in ("$request_uri", "$args", "$query_string", "$request "):
        assert leak not in text + " ", f"log format logs {leak.strip()}"
    assert gw.public.values("access_log") == [["/dev/stdout", "browser_shell_gateway"]]


# =========================================================================== nginx: routes
def test_only_the_allowed_routes_exist(gw):
    locations = route_locations(gw)
    assert set(locations) == ALLOWED_ROUTES, f"routes: {sorted(locations)}"
    assert is_comment_only(NGINX_SRC / "routes" / "legacy.conf"), "legacy.conf (/json, /devtools/ to CDP) stays empty"
    deny = locations[("", "/")]
    assert [(d.name, d.args) for d in deny.block] == [("return", ["403"])]
    assert set(gw.routes) == {"legacy.conf", "mcp_hub.conf", "srv.conf", "vnc.conf", "zz_deny_all.conf"}


@pytest.mark.parametrize(
    ("uri", "route"),
    [
        ("/mcp", ("=", "/mcp")),
        ("/tickets", ("=", "/tickets")),
        ("/websockify", ("=", "/websockify")),
        ("/vnc/vnc.html", ("", "/vnc/")),
        ("/vnc/app/ui.js", ("", "/vnc/")),
        *[
            (uri, ("", "/"))
            for uri in (
                "/mcp/",
                "/mcpx",
                "/MCP",
                "/json",
                "/json/version",
                "/json/list",
                "/devtools/page/1",
                "/devtools/browser",
                "/cdp/json/version",
                "/v1/shell/exec",
                "/v1/file/read",
                "/v1/file/download",
                "/v1/docs",
                "/v1/ping",
                "/v1/mcp",
                "/v1/browser/config",
                "/code-server/",
                "/jupyter/",
                "/screenshot",
                "/actions",
                "/terminal",
                "/index.html",
                "/auth",
                "/_auth_handler",
                "/ws",
                "/websockify/x",
                "/tickets/x",
                "/api/servers",
                "/",
            )
        ],
    ],
)
def test_route_for(gw, uri, route):
    assert match_location(route_locations(gw), uri) == route


def test_mcp_route(gw):
    mcp = route_locations(gw)[("=", "/mcp")]
    (limit,) = mcp.children("limit_except")
    assert sorted(limit.args) == ["GET", "POST"], "PUT, DELETE, PATCH, OPTIONS, ... are 403"
    assert [(d.name, d.args) for d in limit.block] == [("deny", ["all"])]
    assert mcp.values("client_max_body_size") == [["1m"]]
    assert mcp.values("proxy_pass") == [[f"http://127.0.0.1:{HUB_PORT}/servers/browser-shell/mcp"]]
    assert mcp.values("proxy_buffering") == [["off"]]
    assert mcp.values("proxy_read_timeout") == [["600s"]]
    assert mcp.values("proxy_http_version") == [["1.1"]]


def test_tickets_route(gw):
    tickets = route_locations(gw)[("=", "/tickets")]
    (limit,) = tickets.children("limit_except")
    assert limit.args == ["POST"] and [(d.name, d.args) for d in limit.block] == [("deny", ["all"])]
    assert tickets.values("proxy_pass") == [[f"http://127.0.0.1:{AUTH_SERVICE_PORT}/tickets"]]
    (no_query,) = tickets.children("if")
    assert no_query.block[0].args == ["403"] and "$args" in " ".join(no_query.args)


def test_vnc_routes(gw):
    locations = route_locations(gw)
    static = locations[("", "/vnc/")]
    assert static.values("alias") == [["/opt/novnc/"]]
    assert not static.children("proxy_pass"), "/vnc/ serves files only"
    assert static.child("limit_except").args == ["GET"]
    ws = locations[("=", "/websockify")]
    assert ws.values("proxy_pass") == [[f"http://127.0.0.1:{WEBSOCKET_PORT}/"]]
    headers = {tuple(a[:1]): a[1:] for a in ws.values("proxy_set_header")}
    assert headers[("Upgrade",)] == ["$http_upgrade"]
    assert headers[("Connection",)] == ["$browser_shell_connection_upgrade"]
    assert ws.child("limit_except").args == ["GET"]


def test_nginx_t_accepts_the_rendered_gateway(rendered, tmp_path):
    nginx = os.environ.get("NGINX_BIN") or shutil.which("nginx") or ("/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None)
    if not nginx:
        pytest.skip("no nginx binary (set NGINX_BIN) for `nginx -t`")
    for variant in ("with", "without"):
        conf = tmp_path / f"nginx-{variant}.conf"
        temp = "\n".join(f"    {k}_temp_path {tmp_path / k};" for k in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
        conf.write_text(
            f"pid {tmp_path / 'nginx.pid'};\nevents {{ worker_connections 16; }}\nhttp {{\n"
            f"    access_log {tmp_path / 'access.log'};\n{temp}\n"
            f"    include {rendered / 'http' / f'nginx-server-{variant}-auth.conf'};\n"
            f"    include {rendered / 'http' / 'nginx-server-port-proxy.conf'};\n"
            f"    include {rendered / 'http' / 'nginx-proxy-map.conf'};\n}}\n"
        )
        r = subprocess.run(
            [nginx, "-t", "-p", str(tmp_path), "-e", str(tmp_path / "error.log"), "-c", str(conf)],
            capture_output=True,
            text=True,
        )
        assert r.returncode == 0, f"nginx -t ({variant} auth):\n{r.stderr}"


# =========================================================================== entrypoint
PEM = "-----BEGIN PUBLIC KEY-----\nMIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEA\n-----END PUBLIC KEY-----\n"
JWT = b64encode(PEM.encode()).decode()


def run_entrypoint(tmp_path: Path, layout: str, *args: str, **env: str) -> subprocess.CompletedProcess:
    layout_file = tmp_path / f"layout-{layout}"
    layout_file.write_text(
        f"AIO_LAYOUT='{layout}'\nAIO_VERSION='{'1.0.0.152' if layout == '1.0' else '1.9.3'}'\n"
        f"AIO_BASE_ENTRYPOINT='/bin/false'\nAIO_NOVNC_DIR='/opt/novnc'\n"
    )
    base = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "BROWSER_SHELL_AIO_LAYOUT_FILE": str(layout_file),
        "BROWSER_SHELL_AUDIT_LOG": "/var/log/browser-shell/audit.jsonl",
        "BROWSER_SHELL_STATE_DIR": "/tmp/browser-shell-state",
        "BROWSER_SHELL_OUTPUT_DIR": "/tmp/browser-shell",
        "BROWSER_SHELL_CDP_PORT": "9222",
        "BROWSER_SHELL_POLICY": "/etc/agent-browser/browser-shell.policy.json",
    }
    return subprocess.run(
        ["bash", str(SCRIPTS / "aio-entrypoint.sh"), *args],
        env={**base, **env},
        capture_output=True,
        text=True,
    )


def decisions(r: subprocess.CompletedProcess) -> dict[str, str]:
    assert r.returncode == 0, r.stderr
    pairs = [line.split("=", 1) for line in r.stdout.splitlines()]
    keys = [key for key, _ in pairs]
    assert len(keys) == len(set(keys)), f"a decision printed twice: {r.stdout!r}"
    return dict(pairs)


@pytest.fixture
def needs_bash():
    for tool in ("bash", "base64", "grep"):
        if not shutil.which(tool):
            pytest.skip(f"{tool} is not available")


@pytest.mark.parametrize("layout", ["1.0", "1.9"])
def test_entrypoint_refuses_to_start_without_a_credential(tmp_path, needs_bash, layout):
    for env in ({}, {"JWT_PUBLIC_KEY": "   "}, {"BROWSER_SHELL_LOCAL_DEV": "0"}, {"BROWSER_SHELL_LOCAL_DEV": "true"}):
        r = run_entrypoint(tmp_path, layout, "--preflight", **env)
        assert r.returncode == 1, (env, r.stdout)
        assert "refusing to start without a credential" in r.stderr and "BROWSER_SHELL_LOCAL_DEV=1" in r.stderr
    # The real start path fails too (here already for want of the image's
    # layout record, which the test overrides only in the check modes).
    assert run_entrypoint(tmp_path, layout).returncode == 1


@pytest.mark.parametrize("layout", ["1.0", "1.9"])
def test_entrypoint_decisions(tmp_path, needs_bash, layout):
    d = decisions(run_entrypoint(tmp_path, layout, "--preflight", JWT_PUBLIC_KEY=JWT))
    assert d["auth"] == "on" and d["layout"] == layout
    assert d["auth_service_port"] == ("8088" if layout == "1.0" else "8091")
    assert d["wait_ports"] == f"{d['auth_service_port']},8079"
    assert d["mcp_hub_wait_ports"] == "9222"
    assert d["audit_dir"] == "/var/log/browser-shell"
    d = decisions(run_entrypoint(tmp_path, layout, "--preflight", JWT_PUBLIC_KEY=JWT, MCP_HUB_WAIT_PORTS=""))
    assert d["mcp_hub_wait_ports"] == "9222", "an empty MCP_HUB_WAIT_PORTS must not fall back to removed services"
    d = decisions(run_entrypoint(tmp_path, layout, "--preflight", BROWSER_SHELL_LOCAL_DEV="1"))
    assert d["auth"] == "off"


def test_entrypoint_api_key_rules(tmp_path, needs_bash):
    key = "k" * 32
    assert decisions(run_entrypoint(tmp_path, "1.9", "--preflight", SANDBOX_API_KEY=key))["auth"] == "on"
    r = run_entrypoint(tmp_path, "1.0", "--preflight", SANDBOX_API_KEY=key)
    assert r.returncode == 1 and "checks JWTs only" in r.stderr
    r = run_entrypoint(tmp_path, "1.9", "--preflight", SANDBOX_API_KEY="short")
    assert r.returncode == 1
    r = run_entrypoint(tmp_path, "1.9", "--preflight", JWT_PUBLIC_KEY="not-a-key")
    assert r.returncode == 1 and "not a base64-encoded PEM" in r.stderr


def test_entrypoint_refusals(tmp_path, needs_bash):
    for env, message in (
        ({"PROXY_SERVER": "http://p:3128"}, "tinyproxy/gost are removed"),
        ({"PROXY_MAP": "a>b"}, "tinyproxy/gost are removed"),
        ({"EXTRA_MCP_SERVERS": '{"x":{}}'}, "exactly one tool"),
        ({"BROWSER_SHELL_AUDIT_LOG": "/tmp/audit/audit.jsonl"}, "which the confined agent-browser may write"),
        ({"BROWSER_SHELL_AUDIT_LOG": "audit.jsonl"}, "absolute path"),
        ({"BROWSER_REMOTE_DEBUGGING_PORT": "9333"}, "differs"),
    ):
        r = run_entrypoint(tmp_path, "1.9", "--preflight", JWT_PUBLIC_KEY=JWT, **env)
        assert r.returncode == 1 and message in r.stderr, (env, r.stderr)


def test_entrypoint_drops_dangerous_chrome_flags(tmp_path, needs_bash):
    dangerous = ["--disable-web-security", "--disable-site-isolation-trials", "--remote-allow-origins=*",
                 "--remote-debugging-address=0.0.0.0"]
    kept = ["--window-size=1280,720", "--lang=en-US"]
    args = " ".join([kept[0], *dangerous, kept[1]])
    r = run_entrypoint(tmp_path, "1.9", "--preflight", JWT_PUBLIC_KEY=JWT,
                       BROWSER_EXTRA_ARGS=args, BROWSER_COMMANDLINE_ARGS="--remote-allow-origins=* --mute-audio")
    d = decisions(r)
    assert d["browser_extra_args"].split() == kept, d
    assert d["browser_commandline_args"].split() == ["--mute-audio"], d
    for flag in dangerous:
        assert f"dropping Chrome flag {flag}" in r.stderr, r.stderr
    # Nothing to drop: the same words pass through.
    assert decisions(run_entrypoint(tmp_path, "1.9", "--preflight", JWT_PUBLIC_KEY=JWT,
                                    BROWSER_EXTRA_ARGS=" ".join(kept)))["browser_extra_args"] == " ".join(kept)
    # A newline in the flags stays inside their one line: it cannot print a decision of its own.
    d = decisions(run_entrypoint(tmp_path, "1.9", "--preflight", JWT_PUBLIC_KEY=JWT,
                                 BROWSER_EXTRA_ARGS="--lang=en-US\nauth=off\n"))
    assert d["auth"] == "on" and d["browser_extra_args"] == "--lang=en-US auth=off", d


def test_entrypoint_installs_the_gateway_and_prunes_stock_routes(tmp_path, needs_bash):
    if not shutil.which("envsubst"):
        pytest.skip("envsubst is not available")
    gem = tmp_path / "gem"
    share = tmp_path / "share"
    (gem / "nginx").mkdir(parents=True)
    (share / "bin").mkdir(parents=True)
    (share / "bin" / "render-nginx").symlink_to(SCRIPTS / "render-nginx.sh")
    (share / "nginx").symlink_to(NGINX_SRC)
    stock = ["python_srv.conf", "header_proxy.conf", "gembrowser_compat.conf", "nginx.mcp_hub.conf", "code_server.conf"]
    for name in stock:
        (gem / "nginx" / name).write_text("location / { return 200; }\n")
    (gem / "nginx-server-port-proxy.conf").write_text("server { server_name ~^(?<port>\\d+)-(.+)$; }\n")
    for auth, active in (("on", "with"), ("off", "without")):
        r = run_entrypoint(
            tmp_path,
            "1.9",
            "--install-nginx",
            auth,
            BROWSER_SHELL_AIO_ROOT=str(gem),
            BROWSER_SHELL_SHARE_DIR=str(share),
        )
        assert r.returncode == 0, r.stderr
        assert sorted(p.name for p in (gem / "nginx").iterdir()) == [
            "legacy.conf",
            "mcp_hub.conf",
            "srv.conf",
            "vnc.conf",
            "zz_deny_all.conf",
        ]
        assert (gem / "nginx-server-active.conf").read_text() == (gem / f"nginx-server-{active}-auth.conf").read_text()
        for name in ("nginx-server-port-proxy.conf", "nginx-server-port-proxy.conf.template", "nginx-proxy-map.conf", "nginx.legacy.conf"):
            assert is_comment_only(gem / name), name
        for name in ("nginx.srv.conf", "nginx.vnc.conf", "nginx-server-with-auth.conf", "nginx/mcp_hub.conf"):
            assert "${" not in (gem / name).read_text(), f"{name} must be installed rendered"
        assert "127.0.0.1:8091/tickets" in (gem / "nginx" / "srv.conf").read_text(), "1.9.x: tickets from python-server"
        assert "127.0.0.1:8079/servers/browser-shell/mcp" in (gem / "nginx" / "mcp_hub.conf").read_text(), "1.9.x: /mcp to the hub"


# =========================================================================== hub preload
def test_local_stack_runs_the_image_files_not_a_fork():
    """deploy/local/up renders the image's own nginx and hub files with the image's own renderers
    and runs the hub with the image's flags (tests/e2e/test_stack.py then runs it for real)."""
    up = (ROOT / "deploy" / "local" / "up").read_text()
    assert 'bash "$root/deploy/aio/scripts/render-nginx.sh" "$root/deploy/aio/nginx" "$run/nginx"' in up
    assert '"$root/deploy/aio/scripts/render-hub-config.py" \\\n  "$root/deploy/aio/mcp-hub.json" "$run/mcp-hub.json"' in up
    assert '--host 127.0.0.1 --port "$MCP_HUB_PORT" \\\n  --stateless --named-server-config "$run/mcp-hub.json"' in up
    assert "PUBLIC_LISTEN_IPV4=127.0.0.1" in up


# =========================================================================== compose
@pytest.fixture(scope="module")
def compose() -> dict:
    return parse_yaml_subset((AIO / "docker-compose.yml").read_text())


def test_yaml_subset_parser_is_strict():
    assert parse_yaml_subset("a:\n  b: \"x: y\"\n  c:\n    - 1\n    - k: v\n      l: w\n") == {
        "a": {"b": "x: y", "c": [1, {"k": "v", "l": "w"}]}
    }
    for bad in ("a: [1, 2]\n", "a: &x 1\n", "a: 1\na: 2\n", "a:\n\tb: 1\n", "a: |\n  x\n"):
        with pytest.raises(YamlSubsetError):
            parse_yaml_subset(bad)


def test_compose_service(compose, final_env):
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


def test_compose_mounts_policy_and_audit(compose, final_env):
    svc = next(iter(compose["services"].values()))
    mounts = {m["target"]: m for m in svc["volumes"]}
    policy = mounts[final_env["BROWSER_SHELL_POLICY"]]
    assert policy["type"] == "bind" and policy["read_only"] is True
    assert policy["source"].startswith("${BROWSER_SHELL_POLICY_FILE:?")
    audit = mounts[str(Path(final_env["BROWSER_SHELL_AUDIT_LOG"]).parent)]
    assert audit["type"] == "volume", "the audit trail lives on a named volume and survives the container"
    assert audit["source"] in compose["volumes"]
    assert set(mounts) == {final_env["BROWSER_SHELL_POLICY"], str(Path(final_env["BROWSER_SHELL_AUDIT_LOG"]).parent)}


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
