#!/usr/bin/env bash
# aio-setup AIO_IMAGE [AIO_LAYOUT]
#
# Runs once, as root, in the final stage of deploy/aio/Dockerfile, on top of the
# AIO Sandbox base: checks the base is pinned and of a layout this image knows,
# removes the services browser-shell must not sit next to, installs the MCP hub
# program, and proves the result (nginx -t, binaries run, nothing removed is
# left). Any surprise fails the build: the base is closed-source and its layout
# is known only from reconstructions (see deploy/README.md), so a base bump that
# moves things must stop here rather than ship a half-applied image.
#
# Layouts:
#   1.0  AIO 1.0.0.x: AIO's MCP hub (@agent-infra/mcp-hub) serves /mcp; gem-server
#        (8088) is the auth service; python-server is not needed.
#   1.9  AIO 1.9.x: python-server (8091) serves /mcp with built-in tools and is
#        the auth service; no hub is shipped. On both, /mcp goes to our hub
#        (mcp-proxy, installed by the Dockerfile), which serves only browser-shell.
# AIO_LAYOUT (1.0 or 1.9) overrides the detection from /etc/aio_version.
set -euo pipefail

log() { printf '[aio-setup] %s\n' "$*" >&2; }
die() {
  log "FATAL: $*"
  exit 1
}

image=${1:-}
override=${2:-}
gem=/opt/gem
share=/opt/browser-shell
sv=$gem/supervisord

# --------------------------------------------------------------------------- pinned base
pin_re='^[^@[:space:]]+:[0-9][^@/:[:space:]]*@sha256:[0-9a-f]{64}$'
[[ $image =~ $pin_re ]] ||
  die "AIO_IMAGE must be pinned by version tag AND digest (<registry>/<repo>:<version>@sha256:<64 hex>), got '$image'"

# --------------------------------------------------------------------------- layout
[ -r /etc/aio_version ] || die "/etc/aio_version is missing: is AIO_IMAGE an AIO Sandbox image?"
version=$(tr -d '[:space:]' </etc/aio_version)
[[ $version =~ ^[A-Za-z0-9._-]+$ ]] || die "unexpected characters in /etc/aio_version: '$version'"
tag=${image%@*}
tag=${tag##*:}
[ "$tag" = "$version" ] || log "WARNING: the image tag says $tag, /etc/aio_version says $version"
case "${override:-$version}" in
  1.0 | 1.0.*) layout=1.0 ;;
  1.9 | 1.9.*) layout=1.9 ;;
  *) die "AIO $version is neither 1.0.0.x nor 1.9.x; check its layout (deploy/README.md, 'Base versions') and pass --build-arg AIO_LAYOUT=1.0|1.9 if it matches one" ;;
esac
log "AIO $version, layout $layout"

need() { for p; do [ -e "$p" ] || die "layout $layout expects $p, which this base lacks"; done; }
need "$gem/nginx.conf" "$gem/nginx-server-with-auth.conf" "$gem/nginx.vnc.conf" "$sv" \
  "$sv/browser.conf" "$sv/vnc.conf" "$sv/openbox.conf" "$sv/nginx.conf"
case $layout in
  1.0)
    need "$sv/srv.conf" "$gem/run.sh"
    base_entrypoint=$gem/run.sh
    ;;
  1.9)
    need "$sv/supervisord.python_srv.conf"
    if [ -x /opt/application/run.sh ]; then base_entrypoint=/opt/application/run.sh; else base_entrypoint=$gem/run.sh; fi
    ;;
esac
[ -x "$base_entrypoint" ] || die "$base_entrypoint is not executable"

# nginx.conf must include nothing at http level but what we replace.
includes=$(grep -oE '^[[:space:]]*include[[:space:]]+[^;]+' "$gem/nginx.conf" | awk '{print $2}' | sort -u)
for inc in $includes; do
  case $inc in
    /etc/nginx/mime.types | "$gem/nginx-server-active.conf" | "$gem/nginx-server-port-proxy.conf" | "$gem/nginx-proxy-map.conf" | /etc/nginx/modules-enabled/*.conf) ;;
    *) die "$gem/nginx.conf includes $inc, which this image does not control" ;;
  esac
done

# noVNC's directory, from the stock /vnc/ route (before it is replaced).
novnc=$(sed -n 's/^[[:space:]]*alias[[:space:]]\{1,\}\([^;[:space:]]*\)[[:space:]]*;.*/\1/p' "$gem/nginx.vnc.conf" | head -n 1)
novnc=${novnc%/}
[[ $novnc =~ ^/[A-Za-z0-9_./-]+$ ]] && [ -f "$novnc/vnc.html" ] || die "cannot find noVNC (alias '$novnc' in $gem/nginx.vnc.conf has no vnc.html)"

