"""The gateway: deploy/aio/nginx rendered by render-nginx.sh as the entrypoint does, parsed (no
nginx needed), and every invariant asserted on the rendered files. The two bypasses it closes:
(1) a Host-based port proxy that reached any local port, (2) an auth exemption keyed on the raw
request URI (`/websockify?x=.png` skipped auth). `nginx -t` runs when an nginx binary is
available (NGINX_BIN, or nginx on PATH)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from deploy_files import (
    ALLOWED_ROUTES,
    AUTH_BACKEND_PORT,
    AUTH_SERVICE_PORT,
    HUB_PORT,
    NGINX_SRC,
    PLACEHOLDERS,
    PUBLIC_PORT,
    SCRIPTS,
    WEBSOCKET_PORT,
    is_comment_only,
    map_lookup,
    match_location,
    parse_nginx,
    python_render,
    render_values,
    route_locations,
    walk,
)

pytestmark = pytest.mark.static

# =========================================================================== templates and renderer
def test_templates_use_only_known_placeholders():
    for f in sorted(NGINX_SRC.rglob("*")):
        if f.is_file():
            for name in re.findall(r"\$\{([^}]*)\}", f.read_text()):
                assert name in PLACEHOLDERS, f"{f.name}: unknown placeholder ${{{name}}}"


def test_render_nginx_leaves_no_placeholder_and_matches_a_plain_substitution(rendered, tmp_path):
    python_out = tmp_path / "py"
    python_render(render_values(rendered), python_out)
    for sub in ("http", "routes"):
        for f in (rendered / sub).iterdir():
            assert "${" not in f.read_text(), f"{f.name}: placeholder left"
            assert f.read_text() == (python_out / sub / f.name).read_text(), f"{f.name}: renderer differs"


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("AUTH_BACKEND_PORT", str(PUBLIC_PORT), "both"),
        ("MCP_HUB_PORT", "80;x", ""),
        ("NOVNC_DIR", "relative", ""),
        ("PUBLIC_LISTEN_IPV4", "", ""),
    ],
    ids=["port-used-twice", "port-with-a-semicolon", "relative-novnc-dir", "empty-listen-address"],
)
def test_render_nginx_refuses_a_bad_value(tmp_path, key, value, message):
    if not (shutil.which("envsubst") and shutil.which("bash")):
        pytest.skip("render-nginx.sh needs bash and envsubst")
    r = subprocess.run(
        ["bash", str(SCRIPTS / "render-nginx.sh"), str(NGINX_SRC), str(tmp_path / "bad")],
        env={"PATH": os.environ.get("PATH", ""), **dict(render_values(tmp_path / "x"), **{key: value})},
        capture_output=True,
        text=True,
    )
    assert r.returncode == 1 and message in r.stderr, (key, value, r.stderr)


def test_every_rendered_file_parses(rendered):
    for f in sorted(rendered.rglob("*")):
        if f.is_file():
            parse_nginx(f.read_text(), f.name)


# =========================================================================== bypass 1: the port proxy
def test_no_server_routes_by_host_and_every_upstream_is_a_fixed_loopback_address(rendered):
    """Bypass 1: the stock Host-based port-proxy server (`Host: 8091-x` reached any local port) is
    gone; no server is chosen by Host, and proxy_pass only ever goes to a fixed loopback port."""
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


def test_the_public_server_listens_once_and_the_internal_one_on_loopback_only(gw, gw_dev):
    """Both variants: one public listener, the internal server on 127.0.0.1, a 1 MB body cap, no
    routes in the public server itself, and its only conditions the Host/Origin gate and the
    canonical-path gate, both answering 403, in that order."""
    for g in (gw, gw_dev):
        listens = g.public.values("listen")
        assert listens == [[f"0.0.0.0:{PUBLIC_PORT}", "default_server"]], listens
        assert g.internal.values("listen") == [[f"127.0.0.1:{AUTH_BACKEND_PORT}"]], "internal server: loopback only"
        assert g.public.values("client_max_body_size") == [["1m"]]
        assert not g.public.children("include"), "the public server routes nothing itself"
        # The only conditions: a foreign Host or Origin, then the canonical-path gate; both 403.
        conditions = [d for d in walk(g.public.block) if d.name == "if"]
        assert [d.args for d in conditions] == [
            ["($browser_shell_foreign_host)"],
            ["($request_uri", "!=", "$uri$is_args$args", ")"],
        ], [d.args for d in conditions]
        assert [c.name for c in conditions[0].block] == ["return"] and conditions[0].block[0].args[0] == "403"
        assert [(c.name, c.args) for c in conditions[1].block] == [("return", ["403"])]


def test_only_loopback_names_with_the_public_port_pass_the_host_and_origin_gate(gw, gw_dev):
    """DNS rebinding: the Host map lets through exactly the loopback names with the public port (and
    nothing else without GATEWAY_ALLOWED_HOSTS); the Origin map the same as http:// origins, or none."""
    for g in (gw, gw_dev):
        hosts = {d.name: d.args for d in g.maps["$browser_shell_host_ok"].block}
        assert hosts == {"default": ["0"], **{f"{h}:{PUBLIC_PORT}": ["1"] for h in ("127.0.0.1", "localhost", "[::1]")}}, hosts
        origins = {d.name: d.args for d in g.maps["$browser_shell_origin_ok"].block}
        loopback = {f"http://{h}:{PUBLIC_PORT}": ["1"] for h in ("127.0.0.1", "localhost", "[::1]")}
        assert origins == {"default": ["0"], "": ["1"], **loopback}, origins
        both = {d.name: d.args for d in g.maps["$browser_shell_foreign_host"].block}
        assert both == {"11": ["0"], "default": ["1"]}, both
        assert g.maps["$browser_shell_foreign_host"].args[0] == "$browser_shell_host_ok$browser_shell_origin_ok"


