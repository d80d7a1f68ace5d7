// A TypeScript SDK client against the bridge binary's /mcp, an aggregate
// of examples/hello ("hello"), the Go SDK's everything-server ("every"),
// npm server-everything ("npm") and a remote member ("far": another
// bridge in front of examples/hello). Usage:
//   node ts-aggregate-binary.mjs URL v1   the SDK 1.x client (2025-11-25 sessions)
//   node ts-aggregate-binary.mjs URL v2   the SDK 2.x client (negotiates 2026-07-28)
// Prints one JSON line of what it saw; exits non-zero on failure.
const [url, mode] = process.argv.slice(2);
let Client, Transport, opts;
if (mode === 'v1') {
  ({ Client } = await import('@modelcontextprotocol/sdk/client/index.js'));
  ({ StreamableHTTPClientTransport: Transport } = await import('@modelcontextprotocol/sdk/client/streamableHttp.js'));
  opts = { capabilities: { elicitation: {}, sampling: {} } };
} else {
  ({ Client, StreamableHTTPClientTransport: Transport } = await import('@modelcontextprotocol/client'));
  opts = { capabilities: { elicitation: {}, sampling: {} }, versionNegotiation: { mode: 'auto' } };
}
const client = new Client({ name: 'ts-aggregate-binary', version: '1.0.0' }, opts);
const asked = [];
const onElicit = async () => {
  asked.push('elicitation');
  return { action: 'accept', content: { username: 'ts-user' } };
};
const onSample = async () => {
  asked.push('sampling');
  return { model: 'm', role: 'assistant', content: { type: 'text', text: 'ts-sampled' } };
};
if (mode === 'v1') {
  const { ElicitRequestSchema, CreateMessageRequestSchema } = await import('@modelcontextprotocol/sdk/types.js');
  client.setRequestHandler(ElicitRequestSchema, onElicit);
  client.setRequestHandler(CreateMessageRequestSchema, onSample);
} else {
  client.setRequestHandler('elicitation/create', onElicit);
  client.setRequestHandler('sampling/createMessage', onSample);
}
const out = {};
try {
  await client.connect(new Transport(new URL(url)));
  out.version = client.getNegotiatedProtocolVersion?.() ?? 'unknown';
  const tools = await client.listTools();
  out.tools = tools.tools.map((t) => t.name).sort();
  const text = (r) => r.content.filter((c) => c.type === 'text').map((c) => c.text).join(' ');
  const call = async (name, args) => text(await client.callTool({ name, arguments: args ?? {} }));
  out.hello = await call('hello__echo', { text: 'from-ts' });
  out.every = await call('every__test_simple_text');
  out.elicit = await call('every__test_elicitation', { message: 'who?' });
  out.sample = await call('every__test_sampling', { prompt: 'q' });
  out.npm = await call('npm__echo', { message: 'from-npm' });
  out.far = await call('far__echo', { text: 'from-far' });
  out.asked = asked;
  await client.close();
} catch (e) {
  out.error = String(e?.stack ?? e);
  console.log(JSON.stringify(out));
  process.exit(1);
}
console.log(JSON.stringify(out));
