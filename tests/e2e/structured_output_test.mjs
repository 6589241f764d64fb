// End-to-end structured output (issue 18) through a real `onecard serve` on the CPU, with the small
// random-weight demo checkpoint (`onecard synth --preset small`: the real V4 vocabulary, random
// weights). Such a model never writes JSON or DSML by itself, so every check here passes only because
// the grammar constrains decoding:
// - response_format json_schema (nested objects, arrays with minItems/maxItems, enums, anyOf, $ref):
//   every answer parses and validates with ajv (an independent validator) and ends with "stop";
//   json_object gives a JSON object; too small a max_tokens ends with "length" instead;
// - with thinking on, the JSON is the content, never the reasoning (the grammar starts after </think>);
// - tool_choice "required" and a named tool always yield a call whose arguments validate against the
//   tool's parameters (parallel_tool_calls false: exactly one call);
// - strict tools under tool_choice "auto": any call that appears validates (the random model rarely
//   starts one; the constraint is unit-tested directly); a strict tool's refused schema is a 400;
// - streaming gives the same bytes as non-streaming (greedy);
// - a schema keyword the grammar cannot enforce (or a tool name DSML cannot hold) is a 400 naming it.
//
// Usage: node tests/e2e/structured_output_test.mjs path/to/onecard
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { createRequire } from 'node:module';
import { fileURLToPath, pathToFileURL } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const repo = path.resolve(here, '..', '..');
const onecard = process.argv[2];
if (!onecard) throw new Error('usage: node structured_output_test.mjs path/to/onecard');

const require = createRequire(path.join(repo, 'tools', 'js', 'package.json'));
let Ajv;
try {
  const mod = await import(pathToFileURL(require.resolve('ajv')).href);
  Ajv = mod.default?.default ?? mod.default ?? mod.Ajv;
} catch (e) {
  console.log(`SKIP: the ajv npm package is not installed (run scripts/setup.sh): ${e.message}`);
  process.exit(77);  // ctest: SKIP_RETURN_CODE, so the skip shows as skipped, with this reason
}
const ajv = new Ajv({ strict: false });

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'onecard-structured-'));
const model = path.join(tmp, 'model');
{
  const r = spawnSync(onecard, ['synth', '--preset', 'small', '--seed', '5', '--out', model, '--quiet'], { encoding: 'utf8', timeout: 120000 });
  assert.equal(r.status, 0, `synth failed: ${r.stdout}${r.stderr}`);
}
const server = spawn(onecard, ['serve', model, '--device', 'cpu', '--host', '127.0.0.1', '--port', '0'],
  { env: { ...process.env, XDG_CACHE_HOME: tmp }, stdio: ['ignore', 'pipe', 'pipe'] });
let serverErr = '';
server.stderr.on('data', (d) => { serverErr += d; });
const exited = new Promise((resolve) => server.on('exit', (code) => resolve(code)));
const port = await new Promise((resolve, reject) => {
  let out = '';
  const timer = setTimeout(() => reject(new Error(`no ready line:\n${out}\n${serverErr}`)), 120000);
  server.stdout.on('data', (d) => {
    out += d;
    for (const l of out.split('\n')) {
      if (!l.startsWith('{')) continue;
      const j = JSON.parse(l);
      if (j.event === 'ready') { clearTimeout(timer); resolve(j.port); }
    }
  });
  server.on('exit', (code) => { clearTimeout(timer); reject(new Error(`serve exited ${code}:\n${serverErr}`)); });
});
const url = `http://127.0.0.1:${port}/v1/chat/completions`;

async function chat(body) {
  const r = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  const text = await r.text();
  return { status: r.status, json: JSON.parse(text) };
}

// Streams `body` and reassembles content, reasoning and tool calls from the chunks.
async function chatStream(body) {
  const r = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ ...body, stream: true }) });
  assert.equal(r.status, 200);
  const text = await r.text();
  let content = '', reasoning = '', finish = null;
  const calls = [];
  for (const line of text.split('\n')) {
    if (!line.startsWith('data: ') || line === 'data: [DONE]') continue;
    const c = JSON.parse(line.slice(6));
    if (c.error) return { error: c.error, content, reasoning, calls, finish };
    for (const ch of c.choices ?? []) {
      const d = ch.delta ?? {};
      content += d.content ?? '';
      reasoning += d.reasoning_content ?? '';
      for (const tc of d.tool_calls ?? []) {
        calls[tc.index] ??= { name: '', arguments: '' };
        if (tc.function?.name) calls[tc.index].name = tc.function.name;
        calls[tc.index].arguments += tc.function?.arguments ?? '';
      }
      if (ch.finish_reason) finish = ch.finish_reason;
    }
  }
  return { content, reasoning, calls, finish };
}