def test_gateway_allowed_hosts_renders_into_both_maps_and_refuses_what_is_not_a_host(tmp_path):
    if not (shutil.which("envsubst") and shutil.which("bash")):
        pytest.skip("render-nginx.sh needs bash and envsubst")

    def render(value: str) -> subprocess.CompletedProcess[str]:
        env = {"PATH": os.environ.get("PATH", ""), **render_values(tmp_path / "x"), "GATEWAY_ALLOWED_HOSTS": value}
        return subprocess.run(["bash", str(SCRIPTS / "render-nginx.sh"), str(NGINX_SRC), str(tmp_path / "out")], env=env, capture_output=True, text=True)

    r = render("MCP.example.com, 10.0.0.5:8080 [fd00::5]:8080")
    assert r.returncode == 0, r.stderr
    text = (tmp_path / "out" / "http" / "nginx-server-without-auth.conf").read_text()
    for entry in ("mcp.example.com", "10.0.0.5:8080", "[fd00::5]:8080"):
        assert f'    "{entry}" 1;' in text and f'    "http://{entry}" 1;' in text and f'    "https://{entry}" 1;' in text, entry
    for bad in ('a"b', "a;b", "x/y", "*", "-x.example", "http://x.example"):
        r = render(bad)
        assert r.returncode == 1 and "GATEWAY_ALLOWED_HOSTS" in r.stderr, (bad, r.stderr)


# =========================================================================== bypass 2: the auth exemption
def test_the_auth_map_keys_on_the_normalised_uri_without_its_query(gw):
    """Bypass 2: the auth exemption was decided on $request_uri (query included), so
    `/websockify?x=.png` looked like a static file. The map now keys on method and $uri."""
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


@pytest.mark.parametrize("key", EXEMPT)
def test_get_of_a_vnc_static_file_skips_auth(gw, key):
    assert map_lookup(gw.maps["$browser_shell_workflow"], key) == "@proxy_without_auth", key


@pytest.mark.parametrize("key", NOT_EXEMPT)
def test_everything_else_is_authenticated(gw, key):
    assert map_lookup(gw.maps["$browser_shell_workflow"], key) == "@proxy_with_auth", key