# --------------------------------------------------------------------------- supervisord
# Keep-lists: browser, X/VNC (tigervnc + websocat in vnc.conf), window manager,
# nginx, the auth service, and (ours) the MCP hub. Optional desktop helpers are
# kept when present. Every other program file is deleted, not disabled.
case $layout in
  1.0) keep=(browser.conf vnc.conf openbox.conf nginx.conf srv.conf) ;;
  1.9) keep=(browser.conf vnc.conf openbox.conf nginx.conf supervisord.python_srv.conf) ;;
esac
optional=(autocutsel.conf dbus.conf fcitx5.conf supervisord.log_tail.conf)
for f in "$sv"/*.conf; do
  name=${f##*/}
  case " ${keep[*]} ${optional[*]} " in
    *" $name "*) ;;
    *)
      log "removing supervisord program file $name"
      rm -f -- "$f"
      ;;
  esac
done
install -m 0644 "$share/supervisord/supervisord.mcp_hub.conf" "$sv/supervisord.mcp_hub.conf"
: >"$share/supervisord-keep"
for f in "$sv"/*.conf; do printf '%s\n' "${f##*/}" >>"$share/supervisord-keep"; done
# The legacy mcp-server program is only copied in while this marker is absent.
touch "$gem/mcp.disabled"

# Loopback only: no kept program may listen on all interfaces (nginx's public
# server is configured in nginx, not here).
sed -i -e 's/0\.0\.0\.0/127.0.0.1/g' "$sv"/*.conf
if grep -nE '0\.0\.0\.0|--host[ =]+(::|\[::\])' "$sv"/*.conf; then die "a kept program still binds all interfaces (above)"; fi

# --------------------------------------------------------------------------- program files
# Removed, not disabled: mcp-server-browser, chrome-devtools-mcp, tinyproxy,
# gost, code-server, jupyter (and the Node REPL programs, gone with their
# supervisord files above).
roots=(/usr /opt /root /home)
for pkg in @agent-infra/mcp-server-browser chrome-devtools-mcp; do
  find "${roots[@]}" -xdev -type d -path "*/node_modules/$pkg" -prune -exec rm -rf -- {} + 2>/dev/null || true
done
purge_cmd() {
  local name=$1 d
  find "${roots[@]}" -xdev -name "$name" \( -type l -o -type f \) -path '*/bin/*' -exec rm -f -- {} + 2>/dev/null || true
  IFS=: read -ra path_dirs <<<"$PATH"
  for d in "${path_dirs[@]}"; do
    if [ -e "$d/$name" ] || [ -L "$d/$name" ]; then rm -f -- "$d/$name"; fi
  done
}
for name in mcp-server-browser chrome-devtools-mcp code-server tinyproxy gost jupyter jupyter-lab jupyter-server jupyter-notebook; do
  purge_cmd "$name"
done
if command -v dpkg-query >/dev/null 2>&1; then
  mapfile -t debs < <(dpkg-query -W -f='${db:Status-Abbrev} ${Package}\n' 'tinyproxy*' 'code-server*' 2>/dev/null |
    awk '$1 ~ /^(ii|rc|iU|iF|hi)$/ {print $2}' || true)
  if [ "${#debs[@]}" -gt 0 ]; then dpkg --purge --force-depends "${debs[@]}"; fi
fi
rm -rf -- /usr/lib/code-server /usr/local/lib/code-server /usr/local/code-server-* /opt/code-server \
  "$gem/code-server.sh" "$gem/jupyter-lab.sh" "$gem/tinyproxy" "$gem/tinyproxy.sh" /etc/tinyproxy* \
  "$gem/gost.yaml" "$gem/gost-hosts.txt" "$gem/gost-bypass.txt"
