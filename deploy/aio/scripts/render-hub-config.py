#!/usr/bin/env python3
"""render-hub-config.py TEMPLATE OUT

Renders the MCP hub's config (deploy/aio/mcp-hub.json, `{"mcpServers": {...}}`)
for mcp-proxy's --named-server-config. mcp-proxy passes `command`, `args` and
`env` through literally, so the `${VAR}` placeholders in those strings are
resolved here, from this process's environment, in the image (by
start-mcp-hub) and in the local stack (by deploy/local/up) alike.

Strict, like the hub AIO used to run: an undefined variable is an error (an
empty one is a value), only `${NAME}` with NAME of [A-Za-z_][A-Za-z0-9_]* is a
placeholder, a `$` followed by anything else is refused, and the result must be
exactly one stdio server named browser-shell whose command is an absolute path.
The output is written atomically, mode 0644 (it holds paths, not secrets).
"""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile

PLACEHOLDER = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
SERVER = "browser-shell"


def die(message: str) -> None:
    print(f"render-hub-config: {message}", file=sys.stderr)
    sys.exit(1)


def render(value: str, where: str) -> str:
    def substitute(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in os.environ:
            die(f"{where}: ${{{name}}} is not set in the environment")
        return os.environ[name]

    rest = PLACEHOLDER.sub("", value)
    if "$" in rest:
        die(f"{where}: only ${{NAME}} placeholders are allowed, got {value!r}")
    return PLACEHOLDER.sub(substitute, value)


def main(argv: list[str]) -> None:
    if len(argv) != 3:
        die("usage: render-hub-config.py TEMPLATE OUT")
    template, out = argv[1], argv[2]
    with open(template, encoding="utf-8") as fh:
        config = json.load(fh)
    if not isinstance(config, dict) or list(config) != ["mcpServers"]:
        die(f"{template}: the top level must be exactly {{\"mcpServers\": ...}}")
    servers = config["mcpServers"]
    if not isinstance(servers, dict) or list(servers) != [SERVER]:
        die(f"{template}: exactly one server, {SERVER!r}, is allowed; got {list(servers) if isinstance(servers, dict) else servers!r}")
    server = servers[SERVER]
    allowed = {"command", "args", "env"}
    if not isinstance(server, dict) or not set(server) <= allowed or "command" not in server:
        die(f"{template}: the server may have {sorted(allowed)} (command required), got {sorted(server) if isinstance(server, dict) else server!r}")

    rendered: dict[str, object] = {"command": render(server["command"], "command")}
    if not str(rendered["command"]).startswith("/"):
        die(f"command must be an absolute path, got {rendered['command']!r}")
    if "args" in server:
        args = server["args"]
        if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            die("args must be a list of strings")
        rendered["args"] = [render(a, f"args[{i}]") for i, a in enumerate(args)]
    if "env" in server:
        env = server["env"]
        if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
            die("env must map names to strings")
        rendered["env"] = {k: render(v, f"env.{k}") for k, v in env.items()}

    text = json.dumps({"mcpServers": {SERVER: rendered}}, indent=2) + "\n"
    directory = os.path.dirname(os.path.abspath(out))
    fd, tmp = tempfile.mkstemp(prefix=".mcp-hub.", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, out)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


if __name__ == "__main__":
    main(sys.argv)
