// Preloaded into the conformance suite (node --import): adds the gateway's API
// key header to every HTTP request the suite makes, since the suite has no
// option for extra headers and the stack's /mcp needs the key. The suite uses
// Node's fetch (the MCP SDK's client) and undici's request (its DNS rebinding
// scenario); both go through undici's global dispatcher, replaced here by one
// that adds the header. The key comes from the file CONFORMANCE_API_KEY_FILE
// names, so it is on no command line.
import { readFileSync } from "node:fs";
import { Agent, Dispatcher, setGlobalDispatcher } from "undici";

const keyFile = process.env.CONFORMANCE_API_KEY_FILE;
if (!keyFile) {
  throw new Error("with-api-key.mjs: set CONFORMANCE_API_KEY_FILE to the file holding the API key");
}
const key = readFileSync(keyFile, "utf8").trim();
const NAME = "x-aio-api-key";

// undici passes headers as an object, a flat [name, value, ...] array or
// an iterable of pairs; the header is added unless the request has one.
function withKey(headers) {
  if (headers == null) {
    return { [NAME]: key };
  }
  if (Array.isArray(headers)) {
    const flat = headers.length > 0 && Array.isArray(headers[0]) ? headers.flat() : [...headers];
    for (let i = 0; i < flat.length; i += 2) {
      if (String(flat[i]).toLowerCase() === NAME) return headers;
    }
    return [...flat, NAME, key];
  }
  if (typeof headers[Symbol.iterator] === "function") {
    return withKey([...headers].flat());
  }
  if (Object.keys(headers).some((name) => name.toLowerCase() === NAME)) {
    return headers;
  }
  return { ...headers, [NAME]: key };
}

class WithApiKey extends Dispatcher {
  #agent = new Agent();
  dispatch(options, handler) {
    return this.#agent.dispatch({ ...options, headers: withKey(options.headers) }, handler);
  }
  close(...args) {
    return this.#agent.close(...args);
  }
  destroy(...args) {
    return this.#agent.destroy(...args);
  }
}

setGlobalDispatcher(new WithApiKey());
