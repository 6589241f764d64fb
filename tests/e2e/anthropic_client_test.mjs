// End-to-end: the official `@anthropic-ai/sdk` npm client (pinned in tools/js) against a real
// `onecard serve` process on an ephemeral loopback port, through /v1/messages and
// /v1/messages/count_tokens. The server runs the TEST-ONLY scripted runner (`--test-script`,
// ONECARD_TEST_MODE=1), so answers are exact: thinking (only when the request enables it), text, a
// DSML tool call whose streamed input_json must reassemble, a tool_result turn, stop sequences, and
// Anthropic's error objects (typed client errors). Auth uses x-api-key, as the SDK sends it.
//
// Usage: node tests/e2e/anthropic_client_test.mjs path/to/onecard
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { createRequire } from 'node:module';
import { fileURLToPath, pathToFileURL } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const repo = path.resolve(here, '..', '..');
const onecard = process.argv[2];
if (!onecard) throw new Error('usage: node anthropic_client_test.mjs path/to/onecard');

const require = createRequire(path.join(repo, 'tools', 'js', 'package.json'));
let Anthropic;
try {
  const mod = await import(pathToFileURL(require.resolve('@anthropic-ai/sdk')).href);
  Anthropic = mod.Anthropic ?? mod.default;
} catch (e) {
  console.log(`SKIP: the @anthropic-ai/sdk npm package is not installed (run scripts/setup.sh): ${e.message}`);
  process.exit(77);  // ctest: SKIP_RETURN_CODE, so the skip shows as skipped, with this reason
}

const THINK = 'Weighing the options.';
const ANSWER = 'Hello there, friend!';
const TOOL_TEXT =
  'Need the weather.</think>\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name="get_weather">\n' +
  '<｜DSML｜parameter name="city" string="true">Paris, "France" \\ 巴黎</｜DSML｜parameter>\n' +
  '<｜DSML｜parameter name="days" string="false">3</｜DSML｜parameter>\n' +
  '</｜DSML｜invoke>\n</｜DSML｜tool_calls>';
const WANT_INPUT = { city: 'Paris, "France" \\ 巴黎', days: 3 };

// The scripted runner emits its text whatever the prompt's mode. In chat mode (thinking off) the prompt
// ends with </think>, so the script for it has no reasoning part; the "when" strings pick the script
// from the rendered prompt: the tool result, the user's question, or the thinking-mode marker.
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'onecard-e2e-anthropic-'));
const scriptPath = path.join(tmp, 'script.json');
fs.writeFileSync(scriptPath, JSON.stringify({
  step_delay_ms: 2,
  scripts: [
    { when: 'sunny, 21', text: 'It is sunny in Paris.' },
    { when: 'in Paris', text: TOOL_TEXT },
    { when: 'Count to five', text: 'one two three STOP four five' },
    { when: 'Think first', text: `${THINK}</think>${ANSWER}` },
  ],
  default: { text: ANSWER },
}));
const env = { ...process.env, XDG_CACHE_HOME: tmp, ONECARD_TEST_MODE: '1' };
const KEY = 'sk-e2e-anthropic';

const server = spawn(onecard, ['serve', '--test-script', scriptPath, '--port', '0', '--api-key', KEY,
  '--served-model-name', 'onecard-e2e'], { env, stdio: ['ignore', 'pipe', 'pipe'] });
let stderr = '';
server.stderr.on('data', (d) => { stderr += d; });
const exited = new Promise((resolve) => server.on('exit', (code, signal) => resolve({ code, signal })));
const port = await new Promise((resolve, reject) => {
  let out = '';
  const timer = setTimeout(() => reject(new Error(`server not ready in 90 s:\n${out}\n${stderr}`)), 90000);
  server.stdout.on('data', (d) => {
    out += d;
    for (const line of out.split('\n')) {
      if (!line.startsWith('{')) continue;
      const j = JSON.parse(line);
      if (j.event === 'ready') { clearTimeout(timer); resolve(j.port); }
    }
  });
  server.on('exit', (code) => reject(new Error(`server exited early (${code}):\n${stderr}`)));
});

