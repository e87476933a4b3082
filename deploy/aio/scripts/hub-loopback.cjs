// Preloaded into the MCP hub (NODE_OPTIONS=--require ...): every TCP listener
// the process opens binds 127.0.0.1, whatever host (or none, meaning all
// interfaces) it asked for. @agent-infra/mcp-hub has no --host option and serves its
// management API (/api/*: start/stop servers, call tools) on the same port as
// /mcp; only nginx may reach it.
'use strict';

const net = require('net');

const host = process.env.BROWSER_SHELL_HUB_HOST || '127.0.0.1';
const listen = net.Server.prototype.listen;

function isPort(value) {
  return typeof value === 'number' || (typeof value === 'string' && /^\d+$/.test(value));
}

net.Server.prototype.listen = function browserShellLoopbackListen(...args) {
  const first = args[0];
  if (isPort(first)) {
    // listen(port[, host][, backlog][, callback])
    if (typeof args[1] === 'string') {
      args[1] = host;
    } else {
      args.splice(1, 0, host);
    }
  } else if (first && typeof first === 'object' && !Array.isArray(first) &&
             first.path === undefined && first.fd === undefined && first.handle === undefined &&
             first._handle === undefined) {
    // listen(options[, callback])
    args[0] = { ...first, host };
  } else if (args.length === 0 || typeof first === 'function') {
    // listen([callback]): a random port, still on loopback.
    args.unshift(0, host);
  }
  return listen.apply(this, args);
};
