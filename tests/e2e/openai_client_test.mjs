// End-to-end: the official `openai` npm client (pinned in tools/js) against a real `onecard serve`
// process on an ephemeral loopback port. The server runs with the TEST-ONLY scripted runner
// (`--test-script`, refused unless ONECARD_TEST_MODE=1) so completions are exact: reasoning + content,
// a DSML tool call whose streamed arguments must reassemble byte for byte, completions, models, and
// the error objects the client turns into typed exceptions. Ends with SIGTERM: the in-flight stream
// must finish (graceful drain) and the process must exit 0.
//
// Usage: node tests/e2e/openai_client_test.mjs path/to/onecard
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { importOpenAIOrSkip } from './openai_import.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const repo = path.resolve(here, '..', '..');
const onecard = process.argv[2];
if (!onecard) throw new Error('usage: node openai_client_test.mjs path/to/onecard');

const OpenAI = await importOpenAIOrSkip();

const THINK = 'Weighing the options.';
const ANSWER = 'Hello there, friend!';
const TOOL_TEXT =
  'Need the weather.</think>\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name="get_weather">\n' +
  '<｜DSML｜parameter name="city" string="true">Paris, "France" \\ 巴黎</｜DSML｜parameter>\n' +
  '<｜DSML｜parameter name="days" string="false">3</｜DSML｜parameter>\n' +
  '<｜DSML｜parameter name="units" string="false">{"temp": "C", "wind": ["km/h"]}</｜DSML｜parameter>\n' +
  '</｜DSML｜invoke>\n</｜DSML｜tool_calls>';
const WANT_ARGS = { city: 'Paris, "France" \\ 巴黎', days: 3, units: { temp: 'C', wind: ['km/h'] } };
const STORY = ' there was a tiny server.';

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'onecard-e2e-'));
const scriptPath = path.join(tmp, 'script.json');
fs.writeFileSync(scriptPath, JSON.stringify({
  step_delay_ms: 2,
  scripts: [
    { when: 'in Paris', text: TOOL_TEXT },
    { when: 'Once upon', text: STORY },
  ],
  default: { text: `${THINK}</think>${ANSWER}` },
}));
const env = { ...process.env, XDG_CACHE_HOME: tmp, ONECARD_TEST_MODE: '1' };
const KEY = 'sk-e2e-secret';

// The scripted runner is refused outside tests.
{
  const { ONECARD_TEST_MODE, ...noTest } = env;
  const r = spawnSync(onecard, ['serve', '--test-script', scriptPath, '--port', '0'], { env: noTest, encoding: 'utf8', timeout: 60000 });
  assert.notEqual(r.status, 0, 'serve --test-script must refuse without ONECARD_TEST_MODE=1');
  assert.match(r.stderr, /ONECARD_TEST_MODE/);
}