const baseURL = `http://127.0.0.1:${port}`;
const client = new Anthropic({ apiKey: KEY, baseURL, maxRetries: 0, timeout: 30000 });
const MODEL = 'onecard-e2e';
let failures = 0;
async function test(name, fn) {
  try {
    await fn();
    console.log(`ok   ${name}`);
  } catch (e) {
    failures++;
    console.log(`FAIL ${name}\n${e.stack}`);
  }
}

const tools = [{ name: 'get_weather', description: 'Forecast', input_schema: { type: 'object', properties: { city: { type: 'string' }, days: { type: 'integer' } }, required: ['city'] } }];

await test('messages.create: text, end_turn, usage (thinking off by default)', async () => {
  const m = await client.messages.create({ model: MODEL, max_tokens: 64, system: 'Be brief.', messages: [{ role: 'user', content: 'Say hello' }] });
  assert.equal(m.type, 'message');
  assert.equal(m.role, 'assistant');
  assert.match(m.id, /^msg_/);
  assert.equal(m.model, MODEL);
  assert.deepEqual(m.content, [{ type: 'text', text: ANSWER }]);
  assert.equal(m.stop_reason, 'end_turn');
  assert.equal(m.stop_sequence, null);
  assert.ok(m.usage.input_tokens > 5, JSON.stringify(m.usage));
  assert.ok(m.usage.output_tokens > 3, JSON.stringify(m.usage));
});

await test('messages.create: thinking enabled gives a thinking block with a signature', async () => {
  const m = await client.messages.create({ model: MODEL, max_tokens: 2048, thinking: { type: 'enabled', budget_tokens: 1024 },
    messages: [{ role: 'user', content: [{ type: 'text', text: 'Think first, then say hello' }] }] });
  assert.equal(m.content.length, 2, JSON.stringify(m.content));
  assert.equal(m.content[0].type, 'thinking');
  assert.equal(m.content[0].thinking, THINK);
  assert.equal(typeof m.content[0].signature, 'string');
  assert.ok(m.content[0].signature.length > 0);
  assert.deepEqual(m.content[1], { type: 'text', text: ANSWER });
  // The thinking block goes back in the next turn as Anthropic's clients send it.
  const again = await client.messages.create({ model: MODEL, max_tokens: 64, messages: [
    { role: 'user', content: 'Think first, then say hello' }, { role: 'assistant', content: m.content }, { role: 'user', content: 'Again' }] });
  assert.equal(again.stop_reason, 'end_turn');
});

await test('messages.create: max_tokens and stop_sequences set stop_reason', async () => {
  const cut = await client.messages.create({ model: MODEL, max_tokens: 2, messages: [{ role: 'user', content: 'Say hello' }] });
  assert.equal(cut.stop_reason, 'max_tokens');
  assert.equal(cut.usage.output_tokens, 2);
  const st = await client.messages.create({ model: MODEL, max_tokens: 64, stop_sequences: ['STOP'], messages: [{ role: 'user', content: 'Count to five' }] });
  assert.equal(st.stop_reason, 'stop_sequence');
  assert.equal(st.stop_sequence, 'STOP');
  assert.equal(st.content[0].text.trim(), 'one two three');
});

await test('messages.stream: thinking, text deltas and the final message', async () => {
  const stream = client.messages.stream({ model: MODEL, max_tokens: 4096, thinking: { type: 'enabled', budget_tokens: 2048 },
    messages: [{ role: 'user', content: 'Think first, then say hello' }] });
  const types = [];
  let text = '', thinking = '';
  stream.on('streamEvent', (e) => types.push(e.type));
  stream.on('text', (t) => { text += t; });
  stream.on('thinking', (t) => { thinking += t; });
  const final = await stream.finalMessage();
  assert.equal(text, ANSWER);
  assert.equal(thinking, THINK);
  assert.equal(final.content[0].type, 'thinking');
  assert.equal(final.content[0].thinking, THINK);
  assert.ok(final.content[0].signature.length > 0, 'signature_delta must fill the signature');
  assert.equal(final.content[1].text, ANSWER);
  assert.equal(final.stop_reason, 'end_turn');
  assert.ok(final.usage.output_tokens > 5);
  assert.equal(types[0], 'message_start');
  assert.equal(types.at(-1), 'message_stop');
  assert.equal(types.at(-2), 'message_delta');
  assert.equal(types.filter((t) => t === 'content_block_start').length, 2);
  assert.equal(types.filter((t) => t === 'content_block_stop').length, 2);
});

