#!/usr/bin/env bash
# render-nginx.sh TEMPLATE_DIR OUT_DIR
#
# Renders browser-shell's nginx templates (TEMPLATE_DIR/http/* and
# TEMPLATE_DIR/routes/*, i.e. deploy/aio/nginx/) into OUT_DIR/http/ and
# OUT_DIR/routes/. Exactly these variables are substituted, all of which must be
# set; nginx's own $variables are left untouched:
#
#   PUBLIC_LISTEN_IPV4    address of the public server (0.0.0.0 in the image,
#                         127.0.0.1 for a local stack)
#   PUBLIC_PORT           public port (8080)
#   AUTH_BACKEND_PORT     the loopback-only internal routing server (8081)
#   AUTH_SERVICE_PORT     /auth and /tickets (gem-server 8088 on AIO 1.0.0.x,
#                         python-server 8091 on 1.9.x)
#   MCP_HUB_PORT          the MCP hub (8079)
#   WEBSOCKET_PROXY_PORT  websocat in front of the VNC server (6080)
#   NGINX_ROUTES_DIR      where OUT_DIR/routes/*.conf will be installed
#                         (/opt/gem/nginx in the image)
#   NOVNC_DIR             noVNC's static client (/opt/novnc in the image)
#
# and one that may be unset or empty:
#
#   GATEWAY_ALLOWED_HOSTS names the public server also answers to, besides
#                         127.0.0.1, localhost and [::1] with PUBLIC_PORT:
#                         host[:port] entries separated by spaces or commas,
#                         each exactly as clients send it in Host (mcp.example.com,
#                         10.0.0.5:8080, [fd00::5]:8080). A request whose Host is
#                         none of these, or whose Origin is not http(s):// one of
#                         them, is refused (DNS rebinding). Rendered into the
#                         GATEWAY_HOST_ENTRIES and GATEWAY_ORIGIN_ENTRIES map lines.
#
# The image's entrypoint runs this on every start; a local nginx stack can run it
# with its own values and include OUT_DIR/http/nginx-server-*.conf from its http{}
# block. Fails if a value is malformed, two ports collide, or a placeholder is
# left unrendered.
set -euo pipefail

die() { printf 'render-nginx: %s\n' "$*" >&2; exit 1; }

[ $# -eq 2 ] || die "usage: render-nginx.sh TEMPLATE_DIR OUT_DIR"
src=$1
out=$2
[ -d "$src/http" ] && [ -d "$src/routes" ] || die "$src has no http/ and routes/ subdirectories"
command -v envsubst >/dev/null 2>&1 || die "envsubst (gettext-base) is required"

port_vars=(PUBLIC_PORT AUTH_BACKEND_PORT AUTH_SERVICE_PORT MCP_HUB_PORT WEBSOCKET_PROXY_PORT)
dir_vars=(NGINX_ROUTES_DIR NOVNC_DIR)
port_re='^[0-9]{1,5}$'
dir_re='^/[A-Za-z0-9_./-]*$'
ipv4_re='^[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}$'

declare -A seen=()
for v in "${port_vars[@]}"; do
  val=${!v:-}
  [[ $val =~ $port_re ]] && ((10#$val >= 1 && 10#$val <= 65535)) || die "$v must be a TCP port, got '$val'"
  [ -z "${seen[$val]:-}" ] || die "$v and ${seen[$val]} are both $val"
  seen[$val]=$v
  export "$v"
done
for v in "${dir_vars[@]}"; do
  val=${!v:-}
  [[ $val =~ $dir_re ]] || die "$v must be an absolute path made of [A-Za-z0-9_./-], got '$val'"
  export "$v"
done
[[ ${PUBLIC_LISTEN_IPV4:-} =~ $ipv4_re ]] || die "PUBLIC_LISTEN_IPV4 must be an IPv4 address, got '${PUBLIC_LISTEN_IPV4:-}'"
export PUBLIC_LISTEN_IPV4

# The operator's extra names: nothing but [a-z0-9.-] names, IPv4 or [IPv6]
# literals and a port go into the maps (no quote, space or ";" can reach nginx).
host_re='^([a-z0-9]([a-z0-9.-]*[a-z0-9])?|\[[0-9a-f:.]+\])(:[0-9]{1,5})?$'
GATEWAY_HOST_ENTRIES="    # GATEWAY_ALLOWED_HOSTS: none"
GATEWAY_ORIGIN_ENTRIES=$GATEWAY_HOST_ENTRIES
if [ -n "${GATEWAY_ALLOWED_HOSTS:-}" ]; then
  GATEWAY_HOST_ENTRIES="    # GATEWAY_ALLOWED_HOSTS"
  GATEWAY_ORIGIN_ENTRIES=$GATEWAY_HOST_ENTRIES
  read -ra hosts <<<"${GATEWAY_ALLOWED_HOSTS//,/ }"
  for h in "${hosts[@]}"; do
    h=${h,,}
    [[ $h =~ $host_re ]] || die "GATEWAY_ALLOWED_HOSTS: '$h' is not host[:port] (a name, an IPv4 address or an [IPv6] address)"
    GATEWAY_HOST_ENTRIES+=$'\n'"    \"$h\" 1;"
    GATEWAY_ORIGIN_ENTRIES+=$'\n'"    \"http://$h\" 1;"$'\n'"    \"https://$h\" 1;"
  done
fi
export GATEWAY_HOST_ENTRIES GATEWAY_ORIGIN_ENTRIES

# shellcheck disable=SC2016  # literal ${...}: envsubst's SHELL-FORMAT list
shell_format='${PUBLIC_LISTEN_IPV4} ${PUBLIC_PORT} ${AUTH_BACKEND_PORT} ${AUTH_SERVICE_PORT} ${MCP_HUB_PORT} ${WEBSOCKET_PROXY_PORT} ${NGINX_ROUTES_DIR} ${NOVNC_DIR} ${GATEWAY_HOST_ENTRIES} ${GATEWAY_ORIGIN_ENTRIES}'

for sub in http routes; do
  mkdir -p "$out/$sub"
  for f in "$src/$sub"/*; do
    [ -f "$f" ] || continue
    name=${f##*/}
    envsubst "$shell_format" <"$f" >"$out/$sub/$name.tmp"
    mv -f "$out/$sub/$name.tmp" "$out/$sub/$name"
  done
done

if left=$(grep -rn '\${' "$out/http" "$out/routes"); then
  printf '%s\n' "$left" >&2
  die "unrendered placeholders left in $out (see above)"
fi