def test_exempt_requests_lose_query_and_credentials_and_the_rest_goes_through_auth_request(gw):
    """The two workflows the map picks, the auth handler behind auth_request, and the root
    location with its canonical-path gate: nothing else in the public server."""
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
    (_host_gate, gate) = root.children("if")
    assert gate.args == ["($request_uri", "!=", "$uri$is_args$args", ")"], "the canonical-path gate"
    assert [(d.name, d.args) for d in gate.block] == [("return", ["403"])]
    # A credential refused on /mcp gets the JSON-RPC page, anything else the text/plain 401.
    assert with_auth.values("error_page") == [["401", "=", "$browser_shell_401_page"]]
    page = gw.maps["$browser_shell_401_page"]
    assert map_lookup(page, "/mcp") == "/_browser_shell_401_mcp" and map_lookup(page, "/tickets") == "/_browser_shell_401"
    # noVNC's pages get the ticket help; only the exempt static files pass there.
    assert without.values("sub_filter")[0][0] == "</body>" and "deploy/local/vnc-url" in without.values("sub_filter")[0][1]


def test_local_dev_gateway_has_no_auth_but_the_same_routing(gw_dev):
    assert not any(d.name == "auth_request" for d in walk(gw_dev.http))
    named = {tuple(d.args): d for d in gw_dev.public.children("location")}
    assert set(named) == {("@proxy_local_dev",), ("/",)}
    (_host_gate, gate) = named[("/",)].children("if")
    assert gate.args == ["($request_uri", "!=", "$uri$is_args$args", ")"]
    assert [(d.name, d.args) for d in gate.block] == [("return", ["403"])]


def test_access_log_has_no_query_strings(gw):
    (fmt,) = [d for d in gw.http if d.name == "log_format"]
    text = " ".join(fmt.args[1:])
    for leak in ("$request_uri", "$args", "$query_string", "$request "):
        assert leak not in text + " ", f"log format logs {leak.strip()}"
    assert gw.public.values("access_log") == [["/dev/stdout", "browser_shell_gateway"]]


# =========================================================================== routes
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
def test_a_uri_reaches_exactly_its_own_route(gw, uri, route):
    assert match_location(route_locations(gw), uri) == route


def test_mcp_takes_only_get_and_post_and_goes_to_the_hub_unbuffered(gw):
    mcp = route_locations(gw)[("=", "/mcp")]
    (limit,) = mcp.children("limit_except")
    assert sorted(limit.args) == ["GET", "POST"], "PUT, DELETE, PATCH, OPTIONS, ... are 403"
    assert [(d.name, d.args) for d in limit.block] == [("deny", ["all"])]
    assert mcp.values("client_max_body_size") == [["1m"]]
    assert mcp.values("proxy_pass") == [[f"http://127.0.0.1:{HUB_PORT}/servers/browser-shell/mcp"]]
    assert mcp.values("proxy_buffering") == [["off"]]
    assert mcp.values("proxy_read_timeout") == [["600s"]]
    assert mcp.values("proxy_http_version") == [["1.1"]]


def test_tickets_takes_only_a_post_without_a_query(gw):
    tickets = route_locations(gw)[("=", "/tickets")]
    (limit,) = tickets.children("limit_except")
    assert limit.args == ["POST"] and [(d.name, d.args) for d in limit.block] == [("deny", ["all"])]
    assert tickets.values("proxy_pass") == [[f"http://127.0.0.1:{AUTH_SERVICE_PORT}/tickets"]]
    (no_query,) = tickets.children("if")
    assert no_query.block[0].args == ["403"] and "$args" in " ".join(no_query.args)


def test_vnc_serves_static_files_and_its_websocket_by_get_only(gw):
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


# =========================================================================== nginx -t
@pytest.mark.parametrize("variant", ["with", "without"], ids=["with-auth", "without-auth"])
def test_nginx_t_accepts_the_rendered_gateway(rendered, tmp_path, variant):
    nginx = os.environ.get("NGINX_BIN") or shutil.which("nginx") or ("/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None)
    if not nginx:
        pytest.skip("no nginx binary (set NGINX_BIN) for `nginx -t`")
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
