// The TypeScript SDK 2.x client (version negotiation auto: it speaks
// 2026-07-28 first) against the bridge. Usage: node ts-client.mjs URL MODE
// Prints one JSON line of what it saw; exits non-zero on failure.
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';

const [url, mode] = process.argv.slice(2);
const client = new Client(
  { name: 'ts-stateless-test', version: '1.0.0' },
  { capabilities: { elicitation: {}, sampling: {} }, versionNegotiation: { mode: 'auto' } },
);
client.setRequestHandler('elicitation/create', async () => ({ action: 'accept', content: { name: 'Grace' } }));
client.setRequestHandler('sampling/createMessage', async () => ({
  model: 'm', role: 'assistant', content: { type: 'text', text: 'ts-sampled' },
}));
const out = {};
try {
  await client.connect(new StreamableHTTPClientTransport(new URL(url)));
  out.version = client.getNegotiatedProtocolVersion();
  const tools = await client.listTools();
  out.tools = tools.tools.length;
  const text = (r) => r.content.filter((c) => c.type === 'text').map((c) => c.text).join(' ');
  if (mode === 'test-child') {
    out.echo = text(await client.callTool({ name: 'echo', arguments: { text: 'from-ts' } }));
    out.elicit = text(await client.callTool({ name: 'elicit', arguments: { text: 'who?' } }));
    out.sample = text(await client.callTool({ name: 'sample', arguments: { text: 'q' } }));
  } else {
    out.echo = text(await client.callTool({ name: 'echo', arguments: { message: 'from-ts' } }));
  }
  await client.close();
  console.log(JSON.stringify(out));
} catch (e) {
  console.log(JSON.stringify({ ...out, error: String(e && e.stack || e) }));
  process.exit(1);
}