const SCHEMAS = {
  nested: {
    type: 'object',
    properties: {
      name: { type: 'string', maxLength: 8 },
      address: {
        type: 'object',
        properties: { city: { type: 'string', minLength: 1, maxLength: 6 }, zip: { type: 'integer', minimum: 0, maximum: 99999 } },
        required: ['city', 'zip'], additionalProperties: false,
      },
    },
    required: ['name', 'address'], additionalProperties: false,
  },
  arrays: {
    type: 'object',
    properties: { xs: { type: 'array', items: { type: 'integer', minimum: 0, maximum: 9 }, minItems: 2, maxItems: 3 } },
    required: ['xs'], additionalProperties: false,
  },
  enums: {
    type: 'object',
    properties: { color: { enum: ['red', 'green', 'blue'] }, ok: { type: 'boolean' } },
    required: ['color', 'ok'], additionalProperties: false,
  },
  any_of: {
    type: 'object',
    properties: { v: { anyOf: [{ type: 'integer', minimum: -5, maximum: 5 }, { type: 'string', maxLength: 4 }, { type: 'null' }] } },
    required: ['v'], additionalProperties: false,
  },
  refs: {
    $defs: { pt: { type: 'object', properties: { x: { type: 'integer', minimum: 0, maximum: 9 }, y: { type: 'integer', minimum: 0, maximum: 9 } }, required: ['x', 'y'], additionalProperties: false } },
    type: 'object',
    properties: { a: { $ref: '#/$defs/pt' }, b: { $ref: '#/$defs/pt' } },
    required: ['a', 'b'], additionalProperties: false,
  },
};
const messages = [{ role: 'user', content: 'Reply in JSON.' }];
// Chat mode (the prompt ends in </think>): the grammar starts at the first token.
const noThink = { chat_template_kwargs: { thinking: false } };
const greedy = { temperature: 0, max_tokens: 200 };
const failures = [];
const check = (what, fn) => { try { fn(); } catch (e) { failures.push(`${what}: ${e.message}`); } };

// json_schema: every answer validates and ends with "stop"; streaming gives the same bytes.
for (const [name, schema] of Object.entries(SCHEMAS)) {
  const validate = ajv.compile(schema);
  const response_format = { type: 'json_schema', json_schema: { name, schema, strict: true } };
  for (const sampling of [greedy, { temperature: 1, seed: 7, max_tokens: 200 }]) {
    const r = await chat({ messages, response_format, ...noThink, ...sampling });
    check(`${name} t=${sampling.temperature}`, () => {
      assert.equal(r.status, 200, JSON.stringify(r.json));
      const m = r.json.choices[0].message;
      assert.equal(r.json.choices[0].finish_reason, 'stop', m.content);
      const doc = JSON.parse(m.content);
      assert.ok(validate(doc), `${m.content}: ${ajv.errorsText(validate.errors)}`);
    });
    if (sampling === greedy) {
      const s = await chatStream({ messages, response_format, ...noThink, ...sampling });
      check(`${name} stream`, () => {
        assert.ok(!s.error, JSON.stringify(s.error));
        assert.equal(s.content, r.json.choices[0].message.content);
        assert.equal(s.finish, 'stop');
      });
    }
  }
}

// json_object: a JSON object (its contents are free, so bounded only by max_tokens: several tries).
{
  const r = await chat({ messages, response_format: { type: 'json_object' }, ...noThink, temperature: 0, max_tokens: 400 });
  check('json_object', () => {
    assert.equal(r.status, 200);
    const c = r.json.choices[0];
    if (c.finish_reason === 'stop') {
      const doc = JSON.parse(c.message.content);
      assert.equal(typeof doc, 'object');
      assert.ok(doc !== null && !Array.isArray(doc));
    } else {
      assert.equal(c.finish_reason, 'length');
      assert.ok(c.message.content.startsWith('{'), c.message.content);
    }
  });
}

// Too few tokens for the schema: "length", and what came is a prefix of a document.
{
  const r = await chat({ messages, response_format: { type: 'json_schema', json_schema: { name: 'n', schema: SCHEMAS.nested } }, ...noThink, temperature: 0, max_tokens: 3 });
  check('length', () => {
    assert.equal(r.json.choices[0].finish_reason, 'length');
    assert.ok(r.json.choices[0].message.content.startsWith('{"'), r.json.choices[0].message.content);
  });
}