let toolUse = null;
await test('tools: tool_use block, stop_reason tool_use (plain and streamed, stream: true)', async () => {
  const m = await client.messages.create({ model: MODEL, max_tokens: 2048, tools, thinking: { type: 'enabled', budget_tokens: 1024 },
    messages: [{ role: 'user', content: 'What is the weather in Paris?' }] });
  assert.equal(m.stop_reason, 'tool_use');
  assert.deepEqual(m.content.map((b) => b.type), ['thinking', 'tool_use']);
  toolUse = m.content[1];
  assert.equal(toolUse.name, 'get_weather');
  assert.match(toolUse.id, /^toolu_/);
  assert.deepEqual(toolUse.input, WANT_INPUT);

  // tool_choice any is held by the grammar from the end of thinking on; the script reasons first
  // (its text has a </think>), so thinking is on here as in the request above.
  const raw = await client.messages.create({ model: MODEL, max_tokens: 2048, tools, tool_choice: { type: 'any' }, stream: true,
    thinking: { type: 'enabled', budget_tokens: 1024 },
    messages: [{ role: 'user', content: 'What is the weather in Paris?' }] });
  let json = '', nJson = 0, stop = null, started = null;
  for await (const e of raw) {
    if (e.type === 'content_block_start' && e.content_block.type === 'tool_use') started = e.content_block;
    if (e.type === 'content_block_delta' && e.delta.type === 'input_json_delta') { json += e.delta.partial_json; nJson++; }
    if (e.type === 'message_delta') stop = e.delta.stop_reason;
  }
  assert.equal(stop, 'tool_use');
  assert.equal(started.name, 'get_weather');
  assert.ok(nJson > 1, 'input_json should stream in several deltas');
  assert.deepEqual(JSON.parse(json), WANT_INPUT);
});

await test('tool_result turn is rendered and answered', async () => {
  assert.ok(toolUse, 'needs the tool_use of the previous test');
  const m = await client.messages.create({ model: MODEL, max_tokens: 64, tools, messages: [
    { role: 'user', content: 'What is the weather in Paris?' },
    { role: 'assistant', content: [toolUse] },
    { role: 'user', content: [{ type: 'tool_result', tool_use_id: toolUse.id, content: [{ type: 'text', text: 'sunny, 21 C' }] }] },
  ] });
  assert.deepEqual(m.content, [{ type: 'text', text: 'It is sunny in Paris.' }]);
  const e = await client.messages.create({ model: MODEL, max_tokens: 64, tools, messages: [
    { role: 'user', content: 'What is the weather in Paris?' },
    { role: 'assistant', content: [toolUse] },
    { role: 'user', content: [{ type: 'tool_result', tool_use_id: toolUse.id, is_error: true, content: 'sunny, 21 (stale)' }] },
  ] });
  assert.equal(e.content[0].text, 'It is sunny in Paris.');
});

await test('messages.countTokens counts the rendered prompt', async () => {
  const a = await client.messages.countTokens({ model: MODEL, messages: [{ role: 'user', content: 'Say hello' }] });
  const b = await client.messages.countTokens({ model: MODEL, system: 'You are a very careful assistant.', tools,
    messages: [{ role: 'user', content: 'Say hello' }] });
  assert.ok(a.input_tokens > 3, JSON.stringify(a));
  assert.ok(b.input_tokens > a.input_tokens + 10, `${b.input_tokens} vs ${a.input_tokens}`);
  // The count is the prompt a generation gets: its usage agrees.
  const m = await client.messages.create({ model: MODEL, max_tokens: 8, messages: [{ role: 'user', content: 'Say hello' }] });
  assert.equal(m.usage.input_tokens + (m.usage.cache_read_input_tokens ?? 0), a.input_tokens);
});

