// A TypeScript SDK client (SDK=1 for @modelcontextprotocol/sdk 1.x, SDK=2
// for @modelcontextprotocol/client 2.x in its default legacy mode) that
// cancels a call in flight, then stays connected for WAIT_MS so that the
// test can count the GETs that resume the cancelled call's stream.
// Usage: SDK=1|2 WAIT_MS=n node ts-cancel-client.mjs URL
// Prints one JSON line; exits non-zero on failure.
const [url] = process.argv.slice(2);
const wait = Number(process.env.WAIT_MS || 1000);
let Client, Transport;
if (process.env.SDK === '1') {
  ({ Client } = await import('@modelcontextprotocol/sdk/client/index.js'));
  ({ StreamableHTTPClientTransport: Transport } = await import('@modelcontextprotocol/sdk/client/streamableHttp.js'));
} else {
  ({ Client, StreamableHTTPClientTransport: Transport } = await import('@modelcontextprotocol/client'));
}
const out = { errors: [], steps: [] };
setTimeout(() => { console.log(JSON.stringify({ ...out, error: 'timed out' })); process.exit(1); }, 20000).unref();
const client = new Client({ name: 'ts-cancel-test', version: '1.0.0' }, { capabilities: {} });
client.onerror = (e) => out.errors.push(String(e));
try {
  const transport = new Transport(new URL(url));
  await client.connect(transport);
  out.version = transport.protocolVersion ?? client.getNegotiatedProtocolVersion?.();
  const ac = new AbortController();
  let progressed;
  const gotProgress = new Promise((r) => { progressed = r; });
  const opts = { signal: ac.signal, onprogress: () => progressed() };
  const params = { name: process.env.TOOL || 'wait', arguments: JSON.parse(process.env.ARGS || '{}') };
  // 1.x: callTool(params, resultSchema, options); 2.x: callTool(params, options).
  const pending = process.env.SDK === '1' ? client.callTool(params, undefined, opts) : client.callTool(params, opts);
  const call = pending.then(() => 'answered', (e) => 'rejected: ' + String(e));
  out.steps.push('called');
  await gotProgress;
  out.steps.push('progress');
  ac.abort('the test cancels');
  out.call = await call;
  await new Promise((r) => setTimeout(r, wait));
  // The session still works.
  const tools = await client.listTools();
  out.tools = tools.tools.length;
  await client.close();
  console.log(JSON.stringify(out));
  process.exit(0);
} catch (e) {
  console.log(JSON.stringify({ ...out, error: String(e && e.stack || e) }));
  process.exit(1);
}
