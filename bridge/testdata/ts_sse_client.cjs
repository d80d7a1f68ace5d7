// A client of the legacy HTTP+SSE transport (revision 2024-11-05) with the
// TypeScript SDK v1's SSEClientTransport, run by TestLegacySSEWithTSClient:
//   NODE_PATH=<peers>/node_modules node ts_sse_client.cjs URL [TOKEN]
// It lists the tools, calls echo, and prints one JSON line of what it saw.
const { Client } = require("@modelcontextprotocol/sdk/client/index.js");
const { SSEClientTransport } = require("@modelcontextprotocol/sdk/client/sse.js");

async function main() {
  const [url, token] = process.argv.slice(2);
  const headers = token ? { Authorization: "Bearer " + token } : {};
  const transport = new SSEClientTransport(new URL(url), {
    // The EventSource of the GET and the fetch of each POST both carry it.
    eventSourceInit: {
      fetch: (u, init) => fetch(u, { ...init, headers: { ...(init && init.headers), ...headers } }),
    },
    requestInit: { headers },
  });
  const client = new Client({ name: "ts-sse-client", version: "1.0.0" });
  await client.connect(transport);
  const tools = await client.listTools();
  const res = await client.callTool({ name: "echo", arguments: { text: "from typescript" } });
  console.log(JSON.stringify({
    protocolVersion: transport.protocolVersion || null,
    server: client.getServerVersion().name,
    tools: tools.tools.map((t) => t.name).sort(),
    echo: res.content[0].text,
  }));
  await client.close();
}

main().catch((err) => {
  console.error("ts_sse_client:", err && err.stack ? err.stack : err);
  process.exit(1);
});