async function expectError(promise, status, pattern) {
  try {
    await promise;
  } catch (e) {
    assert.ok(e instanceof Anthropic.APIError, `not an APIError: ${e}`);
    assert.equal(e.status, status, e.message);
    assert.equal(e.error?.type, 'error', JSON.stringify(e.error));
    assert.equal(typeof e.error.error.message, 'string');
    if (pattern) assert.match(e.error.error.message, pattern);
    return e;
  }
  assert.fail(`expected HTTP ${status}`);
}

await test('errors: Anthropic error objects, typed client errors, the field named', async () => {
  const e400 = await expectError(client.messages.create({ model: MODEL, messages: [{ role: 'user', content: 'hi' }] }), 400, /max_tokens/);
  assert.ok(e400 instanceof Anthropic.BadRequestError);
  assert.equal(e400.error.error.type, 'invalid_request_error');
  await expectError(client.messages.create({ model: MODEL, max_tokens: 8, messages: [{ role: 'system', content: 'hi' }] }), 400, /messages\[0\]\.role/);
  await expectError(client.messages.create({ model: MODEL, max_tokens: 8, messages: [{ role: 'user', content: [{ type: 'tool_result' }] }] }), 400, /messages\[0\]\.content\[0\]\.tool_use_id/);
  await expectError(client.messages.create({ model: MODEL, max_tokens: 2048, thinking: { type: 'enabled', budget_tokens: 10 }, messages: [{ role: 'user', content: 'hi' }] }), 400, /thinking\.budget_tokens must be an integer >= 1024/);
  const bad = new Anthropic({ apiKey: 'sk-wrong', baseURL, maxRetries: 0 });
  const e401 = await expectError(bad.messages.create({ model: MODEL, max_tokens: 8, messages: [{ role: 'user', content: 'hi' }] }), 401);
  assert.ok(e401 instanceof Anthropic.AuthenticationError);
  assert.equal(e401.error.error.type, 'authentication_error');
  // Bearer works too; a wrong Content-Type is a 415 in Anthropic's shape.
  const r = await fetch(`${baseURL}/v1/messages`, { method: 'POST', headers: { Authorization: `Bearer ${KEY}`, 'Content-Type': 'text/plain' }, body: '{}' });
  assert.equal(r.status, 415);
  assert.equal((await r.json()).type, 'error');
  const ok = await fetch(`${baseURL}/v1/messages/count_tokens`, { method: 'POST', headers: { Authorization: `Bearer ${KEY}`, 'Content-Type': 'application/json', 'anthropic-version': '2023-06-01' }, body: JSON.stringify({ messages: [{ role: 'user', content: 'hi' }] }) });
  assert.equal(ok.status, 200);
});

await test('metrics count the routes', async () => {
  const m = await (await fetch(`${baseURL}/metrics`)).text();
  assert.match(m, /onecard:http_requests_total\{model_name="onecard-e2e",route="\/v1\/messages",status="200"\} [1-9]/);
  assert.match(m, /onecard:http_requests_total\{model_name="onecard-e2e",route="\/v1\/messages",status="400"\} [1-9]/);
  assert.match(m, /onecard:http_requests_total\{model_name="onecard-e2e",route="\/v1\/messages\/count_tokens",status="200"\} [1-9]/);
});

server.kill('SIGTERM');
const { code } = await exited;
fs.rmSync(tmp, { recursive: true, force: true });
if (code !== 0) { failures++; console.log(`FAIL server exit code ${code}`); }
if (failures) {
  console.log(`${failures} test(s) failed\n--- server stderr (tail) ---\n${stderr.slice(-3000)}`);
  process.exit(1);
}
console.log('all anthropic-client e2e tests passed');
