// End-to-end: `onecard bench-serve` and `onecard validate` against an OpenAI-compatible endpoint that
// is not onecard (tests/e2e/mock_openai_server.mjs: no /tokenize, no /metrics, no logprobs). Checks
// that bench-serve falls back to approximate prompt lengths and says so, that its token totals equal
// what the endpoint's usage reported, that validate's tool-call gate passes on the exact calls and
// fails on altered ones, that a gate needing an absent feature is skipped with the reason, and that
// the live progress line appears on a terminal only (and never with --no-progress).
//
// Usage: node tests/e2e/any_endpoint_test.mjs path/to/onecard
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
if (!onecard) throw new Error('usage: node any_endpoint_test.mjs path/to/onecard');
const fixturesPath = path.join(repo, 'tools', 'onecard', 'data', 'tool_fixtures.json');
const fixtures = JSON.parse(fs.readFileSync(fixturesPath, 'utf8'));
const nTurns = fixtures.fixtures.reduce((n, f) => n + f.turns.length, 0);
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'onecard-any-endpoint-'));

async function startMock(extra = []) {
  const child = spawn(process.execPath, [path.join(here, 'mock_openai_server.mjs'), '--fixtures', fixturesPath, ...extra], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const port = await new Promise((resolve, reject) => {
    let buf = '';
    child.stdout.on('data', (d) => {
      buf += d;
      const m = buf.match(/"port":(\d+)/);
      if (m) resolve(Number(m[1]));
    });
    child.on('exit', (code) => reject(new Error(`mock exited ${code}`)));
  });
  return { child, url: `http://127.0.0.1:${port}`, stop: () => child.kill('SIGTERM') };
}

const stats = async (url) => (await fetch(`${url}/mock/stats`)).json();

function run(cmdArgs, timeoutMs = 120000) {
  const r = spawnSync(onecard, cmdArgs, { encoding: 'utf8', timeout: timeoutMs });
  return { status: r.status, out: r.stdout, err: r.stderr, all: `${r.stdout}\n${r.stderr}` };
}

const mock = await startMock();
try {
  // The mock speaks OpenAI's format: the official client parses its tool calls (when installed).
  const require = createRequire(path.join(repo, 'tools', 'js', 'package.json'));
  let OpenAI = null;
  try {
    const mod = await import(pathToFileURL(require.resolve('openai')).href);
    OpenAI = mod.OpenAI ?? mod.default?.OpenAI ?? mod.default;
  } catch (e) {
    console.log(`note: the openai npm package is not installed, the mock's format is not cross-checked: ${e.message}`);
  }
  if (OpenAI) {
    const client = new OpenAI({ baseURL: `${mock.url}/v1`, apiKey: 'unused' });
    const f = fixtures.fixtures.find((x) => x.id === 'parallel_weather');
    const tools = f.tools.map((n) => ({ type: 'function', function: { name: n, ...fixtures.tools[n] } }));
    const messages = [{ role: 'user', content: f.turns[0].user }];
    const plain = await client.chat.completions.create({ model: 'mock-model', messages, tools });
    assert.deepEqual(plain.choices[0].message.tool_calls.map((c) => [c.function.name, JSON.parse(c.function.arguments)]),
      f.turns[0].expected.map((c) => [c.name, c.arguments]));
    const stream = await client.chat.completions.create({ model: 'mock-model', messages, tools, stream: true, stream_options: { include_usage: true } });
    const args = [];
    let usage = null;
    for await (const chunk of stream) {
      for (const tc of chunk.choices[0]?.delta?.tool_calls ?? []) args[tc.index] = (args[tc.index] ?? '') + (tc.function?.arguments ?? '');
      usage = chunk.usage ?? usage;
    }
    assert.deepEqual(args.map((a) => JSON.parse(a)), f.turns[0].expected.map((c) => c.arguments));
    assert.equal(usage.prompt_tokens, plain.usage.prompt_tokens);
  }

  // bench-serve: no /tokenize, so approximate lengths, said on stderr and in the method; every total
  // equals the endpoint's usage; a PNG plot is refused before any request.
  const png = run(['bench-serve', '--base-url', mock.url, '--num-prompts', '2', '--plot', path.join(tmp, 'x.png')]);
  assert.notEqual(png.status, 0);
  assert.match(png.all, /--plot writes SVG only/);
  for (const [endpoint, dataset, extra] of [
    ['/v1/completions', 'random', []],
    ['/v1/chat/completions', 'random', ['--ignore-eos']],
    ['/v1/chat/completions', 'agent-trace', []],
  ]) {
    const before = await stats(mock.url);
    const out = path.join(tmp, 'bench.json');
    const r = run(['bench-serve', '--base-url', mock.url, '--endpoint', endpoint, '--dataset-name', dataset,
      '--num-prompts', '6', '--random-input-len', '40', '--random-output-len', '10', '--max-concurrency', '1,3',
      '--out', out, '--plot', path.join(tmp, 'bench.svg'), ...extra]);
    assert.equal(r.status, 0, r.all);
    assert.ok(!r.err.includes('\r') && !r.err.includes('\x1b['), `no progress line off a terminal:\n${JSON.stringify(r.err)}`);
    const after = await stats(mock.url);
    const j = JSON.parse(fs.readFileSync(out, 'utf8'));
    assert.equal(j.method.models.data[0].id, 'mock-model');
    assert.equal(j.points.length, 2);
    if (dataset === 'random') {
      assert.match(r.err, /prompt lengths are approximate: the endpoint has no usable \/tokenize \(\/tokenize: HTTP 404\)/);
      assert.equal(j.method.dataset.tokenize_exact, false);
      assert.match(j.method.dataset.prompt_lengths, /^approximate \(no usable \/tokenize: HTTP 404/);
    }
    let inTok = 0, outTok = 0;
    for (const p of j.points) {
      assert.equal(p.errors, 0, JSON.stringify(p.error_samples));
      assert.equal(p.completed, dataset === 'random' ? 6 : p.num_requests);
      assert.ok(p.num_requests >= 6);
      assert.deepEqual(p.server_metrics, {}, 'no /metrics: no counter deltas');
      assert.ok(p.ttft_ms.p50 > 0 && p.output_throughput > 0);
      if (extra.includes('--ignore-eos')) assert.equal(p.total_output_tokens, 6 * 10);
      inTok += p.total_input_tokens;
      outTok += p.total_output_tokens;
    }
    assert.equal(inTok, after.prompt_tokens - before.prompt_tokens, `${endpoint} ${dataset}: prompt tokens`);
    assert.equal(outTok, after.completion_tokens - before.completion_tokens, `${endpoint} ${dataset}: completion tokens`);
    assert.ok(inTok > 0 && outTok > 0);
  }

  // validate: the fixtures pass exactly; replay needs logprobs, which the endpoint lacks: skipped.
  const report = path.join(tmp, 'report.json');
  const v = run(['validate', '--base-url', mock.url, '--gates', 'tool_calls,no_dsml,reasoning,capacity,replay',
    '--capacity-streams', '4', '--capacity-max-tokens', '8', '--out', report]);
  const j = JSON.parse(fs.readFileSync(report, 'utf8'));
  assert.equal(v.status, 0, v.all);
  assert.equal(j.failed, 0);
  assert.equal(j.skipped, 1);
  assert.match(v.out, /0 of 5 gates failed, 1 skipped/);
  const g = Object.fromEntries(j.gates.map((x) => [x.name, x]));
  assert.equal(g.tool_calls.passed, true, JSON.stringify(g.tool_calls.figures.failures));
  assert.equal(g.tool_calls.figures.turns, nTurns);
  assert.equal(g.tool_calls.figures.exact, nTurns);
  assert.equal(g.tool_calls.figures.fixtures, fixtures.fixtures.length);
  assert.ok(g.tool_calls.figures.parallel_call_turns >= 10 && g.tool_calls.figures.no_call_turns >= 8);
  assert.equal(g.replay.skipped, true);
  assert.match(g.replay.summary, /^skipped: endpoint lacks logprobs/);
  assert.match(v.out, /replay +SKIP/);
  for (const name of ['no_dsml', 'reasoning', 'capacity']) assert.equal(g[name].passed, true, JSON.stringify(g[name]));
  assert.ok(!v.err.includes('\r'), 'no progress line off a terminal');

  // On a terminal (script(1) gives the command a pty) the progress line is drawn, unless --no-progress.
  if (spawnSync('script', ['--version']).status === 0) {
    // One request at a time, so the gate outlasts a few redraws.
    const cmd = (extra) => `${onecard} validate --base-url ${mock.url} --gates tool_calls --tool-concurrency 1 ${extra}`;
    const tty = spawnSync('script', ['-qec', cmd(''), '/dev/null'], { encoding: 'utf8', timeout: 120000 });
    assert.equal(tty.status, 0, tty.stdout);
    assert.match(tty.stdout, /\rvalidate \[1\/1\] tool_calls \[[#-]{24}\] \d+\/\d+/);
    const quiet = spawnSync('script', ['-qec', cmd('--no-progress'), '/dev/null'], { encoding: 'utf8', timeout: 120000 });
    assert.equal(quiet.status, 0, quiet.stdout);
    assert.ok(!quiet.stdout.includes('\x1b[K'), JSON.stringify(quiet.stdout));
    assert.match(quiet.stdout, /validate: \[1\/1\] tool_calls PASS/);
  } else {
    console.log('note: script(1) is missing, the progress line on a terminal is not checked');
  }
} finally {
  mock.stop();
}

// The same fixtures answered wrongly: every turn misses and the gate fails (exit status 1).
const wrong = await startMock(['--wrong-tools']);
try {
  const report = path.join(tmp, 'wrong.json');
  const v = run(['validate', '--base-url', wrong.url, '--gates', 'tool_calls', '--out', report]);
  assert.equal(v.status, 1, v.all);
  const g = JSON.parse(fs.readFileSync(report, 'utf8')).gates[0];
  assert.equal(g.passed, false);
  assert.equal(g.figures.turns, nTurns);
  assert.equal(g.figures.exact, 0, JSON.stringify(g.figures));
  assert.equal(g.figures.request_errors, 0);
  assert.match(v.out, /1 of 1 gates failed/);
} finally {
  wrong.stop();
}
fs.rmSync(tmp, { recursive: true, force: true });
console.log(`ok: bench-serve and validate against a non-onecard OpenAI-compatible endpoint (${nTurns} fixture turns)`);
