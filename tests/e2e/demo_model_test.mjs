// End-to-end on the trained demo model (models/demo, issue 24): the official `openai` npm client against
// `onecard serve` on the CPU with MTP speculation, no scripted runner: the answers come from the model.
//  1. a greeting gets reasoning, then English content;
//  2. a request for a tool the model never saw in training (track_order_status, with its schema) gets
//     the exact tool call, and the tool result gets an English answer;
//  3. speculation accepts real drafts: /metrics counts accepted MTP tokens (the demo's MTP block agrees
//     with the main model on most drafts);
//  4. `serve --demo`, the embedded default, serves this checkpoint and gets the same call.
// Greedy (temperature 0) on the CPU reference numerics is deterministic, so the expected call is exact.
//
// Usage: node tests/e2e/demo_model_test.mjs path/to/onecard
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { importOpenAIOrSkip } from './openai_import.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const repo = path.resolve(here, '..', '..');
const onecard = process.argv[2];
if (!onecard) throw new Error('usage: node demo_model_test.mjs path/to/onecard');
const model = path.join(repo, 'models', 'demo');
if (!fs.existsSync(path.join(model, 'config.json'))) {
  console.log(`SKIP: no demo checkpoint at ${model}`);
  process.exit(77);
}
const OpenAI = await importOpenAIOrSkip();

// Starts `onecard serve ARGS --port 0` and waits for its ready line; stderr is kept for the asserts.
async function startServer(args) {
  const proc = spawn(onecard, ['serve', ...args, '--port', '0'], { stdio: ['ignore', 'pipe', 'pipe'] });
  const s = { proc, stderr: '', exited: new Promise((resolve) => proc.on('exit', (code) => resolve(code))) };
  proc.stderr.on('data', (d) => { s.stderr += d; });
  s.ready = await new Promise((resolve, reject) => {
    let out = '';
    const timer = setTimeout(() => reject(new Error(`no ready line:\n${out}\n${s.stderr}`)), 120000);
    proc.stdout.on('data', (d) => {
      out += d;
      const l = out.split('\n').find((x) => x.startsWith('{"'));
      if (l) { clearTimeout(timer); resolve(JSON.parse(l)); }
    });
    proc.on('exit', (code) => { clearTimeout(timer); reject(new Error(`serve exited ${code}:\n${s.stderr}`)); });
  });
  return s;
}
async function stopServer(s) {
  s.proc.kill('SIGTERM');
  await s.exited;
}

const main = await startServer(['--model', model, '--served-model-name', 'onecard-demo',
  '--speculative-config', '{"method":"mtp","num_speculative_tokens":2}']);
const ready = main.ready;
const client = new OpenAI({ baseURL: `${ready.url}/v1`, apiKey: 'unused' });

// An unseen tool (not in training): the call must come from its schema and the request.
const TOOLS = [{
  type: 'function',
  function: {
    name: 'track_order_status', description: 'Track the order status',
    parameters: { type: 'object', properties: { order_id: { type: 'string', description: 'The order id' } },
      required: ['order_id'] },
  },
}];

// Words a few English sentences are made of; "English rather than noise" = several of them.
const COMMON = new Set(['i', 'am', 'a', 'an', 'the', 'to', 'of', 'and', 'is', 'it', 'you', 'can', 'what', 'how', 'help',
  'small', 'model', 'demo', 'this', 'for', 'with', 'in', 'me', 'my', 'hello', 'hi', 'show', 'answer', 'would', 'like',
  'language', 'trained', 'tool', 'tools', 'calls', 'questions', 'short', 'text', 'results', 'status', 'done', 'set',
  'all', 'service', 'returned', 'answered', 'items', 'with', 'request', 'are', 'that', 'was', 'were', 'be']);
