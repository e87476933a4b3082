#!/usr/bin/env bash
# Entrypoint of the browser-shell AIO image (deploy/aio/Dockerfile).
#
#   aio-entrypoint                      checks, installs browser-shell's gateway
#                                       config, then execs AIO's own entrypoint
#   aio-entrypoint --preflight          the checks only: prints its decisions as
#                                       key=value lines, changes nothing
#   aio-entrypoint --install-nginx on|off
#                                       render and install the nginx files only
#                                       (used at build time for `nginx -t`)
#
# The container refuses to start (exit 1) unless a credential is configured:
# JWT_PUBLIC_KEY (base64-encoded PEM, RS256), or on AIO 1.9.x SANDBOX_API_KEY.
# BROWSER_SHELL_LOCAL_DEV=1 is the only way to run without one (a local
# development run: the gateway then has NO authentication).
set -euo pipefail

log() { printf '[browser-shell] %s\n' "$*" >&2; }
die() {
  log "FATAL: $*"
  exit 1
}
trim() {
  local s=$1
  s=${s#"${s%%[![:space:]]*}"}
  s=${s%"${s##*[![:space:]]}"}
  printf '%s' "$s"
}

mode=${1:-}
gem=/opt/gem
share=/opt/browser-shell
layout_file=$share/aio-layout
# Tests point the check-only modes at a scratch tree; a real start never moves.
if [ "$mode" = --preflight ] || [ "$mode" = --install-nginx ]; then
  gem=${BROWSER_SHELL_AIO_ROOT:-$gem}
  share=${BROWSER_SHELL_SHARE_DIR:-$share}
  layout_file=${BROWSER_SHELL_AIO_LAYOUT_FILE:-$share/aio-layout}
fi
[ -r "$layout_file" ] || die "missing $layout_file (written at build time by aio-setup)"
# shellcheck disable=SC1090  # written by aio-setup at build time
. "$layout_file"
case "${AIO_LAYOUT:-}" in
  1.0 | 1.9) ;;
  *) die "$layout_file names no supported layout (AIO_LAYOUT='${AIO_LAYOUT:-}')" ;;
esac

