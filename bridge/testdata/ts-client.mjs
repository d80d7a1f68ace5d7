// The TypeScript SDK 2.x client (version negotiation auto: it speaks
// 2026-07-28 first) against the bridge. Usage: node ts-client.mjs URL MODE
// Prints one JSON line of what it saw; exits non-zero on failure.
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';

const [url, mode] = process.argv.slice(2);
const client = new Client(
  { name: 'ts-stateless-test', version: '1.0.0' },
  { capabilities: { elicitation: {}, sampling: {}, roots: {} }, versionNegotiation: { mode: 'auto' } },
);
// An elicitation is accepted with every property the schema asks for: the
// test child asks for name, the SDK's everything-server for name, username,
// color or ok.
const asked = [];
client.setRequestHandler('elicitation/create', async (req) => {
  asked.push('elicitation');
  const props = req.params?.requestedSchema?.properties ?? { name: { type: 'string' } };
  const content = {};
  for (const [k, s] of Object.entries(props)) {
    content[k] = s.type === 'boolean' ? true : k === 'name' && mode === 'test-child' ? 'Grace' : `ts-${k}`;
  }
  return { action: 'accept', content };
});
client.setRequestHandler('sampling/createMessage', async () => {
  asked.push('sampling');
  return { model: 'm', role: 'assistant', content: { type: 'text', text: 'ts-sampled' } };
});
client.setRequestHandler('roots/list', async () => {
  asked.push('roots');
  return { roots: [{ uri: 'file:///ts-root', name: 'ts' }] };
});
const out = {};
try {
  await client.connect(new StreamableHTTPClientTransport(new URL(url)));
  out.version = client.getNegotiatedProtocolVersion();
  const tools = await client.listTools();
  out.tools = tools.tools.length;
  const text = (r) => r.content.filter((c) => c.type === 'text').map((c) => c.text).join(' ');
  const call = async (name, args) => text(await client.callTool({ name, arguments: args ?? {} }));
  if (mode === 'test-child') {
    out.echo = await call('echo', { text: 'from-ts' });
    out.elicit = await call('elicit', { text: 'who?' });
    out.sample = await call('sample', { text: 'q' });
  } else if (mode === 'go-everything-modern') {
    // The SDK's everything-server speaking 2026-07-28: its own
    // InputRequiredResults pass through the bridge.
    out.simple = await call('test_simple_text');
    out.elicit = await call('test_input_required_result_elicitation');
    out.sample = await call('test_input_required_result_sampling');
    out.roots = await call('test_input_required_result_list_roots');
    out.multi = await call('test_input_required_result_multiple_inputs');
    out.rounds = await call('test_input_required_result_multi_round');
    out.header = await call('test_x_mcp_header', { region: 'eu-west 3 ü', level: 2 });
  } else if (mode === 'go-everything-legacy') {
    // The same server initialized by the bridge: its requests in the
    // middle of a call reach this client as MRTR rounds.
    out.simple = await call('test_simple_text');
    out.elicit = await call('test_elicitation', { message: 'who?' });
    out.sample = await call('test_sampling', { prompt: 'q' });
    out.roots = await call('test_input_required_result_list_roots');
    out.multi = await call('test_input_required_result_multiple_inputs');
    out.header = await call('test_x_mcp_header', { region: 'eu-west 3 ü', level: 2 });
  } else if (mode === 'mrtr-progress') {
    // Progress after an MRTR round carries the retry's token.
    out.errors = [];
    client.onerror = (e) => out.errors.push(String(e));
    let progress = 0;
    out.elicit = text(await client.callTool({ name: 'elicit-progress', arguments: { text: 'who?' } }, { onprogress: () => { progress++; } }));
    out.progress = progress;
  } else if (mode === 'long-op') {
    // npm server-everything's long operation, on a fresh child that sends
    // roots/list from a timer 350 ms after initialized: the call never
    // caused it, and must not be asked for roots.
    out.op = await call('trigger-long-running-operation', { duration: 1.5, steps: 1 });
  } else if (mode === 'listen') {
    // subscriptions/listen: a list change announced by any child of the
    // pool reaches it.
    let heard;
    const changed = new Promise((resolve) => { heard = resolve; });
    client.setNotificationHandler('notifications/tools/list_changed', () => heard(true));
    const sub = await client.listen({ toolsListChanged: true });
    out.honored = sub.honoredFilter;
    await call('test_trigger_tool_change');
    out.changed = await Promise.race([changed, new Promise((r) => setTimeout(() => r(false), 15000))]);
    await sub.close();
  } else {
    out.echo = await call('echo', { message: 'from-ts' });
  }
  out.asked = asked;
  await client.close();
  console.log(JSON.stringify(out));
} catch (e) {
  console.log(JSON.stringify({ ...out, asked, error: String(e && e.stack || e) }));
  process.exit(1);
}
