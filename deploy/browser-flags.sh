# shellcheck shell=bash
# The flags every Chromium that browser-shell drives starts with: the local stack's (headed on Xvfb),
# deploy/local/chromium's, the tests' and the bench's (tests/e2e/harness.py), and the AIO image's (its
# entrypoint passes each flag without whitespace: the image's browser start script splits on it).
# Sourced; defines one array and nothing else.
#
# Chromium is not confined, so it is kept quiet:
# no background services or updates outside the sessions' contexts, no QUIC (UDP
# around the egress proxy), no WebRTC UDP that bypasses the proxy, no autofill
# queries; DevTools only on loopback. No WebUI omnibox popups: each window preloads
# them in renderers of its own, most of what a new session costs Chromium.
chromium_flags=(
  --no-sandbox
  --disable-background-networking --disable-component-update --disable-sync
  --no-first-run --no-default-browser-check --disable-quic --password-store=basic
  --disable-features=AutofillServerCommunication,WebUIOmniboxPopup,WebUIOmniboxAimPopup
  --force-webrtc-ip-handling-policy=disable_non_proxied_udp
  --remote-debugging-address=127.0.0.1
  # Chromium's own services (update checks, autofill, optimization hints) run
  # in its default context whatever the flags above say: they get a proxy that
  # refuses every connection (nothing listens on port 1; only root could bind
  # it), and no name resolution of their own. Each session's context names its
  # egress proxy (127.0.0.1, excluded here), which resolves and decides.
  --proxy-server=http://127.0.0.1:1
  "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1 , EXCLUDE localhost"
)