# ----------------------------------------------------------------------------- checks
preflight() {
  local jwt api
  jwt=$(trim "${JWT_PUBLIC_KEY:-}")
  api=$(trim "${SANDBOX_API_KEY:-}")

  if [ -n "$jwt" ]; then
    printf '%s' "$jwt" | base64 -d 2>/dev/null | grep -q -- '-----BEGIN \(RSA \)\{0,1\}PUBLIC KEY-----' ||
      die "JWT_PUBLIC_KEY is not a base64-encoded PEM public key (base64 -w0 < public.pem)"
  fi
  if [ -n "$api" ] && [ "${#api}" -lt 16 ]; then
    die "SANDBOX_API_KEY is shorter than 16 characters"
  fi
  if [ -n "$api" ] && [ -z "$jwt" ] && [ "$AIO_LAYOUT" = 1.0 ]; then
    die "SANDBOX_API_KEY alone does not authenticate on AIO $AIO_VERSION (its auth service, gem-server, checks JWTs only): set JWT_PUBLIC_KEY"
  fi

  if [ -n "$jwt" ] || [ -n "$api" ]; then
    AUTH=on
  elif [ "${BROWSER_SHELL_LOCAL_DEV:-}" = 1 ]; then
    AUTH=off
    log "WARNING: BROWSER_SHELL_LOCAL_DEV=1 and no credential: the gateway on port ${PUBLIC_PORT:-8080} has NO authentication. Publish it on 127.0.0.1 only."
  else
    local what="JWT_PUBLIC_KEY (base64-encoded PEM public key, RS256)"
    [ "$AIO_LAYOUT" = 1.9 ] && what="$what or SANDBOX_API_KEY"
    die "refusing to start without a credential: set $what. For a local development run WITHOUT authentication set BROWSER_SHELL_LOCAL_DEV=1."
  fi

  # Features whose programs were removed from this image.
  local v
  for v in PROXY_SERVER PROXY_MAP EXTRA_MCP_SERVERS BROWSER_URL_BLOCKLIST; do
    [ -z "$(trim "${!v:-}")" ] || case $v in
      PROXY_SERVER | PROXY_MAP) die "$v is not supported: tinyproxy/gost are removed from this image; put the egress proxy outside the container (e.g. BROWSER_EXTRA_ARGS=--proxy-server=http://proxy:3128)" ;;
      EXTRA_MCP_SERVERS) die "EXTRA_MCP_SERVERS is not supported: /mcp serves exactly one tool, browser-shell" ;;
      BROWSER_URL_BLOCKLIST) log "note: BROWSER_URL_BLOCKLIST is only a Chrome policy; browser-shell's own URL policy is $BROWSER_SHELL_POLICY" ;;
    esac
  done

  # The audit log must stay out of reach of the confined agent-browser.
  local log_path=${BROWSER_SHELL_AUDIT_LOG:-}
  case $log_path in
    /*) ;;
    *) die "BROWSER_SHELL_AUDIT_LOG must be an absolute path, got '$log_path'" ;;
  esac
  AUDIT_DIR=${log_path%/*}
  local root
  for root in /tmp /dev/shm "${BROWSER_SHELL_STATE_DIR:-/tmp}" "${BROWSER_SHELL_OUTPUT_DIR:-/tmp}"; do
    case "$AUDIT_DIR/" in
      "${root%/}"/*) die "BROWSER_SHELL_AUDIT_LOG ($log_path) lies under $root, which the confined agent-browser may write" ;;
    esac
  done

  local cdp=${BROWSER_SHELL_CDP_PORT:-9222}
  if [ -n "${BROWSER_REMOTE_DEBUGGING_PORT:-}" ] && [ "$BROWSER_REMOTE_DEBUGGING_PORT" != "$cdp" ]; then
    die "BROWSER_SHELL_CDP_PORT ($cdp) differs from the browser's BROWSER_REMOTE_DEBUGGING_PORT ($BROWSER_REMOTE_DEBUGGING_PORT)"
  fi

  MCP_HUB_PORT=${MCP_HUB_PORT:-8079}
  case $AIO_LAYOUT in
    1.0) AUTH_SERVICE_PORT=${GEM_SERVER_PORT:-8088} ;;
    1.9) AUTH_SERVICE_PORT=${SANDBOX_SRV_PORT:-8091} ;;
  esac
  # nginx-wait.sh waits for these before nginx starts: the services that remain.
  WAIT_PORTS=$(trim "${WAIT_PORTS:-}")
  [ -n "$WAIT_PORTS" ] || WAIT_PORTS="$AUTH_SERVICE_PORT,$MCP_HUB_PORT"
  # "" would make AIO's scripts fall back to ports of removed services.
  MCP_HUB_WAIT_PORTS=$(trim "${MCP_HUB_WAIT_PORTS:-}")
  [ -n "$MCP_HUB_WAIT_PORTS" ] || MCP_HUB_WAIT_PORTS=$cdp

  # Chrome flags that would let a page, or anyone, reach what only browser-shell may.
  BROWSER_EXTRA_ARGS=$(strip_chrome_flags "${BROWSER_EXTRA_ARGS:-}")
  # The project's own flags: a quiet Chromium whose own traffic has nowhere to go.
  BROWSER_EXTRA_ARGS=$(with_project_flags "$BROWSER_EXTRA_ARGS")
  BROWSER_COMMANDLINE_ARGS=$(strip_chrome_flags "${BROWSER_COMMANDLINE_ARGS:-}")
}

# The flags the browser start script will see: the same words (it splits them
# on whitespace too), minus the dangerous ones, on one line — a newline in the
# variable must not start a line of its own in the --preflight output.
strip_chrome_flags() {
  local words=() w
  set -f
  # shellcheck disable=SC2086  # the browser start script word-splits these too
  for w in $1; do
    case $w in
      --disable-web-security | --disable-site-isolation-trials | --remote-allow-origins=* | --remote-debugging-address=*)
        log "dropping Chrome flag $w"
        ;;
      *) words+=("$w") ;;
    esac
  done
  set +f
  printf '%s' "${words[*]}"
}

# The user's words plus the project's Chromium flags (browser-flags.sh beside
# this image's files), one word each: a flag with whitespace in it cannot pass
# the start script's splitting and is left out (README: what remains for a
# Chromium started elsewhere). Chromium reads only its last --disable-features,
# so the user's and the project's are merged into one; a --proxy-server the
# user set (their own egress for the default context) is kept instead of ours.
with_project_flags() {
  local flags_file=$share/browser-flags.sh words=() features="" own_proxy=0 w
  [ -r "$flags_file" ] || die "missing $flags_file (copied into the image at build time)"
  # shellcheck source=deploy/browser-flags.sh
  . "$flags_file"
  set -f
  # shellcheck disable=SC2086  # the browser start script word-splits these too
  for w in $1; do
    case $w in
      --disable-features=*) features+=",${w#--disable-features=}" ;;
      --proxy-server=*) own_proxy=1 && words+=("$w") ;;
      *) words+=("$w") ;;
    esac
  done
  set +f
  for w in "${chromium_flags[@]}"; do
    case $w in
      *[[:space:]]*) log "Chrome flag left out (it has whitespace, which the browser start script splits): $w" ;;
      # The image's own: BROWSER_NO_SANDBOX, and DevTools where AIO binds it.
      --no-sandbox | --remote-debugging-address=*) ;;
      --proxy-server=*) [ "$own_proxy" = 1 ] || words+=("$w") ;;
      --disable-features=*) features="${w#--disable-features=}$features" ;;
      *) words+=("$w") ;;
    esac
  done
  [ -z "$features" ] || words+=("--disable-features=${features#,}")
  printf '%s' "${words[*]}"
}

# ----------------------------------------------------------------------------- nginx
# Render deploy/aio/nginx/ and put every file where AIO's nginx.conf and start
# scripts look: the rendered copies over both AIO's sources (which its run.sh
# re-renders on each start: with our content that is a no-op) and its targets.
install_nginx() {
  local auth=$1 out
  out=$(mktemp -d)
  PUBLIC_LISTEN_IPV4=${PUBLIC_LISTEN_IPV4:-0.0.0.0} \
    PUBLIC_PORT=${PUBLIC_PORT:-8080} \
    AUTH_BACKEND_PORT=${AUTH_BACKEND_PORT:-8081} \
    AUTH_SERVICE_PORT=$AUTH_SERVICE_PORT \
    MCP_HUB_PORT=$MCP_HUB_PORT \
    WEBSOCKET_PROXY_PORT=${WEBSOCKET_PROXY_PORT:-6080} \
    NGINX_ROUTES_DIR="$gem/nginx" \
    NOVNC_DIR=$AIO_NOVNC_DIR \
    GATEWAY_ALLOWED_HOSTS=${GATEWAY_ALLOWED_HOSTS:-} \
    "$share/bin/render-nginx" "$share/nginx" "$out"

  local http=$out/http routes=$out/routes f
  install -m 0644 "$http/nginx-server-with-auth.conf" "$gem/nginx-server-with-auth.conf"
  install -m 0644 "$http/nginx-server-without-auth.conf" "$gem/nginx-server-without-auth.conf"
  if [ "$auth" = on ]; then
    install -m 0644 "$http/nginx-server-with-auth.conf" "$gem/nginx-server-active.conf"
  else
    install -m 0644 "$http/nginx-server-without-auth.conf" "$gem/nginx-server-active.conf"
  fi
  # Bypass 1: no port-proxy server, neither the template nor its rendering.
  install -m 0644 "$http/nginx-server-port-proxy.conf.template" "$gem/nginx-server-port-proxy.conf.template"
  install -m 0644 "$http/nginx-server-port-proxy.conf" "$gem/nginx-server-port-proxy.conf"
  install -m 0644 "$http/nginx-proxy-map.conf" "$gem/nginx-proxy-map.conf"

  mkdir -p "$gem/nginx"
  for f in legacy srv vnc; do
    install -m 0644 "$routes/$f.conf" "$gem/nginx.$f.conf"
  done
  for f in legacy srv vnc mcp_hub zz_deny_all; do
    install -m 0644 "$routes/$f.conf" "$gem/nginx/$f.conf"
  done
  # Everything else in the routes directory goes: stock routes and templates
  # (nginx.python_srv.conf, header_proxy.conf, nginx.mcp_hub.conf, ...).
  for f in "$gem/nginx"/* "$gem/nginx"/.[!.]*; do
    [ -e "$f" ] || [ -L "$f" ] || continue
    case ${f##*/} in
      legacy.conf | srv.conf | vnc.conf | mcp_hub.conf | zz_deny_all.conf) ;;
      *)
        log "removing $f"
        rm -rf -- "$f"
        ;;
    esac
  done
  rm -rf -- "$out"
}

