// End-to-end: the official `openai` npm client's Responses API (client.responses.create, plain and
// streamed, client.responses.stream) against a real `onecard serve` process, with the TEST-ONLY
// scripted runner (`--test-script`, ONECARD_TEST_MODE=1) so outputs are exact: reasoning as a
// reasoning item, output_text, a function_call whose streamed arguments reassemble, two-turn flows
// through previous_response_id and through explicit function_call / function_call_output items,
// store: false, stored responses retrieved and deleted (client.responses.retrieve / .delete), and
// errors naming the field.
//
// Usage: node tests/e2e/responses_client_test.mjs path/to/onecard
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { importOpenAIOrSkip } from './openai_import.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const repo = path.resolve(here, '..', '..');
const onecard = process.argv[2];
if (!onecard) throw new Error('usage: node responses_client_test.mjs path/to/onecard');

const OpenAI = await importOpenAIOrSkip();

const THINK = 'Weighing the options.';
const ANSWER = 'Hello there, friend!';
const TOOL_TEXT =
  'Need the weather.</think>\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name="get_weather">\n' +
  '<｜DSML｜parameter name="city" string="true">Paris, "France" \\ 巴黎</｜DSML｜parameter>\n' +
  '<｜DSML｜parameter name="days" string="false">3</｜DSML｜parameter>\n' +
  '</｜DSML｜invoke>\n</｜DSML｜tool_calls>';
const WANT_ARGS = { city: 'Paris, "France" \\ 巴黎', days: 3 };

// Scripts are picked by what the rendered prompt holds: a tool result ("sunny, 21"), a question
// about Paris, the first turn's answer (so a second turn sees the first), or nothing special.
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'onecard-e2e-responses-'));
const scriptPath = path.join(tmp, 'script.json');
fs.writeFileSync(scriptPath, JSON.stringify({
  step_delay_ms: 2,
  scripts: [
    { when: 'sunny, 21', text: 'Done thinking.</think>It is sunny in Paris.' },
    { when: 'in Paris', text: TOOL_TEXT },
    { when: ANSWER, text: 'Recalled.</think>You said hello before.' },
  ],
  default: { text: `${THINK}</think>${ANSWER}` },
}));
const env = { ...process.env, XDG_CACHE_HOME: tmp, ONECARD_TEST_MODE: '1' };
const KEY = 'sk-e2e-responses';

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

const baseURL = `http://127.0.0.1:${port}/v1`;
const client = new OpenAI({ apiKey: KEY, baseURL, maxRetries: 0, timeout: 30000 });
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

const tools = [{ type: 'function', name: 'get_weather', description: 'Forecast', parameters: { type: 'object', properties: { city: { type: 'string' }, days: { type: 'integer' } }, required: ['city'] } }];

let first = null;
await test('responses.create: string input, reasoning item, output_text, usage', async () => {
  const r = await client.responses.create({ model: MODEL, input: 'Say hello', instructions: 'Be brief.', max_output_tokens: 64 });
  first = r;
  assert.equal(r.object, 'response');
  assert.match(r.id, /^resp_/);
  assert.equal(r.status, 'completed');
  assert.equal(r.model, MODEL);
  assert.equal(r.instructions, 'Be brief.');
  assert.equal(r.max_output_tokens, 64);
  assert.deepEqual(r.output.map((o) => o.type), ['reasoning', 'message']);
  assert.equal(r.output[0].content[0].type, 'reasoning_text');
  assert.equal(r.output[0].content[0].text, THINK);
  assert.equal(r.output[1].role, 'assistant');
  assert.equal(r.output[1].content[0].type, 'output_text');
  assert.equal(r.output_text, ANSWER);  // the client's own join of the output_text parts
  assert.ok(r.usage.input_tokens > 5);
  assert.ok(r.usage.output_tokens_details.reasoning_tokens > 0);
  assert.ok(r.usage.output_tokens_details.reasoning_tokens < r.usage.output_tokens);
  assert.equal(r.usage.total_tokens, r.usage.input_tokens + r.usage.output_tokens);
});

await test('responses.create: message items, max_output_tokens makes it incomplete', async () => {
  const r = await client.responses.create({ model: MODEL, max_output_tokens: 3, input: [
    { role: 'developer', content: 'Be brief.' }, { type: 'message', role: 'user', content: [{ type: 'input_text', text: 'Say hello' }] }] });
  assert.equal(r.status, 'incomplete');
  assert.equal(r.incomplete_details.reason, 'max_output_tokens');
  assert.equal(r.usage.output_tokens, 3);
});

await test('responses.create stream: the event sequence and the deltas', async () => {
  const stream = await client.responses.create({ model: MODEL, input: 'Say hello', stream: true });
  const types = [];
  let text = '', reasoning = '', completed = null, seq = -1;
  for await (const e of stream) {
    types.push(e.type);
    assert.equal(e.sequence_number, seq + 1, `sequence_number after ${seq}: ${JSON.stringify(e)}`);
    seq = e.sequence_number;
    if (e.type === 'response.output_text.delta') text += e.delta;
    if (e.type === 'response.reasoning_text.delta') reasoning += e.delta;
    if (e.type === 'response.completed') completed = e.response;
  }
  assert.equal(text, ANSWER);
  assert.equal(reasoning, THINK);
  assert.deepEqual(types.slice(0, 4), ['response.created', 'response.in_progress', 'response.output_item.added', 'response.content_part.added']);
  assert.equal(types.at(-1), 'response.completed');
  for (const t of ['response.reasoning_text.done', 'response.output_text.done', 'response.content_part.done', 'response.output_item.done'])
    assert.ok(types.includes(t), `missing ${t}`);
  assert.equal(completed.status, 'completed');
  assert.equal(completed.output[1].content[0].text, ANSWER);
  assert.ok(completed.usage.output_tokens > 5);
});