// Flags from a JSON config file and the environment: command line > environment > config file.
async function readyLine(args, extraEnv) {
  const p = spawn(onecard, ['serve', '--test-script', scriptPath, ...args], { env: { ...env, ...extraEnv }, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '', err = '';
  p.stderr.on('data', (d) => { err += d; });
  const done = new Promise((resolve) => p.on('exit', (code) => resolve(code)));
  const line = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no ready line:\n${out}\n${err}`)), 60000);
    p.stdout.on('data', (d) => {
      out += d;
      const l = out.split('\n').find((x) => x.startsWith('{"'));
      if (l) { clearTimeout(timer); resolve(JSON.parse(l)); }
    });
    p.on('exit', (code) => { clearTimeout(timer); resolve({ exitCode: code, stderr: err }); });
  });
  p.kill('SIGTERM');
  await done;
  return line;
}
{
  const cfg = path.join(tmp, 'serve.json');
  fs.writeFileSync(cfg, JSON.stringify({ port: 0, 'served-model-name': 'from-config', allow_cidr: ['127.0.0.0/8', '::1/128'], 'max-num-seqs': 3 }));
  const a = await readyLine(['--config', cfg], {});
  assert.equal(a.model, 'from-config');
  assert.deepEqual(a.allow_cidr, ['127.0.0.0/8', '::1/128']);
  const b = await readyLine(['--config', cfg], { ONECARD_SERVED_MODEL_NAME: 'from-env' });
  assert.equal(b.model, 'from-env');
  const c = await readyLine(['--config', cfg, '--served-model-name', 'from-cli'], { ONECARD_SERVED_MODEL_NAME: 'from-env' });
  assert.equal(c.model, 'from-cli');
  fs.writeFileSync(cfg, JSON.stringify({ port: 0, 'no-such-flag': 1 }));
  const d = await readyLine(['--config', cfg], {});
  assert.notEqual(d.exitCode, 0);
  assert.match(d.stderr, /no-such-flag/);
  console.log('ok   config file and environment precedence');
}

const server = spawn(onecard, ['serve', '--test-script', scriptPath, '--port', '0', '--api-key', KEY,
  '--served-model-name', 'onecard-e2e', '--shutdown-timeout', '20'], { env, stdio: ['ignore', 'pipe', 'pipe'] });
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

const baseURL = `http://127.0.0.1:${port}/v1`;
const client = new OpenAI({ apiKey: KEY, baseURL, maxRetries: 0, timeout: 30000 });
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

const tools = [
  { type: 'function', function: { name: 'get_weather', description: 'Forecast', parameters: { type: 'object', properties: { city: { type: 'string' }, days: { type: 'integer' } }, required: ['city'] } } },
];

await test('models.list', async () => {
  const models = await client.models.list();
  assert.deepEqual(models.data.map((m) => m.id), ['onecard-e2e']);
});

await test('chat, non-streaming: reasoning, content, usage', async () => {
  const r = await client.chat.completions.create({ model: 'onecard-e2e', messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Say hello' }], temperature: 0.8, seed: 3 });
  assert.equal(r.object, 'chat.completion');
  assert.equal(r.choices[0].message.content, ANSWER);
  assert.equal(r.choices[0].message.reasoning_content, THINK);
  assert.equal(r.choices[0].finish_reason, 'stop');
  assert.ok(r.usage.prompt_tokens > 5);
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
  assert.equal(r.usage.prompt_tokens_details.cached_tokens, 0);
});

await test('chat, streaming: deltas reassemble, usage chunk, [DONE]', async () => {
  const stream = await client.chat.completions.create({ model: 'onecard-e2e', messages: [{ role: 'user', content: 'Say hello' }], stream: true, stream_options: { include_usage: true } });
  let content = '', reasoning = '', role = null, finish = null, usage = null, n = 0;
  for await (const chunk of stream) {
    n++;
    if (chunk.usage) usage = chunk.usage;
    const c = chunk.choices[0];
    if (!c) continue;
    if (c.delta.role) role = c.delta.role;
    content += c.delta.content ?? '';
    reasoning += c.delta.reasoning_content ?? '';
    if (c.finish_reason) finish = c.finish_reason;
  }
  assert.ok(n > 5, `only ${n} chunks`);
  assert.equal(role, 'assistant');
  assert.equal(content, ANSWER);
  assert.equal(reasoning, THINK);
  assert.equal(finish, 'stop');
  assert.ok(usage && usage.completion_tokens > 5 && usage.prompt_tokens_details.cached_tokens === 0);
});

let wholeArgs = null;
await test('tool call, non-streaming', async () => {
  const r = await client.chat.completions.create({ model: 'onecard-e2e', messages: [{ role: 'user', content: 'What is the weather in Paris?' }], tools });
  const m = r.choices[0].message;
  assert.equal(r.choices[0].finish_reason, 'tool_calls');
  assert.equal(m.tool_calls.length, 1);
  assert.equal(m.tool_calls[0].type, 'function');
  assert.equal(m.tool_calls[0].function.name, 'get_weather');
  assert.match(m.tool_calls[0].id, /^call_/);
  wholeArgs = m.tool_calls[0].function.arguments;
  assert.deepEqual(JSON.parse(wholeArgs), WANT_ARGS);
});

await test('tool call, streaming: arguments reassembled exactly', async () => {
  const stream = await client.chat.completions.create({ model: 'onecard-e2e', messages: [{ role: 'user', content: 'What is the weather in Paris?' }], tools, tool_choice: 'auto', stream: true });
  const calls = [];
  let finish = null, argChunks = 0;
  for await (const chunk of stream) {
    const c = chunk.choices[0];
    if (!c) continue;
    for (const tc of c.delta.tool_calls ?? []) {
      calls[tc.index] ??= { id: '', name: '', arguments: '' };
      if (tc.id) calls[tc.index].id = tc.id;
      if (tc.function?.name) calls[tc.index].name += tc.function.name;
      if (tc.function?.arguments) { calls[tc.index].arguments += tc.function.arguments; argChunks++; }
    }
    if (c.finish_reason) finish = c.finish_reason;
  }
  assert.equal(finish, 'tool_calls');
  assert.equal(calls.length, 1);
  assert.equal(calls[0].name, 'get_weather');
  assert.ok(argChunks > 1, 'arguments should stream in several deltas');
  assert.equal(calls[0].arguments, wholeArgs);
  assert.deepEqual(JSON.parse(calls[0].arguments), WANT_ARGS);
});

await test('tool result round trip renders and answers', async () => {
  const r = await client.chat.completions.create({ model: 'onecard-e2e', tools, messages: [
    { role: 'user', content: 'Say hello' },
    { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city": "Oslo"}' } }] },
    { role: 'tool', tool_call_id: 'call_1', content: '{"temp": 3}' },
  ] });
  assert.equal(r.choices[0].message.content, ANSWER);
});

await test('completions: text, token ids, streaming', async () => {
  const r = await client.completions.create({ model: 'onecard-e2e', prompt: 'Once upon a time', max_tokens: 32 });
  assert.equal(r.object, 'text_completion');
  assert.equal(r.choices[0].text, STORY);
  assert.equal(r.choices[0].finish_reason, 'stop');
  const stream = await client.completions.create({ model: 'onecard-e2e', prompt: 'Once upon a time', max_tokens: 32, stream: true });
  let text = '';
  for await (const chunk of stream) text += chunk.choices[0]?.text ?? '';
  assert.equal(text, STORY);
  const cut = await client.completions.create({ model: 'onecard-e2e', prompt: [0, 5, 6, 7], max_tokens: 3 });
  assert.equal(cut.choices[0].finish_reason, 'length');
  assert.equal(cut.usage.prompt_tokens, 4);
  assert.equal(cut.usage.completion_tokens, 3);
});

async function expectError(promise, status, param) {
  try {
    await promise;
  } catch (e) {
    assert.ok(e instanceof OpenAI.APIError, `not an APIError: ${e}`);
    assert.equal(e.status, status, e.message);
    if (param !== undefined) assert.equal(e.param, param, JSON.stringify(e.error));
    assert.equal(typeof e.error.message, 'string');
    return e;
  }
  assert.fail(`expected HTTP ${status}`);
}

await test('error objects become typed client errors', async () => {
  const e400 = await expectError(client.chat.completions.create({ model: 'onecard-e2e', messages: [{ role: 'user', content: 'hi' }], n: 17 }), 400, 'n');
  assert.ok(e400 instanceof OpenAI.BadRequestError);
  await expectError(client.chat.completions.create({ model: 'onecard-e2e', messages: [{ role: 'user', content: 'hi' }], temperature: 'warm' }), 400, 'temperature');
  await expectError(client.chat.completions.create({ model: 'onecard-e2e', messages: [] }), 400, 'messages');
  const e404 = await expectError(client.chat.completions.create({ model: 'gpt-4o', messages: [{ role: 'user', content: 'hi' }] }), 404, 'model');
  assert.ok(e404 instanceof OpenAI.NotFoundError);
  const bad = new OpenAI({ apiKey: 'sk-wrong', baseURL, maxRetries: 0 });
  const e401 = await expectError(bad.models.list(), 401);
  assert.ok(e401 instanceof OpenAI.AuthenticationError);
});

await test('n choices and logit_bias through the client', async () => {
  const r = await client.chat.completions.create({ model: 'onecard-e2e', messages: [{ role: 'user', content: 'hi' }], n: 2, max_tokens: 8 });
  assert.equal(r.choices.length, 2);
  assert.deepEqual(r.choices.map((c) => c.index), [0, 1]);
  const c = await client.completions.create({ model: 'onecard-e2e', prompt: ['a', 'b'], max_tokens: 4, logit_bias: { '0': -100 } });
  assert.deepEqual(c.choices.map((x) => x.index), [0, 1]);
});

await test('metrics and probes over raw fetch', async () => {
  assert.equal((await fetch(`http://127.0.0.1:${port}/health`)).status, 200);
  // /metrics is open like /health (as in vLLM) unless --metrics-require-auth.
  assert.equal((await fetch(`http://127.0.0.1:${port}/metrics`)).status, 200);
  const m = await (await fetch(`http://127.0.0.1:${port}/metrics`, { headers: { Authorization: `Bearer ${KEY}` } })).text();
  assert.match(m, /vllm:num_requests_running\{model_name="onecard-e2e"\} 0/);
  assert.match(m, /vllm:time_to_first_token_seconds_count\{model_name="onecard-e2e"\} [1-9]/);
  assert.match(m, /onecard:http_requests_total\{model_name="onecard-e2e",route="\/v1\/chat\/completions",status="400"\} [1-9]/);
});

await test('SIGTERM drains the in-flight stream, then the process exits 0', async () => {
  const stream = await client.chat.completions.create({ model: 'onecard-e2e', messages: [{ role: 'user', content: 'Say hello' }], stream: true, max_tokens: 60, ignore_eos: true });
  let finish = null, n = 0;
  for await (const chunk of stream) {
    if (n++ === 1) server.kill('SIGTERM');
    if (chunk.choices[0]?.finish_reason) finish = chunk.choices[0].finish_reason;
  }
  assert.equal(finish, 'length');
  const { code, signal } = await exited;
  assert.equal(signal, null);
  assert.equal(code, 0, stderr.slice(-2000));
});

if (server.exitCode === null) server.kill('SIGKILL');
fs.rmSync(tmp, { recursive: true, force: true });
if (failures) {
  console.log(`${failures} test(s) failed\n--- server stderr (tail) ---\n${stderr.slice(-3000)}`);
  process.exit(1);
}
console.log('all openai-client e2e tests passed');