# Supervisord programs: exactly the set aio-setup kept at build time.
prune_programs() {
  local keep=$share/supervisord-keep f
  [ -r "$keep" ] || die "missing $keep (written at build time by aio-setup)"
  for f in "$gem/supervisord"/*.conf; do
    [ -e "$f" ] || continue
    if ! grep -qxF "${f##*/}" "$keep"; then
      log "removing supervisord program file $f"
      rm -f -- "$f"
    fi
  done
}

# ----------------------------------------------------------------------------- main
case "$mode" in
  --preflight)
    preflight
    printf 'auth=%s\nlayout=%s\nauth_service_port=%s\nwait_ports=%s\nmcp_hub_wait_ports=%s\naudit_dir=%s\n' \
      "$AUTH" "$AIO_LAYOUT" "$AUTH_SERVICE_PORT" "$WAIT_PORTS" "$MCP_HUB_WAIT_PORTS" "$AUDIT_DIR"
    printf 'browser_extra_args=%s\nbrowser_commandline_args=%s\n' "$BROWSER_EXTRA_ARGS" "$BROWSER_COMMANDLINE_ARGS"
    exit 0
    ;;
  --install-nginx)
    [ "${2:-}" = on ] || [ "${2:-}" = off ] || die "usage: aio-entrypoint --install-nginx on|off"
    MCP_HUB_PORT=${MCP_HUB_PORT:-8079}
    case $AIO_LAYOUT in
      1.0) AUTH_SERVICE_PORT=${GEM_SERVER_PORT:-8088} ;;
      1.9) AUTH_SERVICE_PORT=${SANDBOX_SRV_PORT:-8091} ;;
    esac
    install_nginx "$2"
    exit 0
    ;;
  "") ;;
  *) die "unknown argument '$1'" ;;