# AIO's run.sh chowns /opt/jupyter on every start: keep the directory, empty.
if [ -d /opt/jupyter ]; then find /opt/jupyter -mindepth 1 -delete; else mkdir -p /opt/jupyter; fi

# Prove it.
hash -r
for name in mcp-server-browser chrome-devtools-mcp code-server tinyproxy gost jupyter jupyter-lab; do
  if p=$(command -v "$name"); then die "$name is still installed at $p"; fi
done
for pkg in @agent-infra/mcp-server-browser chrome-devtools-mcp; do
  if find "${roots[@]}" -xdev -type d -path "*/node_modules/$pkg" -print -quit 2>/dev/null | grep -q .; then
    die "$pkg is still installed"
  fi
done
for f in supervisord.mcp.conf supervisord.code_server.conf supervisord.jupyter.conf supervisord.tinyproxy.conf supervisord.gost.conf; do
  [ ! -e "$sv/$f" ] || die "$sv/$f is still there"
done

# --------------------------------------------------------------------------- browser flags
# No page may read other origins or localhost, and CDP stays on 127.0.0.1.
for f in "$gem"/start-browser.sh "$gem"/browser-ctl.sh "$sv/browser.conf"; do
  [ -f "$f" ] || continue
  sed -i -E -e 's/[[:space:]]--disable-web-security\b//g' -e 's/[[:space:]]--disable-site-isolation-trials\b//g' \
    -e 's/[[:space:]]--remote-allow-origins=[^[:space:]"'"'"']*//g' -e 's/[[:space:]]--remote-debugging-address=[^[:space:]"'"'"']*//g' "$f"
done
if grep -nE -- '--disable-web-security|--disable-site-isolation-trials|--remote-allow-origins|--remote-debugging-address' \
  "$gem"/*.sh "$sv"/*.conf 2>/dev/null; then
  die "a forbidden Chrome flag is still set (above)"
fi

# --------------------------------------------------------------------------- binaries
"$share/bin/browser-shell" --version >&2 || die "browser-shell does not run on this base (glibc?)"
# Run with no arguments, the trampoline refuses (126) with its one line: proof it runs on this base.
tr=$("$share/bin/hardening-trampoline" 2>&1) && die "hardening-trampoline ran without a policy"
[[ $tr == "hardening-trampoline: "* ]] || die "hardening-trampoline does not run on this base: $tr"
ab=$("${BROWSER_SHELL_AGENT_BROWSER:?}" --version)
[ "$ab" = "agent-browser 0.41.2" ] || die "agent-browser is '$ab', expected 0.41.2"
hub_version=$("$share/hub-venv/bin/mcp-proxy" --version) || die "the MCP hub (mcp-proxy) does not run on this base"
[ "$hub_version" = "mcp-proxy 0.13.0" ] || die "the MCP hub is '$hub_version', expected mcp-proxy 0.13.0"
# The hub config renders with the image's ENV (every placeholder defined).
hub_check=$(mktemp)
"$share/hub-venv/bin/python" "$share/bin/render-hub-config" "$share/mcp-hub.json" "$hub_check" ||
  die "mcp-hub.json does not render with the image's ENV (above)"
rm -f -- "$hub_check"

# --------------------------------------------------------------------------- layout record
auth_port=8088
[ "$layout" = 1.9 ] && auth_port=8091
cat >"$share/aio-layout" <<EOF
AIO_LAYOUT='$layout'
AIO_VERSION='$version'
AIO_BASE_ENTRYPOINT='$base_entrypoint'
AIO_NOVNC_DIR='$novnc'
EOF

# --------------------------------------------------------------------------- nginx -t
# Both gateway variants, rendered exactly as the entrypoint renders them.
for d in body proxy fastcgi scgi uwsgi; do mkdir -p "/var/lib/aio-sandbox/nginx/$d" "/var/lib/nginx/$d"; done
for auth in off on; do
  "$share/bin/aio-entrypoint" --install-nginx "$auth"
  nginx -t -c "$gem/nginx.conf" || die "nginx -t failed with the auth=$auth gateway"
done
log "done: layout $layout, auth service port $auth_port, programs: $(tr '\n' ' ' <"$share/supervisord-keep")"
