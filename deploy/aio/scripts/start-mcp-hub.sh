#!/usr/bin/env bash
# supervisord program "mcp-hub" (deploy/aio/supervisord/supervisord.mcp_hub.conf):
# wait until Chromium's CDP port (and any other MCP_HUB_WAIT_PORTS) accepts
# connections on 127.0.0.1, then run the pinned hub, mcp-proxy, stateless, on
# 127.0.0.1:MCP_HUB_PORT, serving only the config the entrypoint rendered from
# /opt/browser-shell/mcp-hub.json: one named stdio server, browser-shell, at
# /servers/browser-shell/mcp (nginx's "location = /mcp" points there). The
# local stack (deploy/local/up) runs the same program with the same flags.
#
# Unlike AIO's mcp-hub-wait.sh, an empty MCP_HUB_WAIT_PORTS means "the CDP port",
# not the stock defaults (mcp-server-browser 8100 and python-server 8091, which
# are gone here and would stall the hub for WAIT_TIMEOUT seconds).
set -euo pipefail

hub=/opt/browser-shell/hub-venv/bin/mcp-proxy
config=/opt/browser-shell/run/mcp-hub.json
port=${MCP_HUB_PORT:-8079}
cdp=${BROWSER_SHELL_CDP_PORT:-9222}
ports=${MCP_HUB_WAIT_PORTS:-}
[ -n "${ports//[[:space:],]/}" ] || ports=$cdp
timeout=${WAIT_TIMEOUT:-300}
interval=${WAIT_INTERVAL:-1}

[ -x "$hub" ] || { echo "start-mcp-hub: $hub is missing" >&2; exit 1; }
[ -r "$config" ] || { echo "start-mcp-hub: $config is missing (rendered by the entrypoint at start)" >&2; exit 1; }

IFS=, read -ra wait_for <<<"$ports"
for p in "${wait_for[@]}"; do
  p=${p//[[:space:]]/}
  [ -n "$p" ] || continue
  [[ $p =~ ^[0-9]+$ ]] || { echo "start-mcp-hub: MCP_HUB_WAIT_PORTS has a non-port entry '$p'" >&2; exit 1; }
  echo "start-mcp-hub: waiting for 127.0.0.1:$p (up to ${timeout}s)" >&2
  until (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; do
    if ((SECONDS >= timeout)); then
      echo "start-mcp-hub: 127.0.0.1:$p did not come up within ${timeout}s" >&2
      exit 1
    fi
    sleep "$interval"
  done
done

echo "start-mcp-hub: starting the hub on 127.0.0.1:$port with $config" >&2
exec "$hub" --host 127.0.0.1 --port "$port" --stateless --named-server-config "$config"