esac

preflight
[ "$(id -u)" = 0 ] || die "the AIO start-up needs root (it creates the desktop user and starts supervisord)"

export WAIT_PORTS MCP_HUB_WAIT_PORTS BROWSER_EXTRA_ARGS BROWSER_COMMANDLINE_ARGS
# 1.0.0.x: python-server is removed; nothing may wait for it.
[ "$AIO_LAYOUT" = 1.0 ] && export FASTAPI_WAIT_SKIP=1

install_nginx "$AUTH"
prune_programs
touch "$gem/mcp.disabled"

# The hub's config: /opt/browser-shell/mcp-hub.json with its ${...} rendered
# from this container's environment (strict: an undefined variable fails the
# start) into a root-owned file the hub (the desktop user) reads and nothing it
# starts can change (not under /tmp, which the confined agent-browser may write).
install -d -m 0755 -- "$share/run"
"$share/hub-venv/bin/python" "$share/bin/render-hub-config" "$share/mcp-hub.json" "$share/run/mcp-hub.json" ||
  die "could not render the MCP hub config (above)"

# AIO's shared hub file is
# emptied (on 1.9.x python-server reads it and would otherwise spawn a second
# browser-shell) and its template removed (so AIO's run.sh renders nothing).
printf '{"mcpServers": {}}\n' >"$gem/mcp-hub.json"
rm -f -- "$gem/mcp-hub.json.template"

# The audit directory (a volume in docker-compose.yml) belongs to the desktop
# user the hub and browser-shell run as, and to nobody else.
uid=${USER_UID:-1000}
gid=${USER_GID:-1000}
mkdir -p -- "$AUDIT_DIR"
chown -- "$uid:$gid" "$AUDIT_DIR"
chmod 0700 -- "$AUDIT_DIR"

log "AIO $AIO_VERSION (layout $AIO_LAYOUT), auth $AUTH; handing over to $AIO_BASE_ENTRYPOINT"
exec "$AIO_BASE_ENTRYPOINT" "$@"