let call = null;
await test('tools: function_call item, plain and through responses.stream', async () => {
  const r = await client.responses.create({ model: MODEL, tools, input: 'What is the weather in Paris?' });
  const fc = r.output.find((o) => o.type === 'function_call');
  assert.ok(fc, JSON.stringify(r.output));
  assert.equal(fc.name, 'get_weather');
  assert.match(fc.call_id, /^call_/);
  assert.deepEqual(JSON.parse(fc.arguments), WANT_ARGS);
  call = { r, fc };

  const stream = client.responses.stream({ model: MODEL, tools, tool_choice: 'required', input: 'What is the weather in Paris?' });
  let args = '', nDelta = 0, done = null;
  stream.on('response.function_call_arguments.delta', (e) => { args += e.delta; nDelta++; });
  stream.on('response.function_call_arguments.done', (e) => { done = e; });
  const final = await stream.finalResponse();
  assert.ok(nDelta > 1, 'arguments should stream in several deltas');
  assert.equal(done.arguments, args);
  assert.deepEqual(JSON.parse(args), WANT_ARGS);
  const sfc = final.output.find((o) => o.type === 'function_call');
  assert.equal(sfc.arguments, fc.arguments);
});

await test('two turns via previous_response_id (tool output, then plain text)', async () => {
  assert.ok(call && first, 'needs the earlier responses');
  const r = await client.responses.create({ model: MODEL, tools, previous_response_id: call.r.id,
    input: [{ type: 'function_call_output', call_id: call.fc.call_id, output: 'sunny, 21 C' }] });
  assert.equal(r.previous_response_id, call.r.id);
  assert.equal(r.output_text, 'It is sunny in Paris.');
  const again = await client.responses.create({ model: MODEL, previous_response_id: first.id, input: 'And now?' });
  assert.equal(again.output_text, 'You said hello before.');
});

await test('two turns via explicit function_call / function_call_output items', async () => {
  assert.ok(call, 'needs the tool call');
  const r = await client.responses.create({ model: MODEL, tools, store: false, input: [
    { role: 'user', content: 'What is the weather in Paris?' },
    ...call.r.output,  // the reasoning and function_call items, as the client got them
    { type: 'function_call_output', call_id: call.fc.call_id, output: 'sunny, 21 C' },
  ] });
  assert.equal(r.output_text, 'It is sunny in Paris.');
  assert.equal(r.store, false);
  // store: false responses are not kept.
  await expectError(client.responses.create({ model: MODEL, previous_response_id: r.id, input: 'hi' }), 400, 'previous_response_id');
});

await test('responses.retrieve and responses.delete: the stored response, then gone', async () => {
  const r = await client.responses.create({ model: MODEL, input: 'Say hello', instructions: 'Be brief.' });
  const got = await client.responses.retrieve(r.id);
  assert.deepEqual(got, r);
  assert.equal(got.output_text, ANSWER);  // the client's own join works on the retrieved object too
  await client.responses.delete(r.id);
  await expectError(client.responses.retrieve(r.id), 404);
  await expectError(client.responses.delete(r.id), 404);
  await expectError(client.responses.create({ model: MODEL, previous_response_id: r.id, input: 'hi' }), 400, 'previous_response_id');
  await expectError(client.responses.retrieve('resp_unknown'), 404);
});

async function expectError(promise, status, param) {
  try {
    await promise;
  } catch (e) {
    assert.ok(e instanceof OpenAI.APIError, `not an APIError: ${e}`);
    assert.equal(e.status, status, e.message);
    if (param !== undefined) assert.equal(e.param, param, JSON.stringify(e.error));
    return e;
  }
  assert.fail(`expected HTTP ${status}`);
}

await test('errors name the field', async () => {
  await expectError(client.responses.create({ model: MODEL }), 400, 'input');
  await expectError(client.responses.create({ model: MODEL, input: [{ type: 'function_call_output', output: 'x' }] }), 400, 'input[0].call_id');
  await expectError(client.responses.create({ model: MODEL, input: 'hi', tools: [{ type: 'web_search' }] }), 400, 'tools[0].type');
  await expectError(client.responses.create({ model: MODEL, input: 'hi', reasoning: { effort: 'extreme' } }), 400, 'reasoning.effort');
  await expectError(client.responses.create({ model: MODEL, input: 'hi', previous_response_id: 'resp_nope' }), 400, 'previous_response_id');
  await expectError(client.responses.create({ model: MODEL, input: 'hi', max_output_tokens: 0 }), 400, 'max_output_tokens');
  await expectError(client.responses.create({ model: 'gpt-4o', input: 'hi' }), 404, 'model');
  const bad = new OpenAI({ apiKey: 'sk-wrong', baseURL, maxRetries: 0 });
  await expectError(bad.responses.create({ model: MODEL, input: 'hi' }), 401);
});

await test('metrics count the route', async () => {
  const m = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
  assert.match(m, /onecard:http_requests_total\{model_name="onecard-e2e",route="\/v1\/responses",status="200"\} [1-9]/);
  assert.match(m, /onecard:http_requests_total\{model_name="onecard-e2e",route="\/v1\/responses",status="400"\} [1-9]/);
});

server.kill('SIGTERM');
const { code } = await exited;
fs.rmSync(tmp, { recursive: true, force: true });
if (code !== 0) { failures++; console.log(`FAIL server exit code ${code}`); }
if (failures) {
  console.log(`${failures} test(s) failed\n--- server stderr (tail) ---\n${stderr.slice(-3000)}`);
  process.exit(1);
}
console.log('all responses-client e2e tests passed');