// Thinking on: the reasoning stays free (a logit bias writes </think> at once), the JSON is the content.
{
  const validate = ajv.compile(SCHEMAS.enums);
  const r = await chat({
    messages, chat_template_kwargs: { thinking: true }, logit_bias: { 128822: 100 },
    response_format: { type: 'json_schema', json_schema: { name: 'e', schema: SCHEMAS.enums } }, ...greedy,
  });
  check('thinking', () => {
    assert.equal(r.status, 200, JSON.stringify(r.json));
    const m = r.json.choices[0].message;
    assert.equal(r.json.choices[0].finish_reason, 'stop');
    assert.ok(validate(JSON.parse(m.content)), m.content);
    assert.ok(!(m.reasoning_content ?? '').includes('"color"'), m.reasoning_content);
  });
}

// Forced tool calls: required (any tool) and named, arguments validate against the parameters.
const TOOLS = [
  { type: 'function', function: { name: 'get_weather', strict: true, parameters: { type: 'object', properties: { city: { type: 'string', maxLength: 10 }, days: { type: 'integer', minimum: 1, maximum: 7 }, units: { enum: ['C', 'F'] } }, required: ['city', 'days'], additionalProperties: false } } },
  { type: 'function', function: { name: 'add', parameters: { type: 'object', properties: { xs: { type: 'array', items: { type: 'integer', minimum: 0, maximum: 99 }, minItems: 1, maxItems: 3 } }, required: ['xs'] } } },
  { type: 'function', function: { name: 'ping' } },
];
const validators = Object.fromEntries(TOOLS.map((t) => [t.function.name, ajv.compile(t.function.parameters ?? { type: 'object', maxProperties: 0 })]));
const toolMessages = [{ role: 'user', content: 'Weather in Paris?' }];
for (const [what, tool_choice] of [['required', 'required'], ['named', { type: 'function', function: { name: 'add' } }], ['named_noargs', { type: 'function', function: { name: 'ping' } }]]) {
  for (const sampling of [greedy, { temperature: 1, seed: 3, max_tokens: 200 }]) {
    // With tools the prompt is in thinking mode; the forced call starts after </think>, which a logit
    // bias makes the first token (the random model would otherwise think until max_tokens).
    const body = { messages: toolMessages, tools: TOOLS, tool_choice, parallel_tool_calls: false, logit_bias: { 128822: 100 }, ...sampling };
    const r = await chat(body);
    check(`tool ${what} t=${sampling.temperature}`, () => {
      assert.equal(r.status, 200, JSON.stringify(r.json));
      const c = r.json.choices[0];
      assert.equal(c.finish_reason, 'tool_calls', JSON.stringify(c.message));
      assert.equal(c.message.tool_calls.length, 1);
      const call = c.message.tool_calls[0].function;
      if (typeof tool_choice === 'object') assert.equal(call.name, tool_choice.function.name);
      const v = validators[call.name];
      assert.ok(v, `unknown tool ${call.name}`);
      assert.ok(v(JSON.parse(call.arguments)), `${call.name}(${call.arguments}): ${ajv.errorsText(v.errors)}`);
    });
    if (sampling === greedy) {
      const s = await chatStream(body);
      check(`tool ${what} stream`, () => {
        assert.ok(!s.error, JSON.stringify(s.error));
        const call = r.json.choices[0].message.tool_calls[0].function;
        assert.equal(s.calls.length, 1);
        assert.equal(s.calls[0].name, call.name);
        assert.equal(s.calls[0].arguments, call.arguments);
        assert.equal(s.finish, 'tool_calls');
      });
    }
  }
}

// With a tool grammar and thinking on, the DSML marker (id 128825) is refused in the reasoning: a call
// written there would never be parsed as one and would reach the client as markup. A logit bias pushes
// the marker at every step, so without the refusal the reasoning would be made of it; without tools
// the same bias writes it.
for (const [what, tools, tool_choice] of [['auto strict', TOOLS, 'auto'], ['no tools', undefined, undefined]]) {
  const r = await chat({ messages: toolMessages, tools, tool_choice, logit_bias: { 128825: 100 }, ...greedy, max_tokens: 16 });
  check(`dsml in reasoning, ${what}`, () => {
    assert.equal(r.status, 200, JSON.stringify(r.json));
    const reasoning = r.json.choices[0].message.reasoning_content ?? '';
    if (tools) assert.ok(!reasoning.includes('｜DSML｜'), reasoning);
    else assert.ok(reasoning.includes('｜DSML｜'), `the bias should write the marker without tools: ${reasoning}`);
  });
}

