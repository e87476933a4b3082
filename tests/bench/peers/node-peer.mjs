// Minimal Node MCP stdio server on @modelcontextprotocol/sdk: the kind of server browser-shell
// replaces. One tool, `agent-browser`, that spawns the agent-browser binary named by
// $AGENT_BROWSER with the caller's argv (no policy, no audit, no confinement). A bench fixture
// for tests/bench/bench.py: only its cold start and idle RSS are measured.
import { execFile } from "node:child_process";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import { z } from "zod";

const server = new McpServer({ name: "node-peer", version: "0.0.0" });

server.registerTool(
  "agent-browser",
  {
    description: "Run one agent-browser command and return its output.",
    inputSchema: { argv: z.array(z.string()).min(1) },
  },
  async ({ argv }) =>
    new Promise((resolve) => {
      execFile(process.env.AGENT_BROWSER ?? "agent-browser", argv, { timeout: 60_000 }, (err, stdout, stderr) => {
        const exit_code = err ? (typeof err.code === "number" ? err.code : 1) : 0;
        const result = { exit_code, stdout, stderr };
        resolve({ content: [{ type: "text", text: JSON.stringify(result) }], structuredContent: result, isError: exit_code !== 0 });
      });
    }),
);

await server.connect(new StdioServerTransport());
