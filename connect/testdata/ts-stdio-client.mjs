// The TypeScript SDK 2.x stdio client, running `bridge connect URL` as its
// server. Usage: node ts-stdio-client.mjs pin|auto BRIDGE URL
// pin: version negotiation pinned to 2026-07-28; auto: it probes with
// server/discover. Prints one JSON line of what it saw; exits non-zero on
// failure.
import { Client } from '@modelcontextprotocol/client';
import { StdioClientTransport } from '@modelcontextprotocol/client/stdio';

const [mode, bridge, url] = process.argv.slice(2);
const client = new Client(
  { name: 'ts-stdio-connect-test', version: '1.0.0' },
  {
    capabilities: { elicitation: {}, sampling: {}, roots: {} },
    versionNegotiation: { mode: mode === 'pin' ? { pin: '2026-07-28' } : 'auto' },
  },
);
client.setRequestHandler('elicitation/create', async (req) => {
  const props = req.params?.requestedSchema?.properties ?? { name: { type: 'string' } };
  const content = {};
  for (const [k, s] of Object.entries(props)) {
    content[k] = s.type === 'boolean' ? true : `ts-${k}`;
  }
  return { action: 'accept', content };
});
const out = {};
try {
  await client.connect(new StdioClientTransport({ command: bridge, args: ['connect', url], env: process.env, stderr: 'inherit' }));
  out.version = client.getNegotiatedProtocolVersion();
  const tools = await client.listTools();
  out.tools = tools.tools.length;
  const text = (r) => r.content.filter((c) => c.type === 'text').map((c) => c.text).join(' ');
  const call = async (name, args) => text(await client.callTool({ name, arguments: args ?? {} }));
  out.simple = await call('test_simple_text');
  out.header = await call('test_x_mcp_header', { region: 'eu-west 3 ü', level: 2 });
  out.elicit = await call('test_input_required_result_elicitation');
  await client.close();
  console.log(JSON.stringify(out));
} catch (e) {
  console.log(JSON.stringify({ ...out, error: String((e && e.stack) || e) }));
  process.exit(1);
}