function englishWords(text) {
  return (text.toLowerCase().match(/[a-z']+/g) ?? []).filter((w) => COMMON.has(w)).length;
}

try {
  // 1. Reasoning, then content (thinking is the default mode of the V4 chat encoder).
  const hello = await client.chat.completions.create({
    model: 'onecard-demo', messages: [{ role: 'user', content: 'Hello, who are you?' }], temperature: 0, max_tokens: 96,
  });
  const hm = hello.choices[0].message;
  assert.ok(hm.reasoning_content && hm.reasoning_content.length > 0, `no reasoning: ${JSON.stringify(hm)}`);
  assert.ok(englishWords(hm.content ?? '') >= 4, `not English: ${JSON.stringify(hm)}`);
  assert.equal(hello.choices[0].finish_reason, 'stop');
  console.log(`greeting: reasoning ${JSON.stringify(hm.reasoning_content)}; content ${JSON.stringify(hm.content)}`);

  // 2. A tool call for an unseen tool, from its schema and the request, then the answer to its result.
  const messages = [{ role: 'user', content: 'Please track the order status with id ORD-77310.' }];
  const call = await client.chat.completions.create({ model: 'onecard-demo', messages, tools: TOOLS, temperature: 0,
    max_tokens: 200 });
  const cm = call.choices[0].message;
  assert.equal(call.choices[0].finish_reason, 'tool_calls', JSON.stringify(cm));
  assert.equal(cm.tool_calls.length, 1, JSON.stringify(cm));
  assert.equal(cm.tool_calls[0].function.name, 'track_order_status');
  assert.deepEqual(JSON.parse(cm.tool_calls[0].function.arguments), { order_id: 'ORD-77310' });
  console.log(`tool call: ${JSON.stringify(cm.tool_calls[0].function)}`);
  const answer = await client.chat.completions.create({
    model: 'onecard-demo', tools: TOOLS, temperature: 0, max_tokens: 120,
    messages: [...messages, { role: 'assistant', content: '', tool_calls: cm.tool_calls },
      { role: 'tool', tool_call_id: cm.tool_calls[0].id, content: '{"status": "shipped", "items": 2}' }],
  });
  const am = answer.choices[0].message;
  assert.equal(answer.choices[0].finish_reason, 'stop', JSON.stringify(am));
  assert.ok(englishWords(am.content ?? '') >= 3, `not English: ${JSON.stringify(am)}`);
  console.log(`answer to the tool result: ${JSON.stringify(am.content)}`);

  // 3. Speculation with real acceptance.
  const metrics = await (await fetch(`${ready.url}/metrics`)).text();
  const counter = (name) => Number((metrics.match(new RegExp(`vllm:${name}\\{[^}]*\\} ([0-9.e+]+)`)) ?? [])[1] ?? 0);
  const drafted = counter('spec_decode_num_draft_tokens_total');
  const accepted = counter('spec_decode_num_accepted_tokens_total');
  assert.ok(drafted > 0, 'no MTP drafts');
  assert.ok(accepted / drafted > 0.5, `MTP acceptance ${accepted}/${drafted}`);
  console.log(`MTP: ${accepted} of ${drafted} draft tokens accepted (${(100 * accepted / drafted).toFixed(1)}%)`);
  // The adaptive draft length (engine/spec_policy.h) reports its last choice, within [0, 2].
  const len = Number((metrics.match(/onecard:spec_decode_draft_length(?:\{[^}]*\})? ([0-9.e+]+)/) ?? [])[1] ?? -1);
  assert.ok(len >= 0 && len <= 2, `onecard:spec_decode_draft_length ${len}`);
} finally {
  await stopServer(main);
}

// 4. The embedded default: `serve --demo` finds this checkpoint, checks its SHA256SUMS and holds tool calls
// to their schemas, as scripts/demo.sh (the README's first command) serves it with --strict-tools-all.
const demo = await startServer(['--demo']);
try {
  assert.match(demo.stderr, /serve: the trained demo model \S*models\/demo\n/);
  const dc = new OpenAI({ baseURL: `${demo.ready.url}/v1`, apiKey: 'unused' });
  const listed = await dc.models.list();
  assert.equal(listed.data[0].id, 'onecard-demo');
  const r = await dc.chat.completions.create({ model: 'onecard-demo', messages: [{ role: 'user',
    content: 'Please track the order status with id ORD-77310.' }], tools: TOOLS, temperature: 0, max_tokens: 200 });
  const m = r.choices[0].message;
  assert.equal(r.choices[0].finish_reason, 'tool_calls', JSON.stringify(m));
  assert.equal(m.tool_calls[0].function.name, 'track_order_status');
  assert.deepEqual(JSON.parse(m.tool_calls[0].function.arguments), { order_id: 'ORD-77310' });
  console.log(`serve --demo: ${JSON.stringify(m.tool_calls[0].function)}`);
} finally {
  await stopServer(demo);
}
console.log('ok');