// Strict tools under tool_choice "auto": text stays free, and a call, once the model starts one, must
// follow the strict tool's parameters. The random model rarely writes the DSML marker by itself, so
// this checks validity whenever a call appears (the constraint itself is unit-tested byte by byte:
// tests/unit/engine_triggered_constraint_test.cpp); a strict tool's refused schema is a 400 under auto
// too, a non-strict one's is not (its arguments are not held).
for (const sampling of [greedy, { temperature: 1, seed: 5, max_tokens: 120 }]) {
  const r = await chat({ messages: toolMessages, tools: TOOLS, tool_choice: 'auto', logit_bias: { 128822: 100 }, ...sampling });
  check(`tool auto strict t=${sampling.temperature}`, () => {
    assert.equal(r.status, 200, JSON.stringify(r.json));
    const c = r.json.choices[0];
    for (const tc of c.message.tool_calls ?? []) {
      const call = tc.function;
      if (call.name !== 'get_weather') continue;  // only the strict tool's arguments are held
      const v = validators[call.name];
      assert.ok(v(JSON.parse(call.arguments)), `${call.name}(${call.arguments}): ${ajv.errorsText(v.errors)}`);
    }
  });
}
{
  const strictBad = [{ type: 'function', function: { name: 'f', strict: true, parameters: { type: 'object', properties: { s: { type: 'string', pattern: 'x' } } } } }];
  const r = await chat({ messages, tools: strictBad, tool_choice: 'auto', max_tokens: 5 });
  check('refuse strict tool pattern under auto', () => {
    assert.equal(r.status, 400);
    assert.equal(r.json.error.param, 'tools');
    assert.ok(r.json.error.message.includes("'pattern'"), r.json.error.message);
  });
  const loose = [{ type: 'function', function: { name: 'f', parameters: { type: 'object', properties: { s: { type: 'string', pattern: 'x' } } } } }];
  const r2 = await chat({ messages, tools: loose, tool_choice: 'auto', max_tokens: 5 });
  check('non-strict tool pattern under auto is served', () => assert.equal(r2.status, 200, JSON.stringify(r2.json)));
}

// Unsupported keywords: 400 naming them (minProperties: the one way a schema could need an extra key).
for (const [keyword, schema] of [['pattern', { type: 'string', pattern: '^a+$' }], ['uniqueItems', { type: 'array', uniqueItems: true }],
  ['minProperties', { type: 'object', additionalProperties: { type: 'string' }, minProperties: 1 }]]) {
  const r = await chat({ messages, response_format: { type: 'json_schema', json_schema: { name: 'bad', schema } }, max_tokens: 5 });
  check(`refuse ${keyword}`, () => {
    assert.equal(r.status, 400);
    assert.equal(r.json.error.param, 'response_format');
    assert.ok(r.json.error.message.includes(`'${keyword}'`), r.json.error.message);
  });
}
{
  const tools = [{ type: 'function', function: { name: 'f', parameters: { type: 'object', properties: { s: { type: 'string', pattern: 'x' } } } } }];
  const r = await chat({ messages, tools, tool_choice: 'required', max_tokens: 5 });
  check('refuse tool pattern', () => {
    assert.equal(r.status, 400);
    assert.equal(r.json.error.param, 'tools');
    assert.ok(r.json.error.message.includes("'pattern'"), r.json.error.message);
  });
}
// Tool parameters: a map needing a key, a malformed additionalProperties, and a name DSML markup
// cannot hold are refused, naming the keyword.
for (const [keyword, name, parameters] of [
  ['minProperties', 'f', { type: 'object', additionalProperties: { type: 'integer' }, minProperties: 1 }],
  ['additionalProperties', 'f', { type: 'object', additionalProperties: 'yes' }],
  ['name', 'f"g', { type: 'object' }]]) {
  const r = await chat({ messages, tools: [{ type: 'function', function: { name, parameters } }], tool_choice: 'required', max_tokens: 5 });
  check(`refuse tool ${keyword}`, () => {
    assert.equal(r.status, 400);
    assert.equal(r.json.error.param, 'tools');
    assert.ok(r.json.error.message.includes(`'${keyword}'`), r.json.error.message);
  });
}

server.kill('SIGTERM');
await exited;
fs.rmSync(tmp, { recursive: true, force: true });
if (failures.length) {
  console.error(`${failures.length} failure(s):\n${failures.join('\n')}`);
  process.exit(1);
}
console.log('structured output e2e: ok');
