// A minimal OpenAI-compatible endpoint that is not onecard, for testing `onecard validate` and
// `onecard bench-serve` against "any" server: plain node:http, deterministic answers, only the routes
// and fields of OpenAI's API (/v1/models, /v1/chat/completions, /v1/completions; streaming SSE with
// stream_options.include_usage and non-streaming; tool_calls in OpenAI's format) and nothing
// onecard or vLLM add: no /tokenize, no /metrics, no logprobs, no prompt_tokens_details. Two extras a
// real server also has in some form: `chat_template_kwargs.thinking` turns on a `reasoning_content`
// prefix (vLLM's and SGLang's reasoning output), and `ignore_eos` makes a text answer run to
// max_tokens.
//
// Answers: a chat request whose first user message is a tool fixture's first turn (from --fixtures)
// gets that turn's expected calls (`--wrong-tools`: the first argument altered, a call where none is
// expected), the turn picked by the number of assistant messages so far. Anything else gets words:
// max_tokens of them with ignore_eos, else 1 + (a hash of the prompt) % max_tokens, one per chunk.
// Tokens are whitespace-separated words (message contents plus 2 per message for chat).
//
// GET /mock/stats (test-only introspection) returns the totals the usage objects reported.
//
// Usage: node mock_openai_server.mjs --fixtures tool_fixtures.json [--wrong-tools] [--delay-ms N]
// Prints {"event":"ready","port":N} once listening on 127.0.0.1 (an ephemeral port).
import fs from 'node:fs';
import http from 'node:http';

const args = process.argv.slice(2);
const opt = (name, dflt) => {
  const i = args.indexOf(name);
  return i >= 0 ? args[i + 1] : dflt;
};
const WRONG = args.includes('--wrong-tools');
const DELAY_MS = Number(opt('--delay-ms', '1'));
const MODEL = 'mock-model';
const fixtures = JSON.parse(fs.readFileSync(opt('--fixtures'), 'utf8'));
const byFirstUser = new Map(fixtures.fixtures.map((f) => [f.turns[0].user, f]));
const stats = { requests: 0, prompt_tokens: 0, completion_tokens: 0 };

const WORDS = ['alpha', 'bravo', 'delta', 'echo', 'golf', 'hotel', 'kilo', 'lima', 'oscar', 'tango', 'zulu'];
const countWords = (s) => (typeof s === 'string' ? s.split(/\s+/).filter(Boolean).length : 0);
const hash = (s) => {
  let h = 2166136261;
  for (let i = 0; i < s.length; ++i) h = Math.imul(h ^ s.charCodeAt(i), 16777619) >>> 0;
  return h;
};
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function contentText(c) {
  if (typeof c === 'string') return c;
  if (Array.isArray(c)) return c.map((p) => p.text ?? '').join(' ');
  return '';
}

function chatPromptTokens(messages) {
  let n = 0;
  for (const m of messages) {
    n += 2 + countWords(contentText(m.content));
    for (const tc of m.tool_calls ?? []) n += countWords(tc.function?.arguments ?? '');
  }
  return n;
}

function wrongArguments(argsObj) {
  const out = { ...argsObj };
  const k = Object.keys(out)[0];
  if (k === undefined) return { unexpected: true };
  const v = out[k];
  out[k] = typeof v === 'string' ? `${v}x` : typeof v === 'number' ? v + 1 : typeof v === 'boolean' ? !v : null;
  return out;
}

// What to say: {reasoning, words: [..], calls: [{name, arguments}]}.
function plan(body, promptText, chat) {
  const maxTokens = Math.max(1, body.max_tokens ?? body.max_completion_tokens ?? 16);
  const thinking = chat && body.chat_template_kwargs?.thinking === true;
  const reasoning = thinking ? ['Thinking', 'it', 'over.'] : [];
  if (chat) {
    const firstUser = body.messages.find((m) => m.role === 'user');
    const f = firstUser && byFirstUser.get(contentText(firstUser.content));
    const iTurn = body.messages.filter((m) => m.role === 'assistant').length;
    if (f && iTurn < f.turns.length) {
      const t = f.turns[iTurn];
      let calls = t.expected.map((c) => ({ name: c.name, arguments: c.arguments }));
      if (WRONG)
        calls = calls.length
          ? calls.map((c, k) => (k === 0 ? { ...c, arguments: wrongArguments(c.arguments) } : c))
          : [{ name: f.tools[0], arguments: {} }];
      const words = calls.length ? [] : ['Done:', ...(t.answer_contains ?? ['no', 'tool', 'needed.'])];
      return { reasoning, words, calls };
    }
  }
  const n = body.ignore_eos ? maxTokens : 1 + (hash(promptText) % maxTokens);
  const nContent = Math.max(1, n - reasoning.length);
  const words = Array.from({ length: nContent }, (_, i) => WORDS[(hash(promptText) + i) % WORDS.length]);
  return { reasoning: reasoning.slice(0, Math.max(0, n - 1)), words, calls: [], length: n === maxTokens };
}

// Tokens the answer counts: one per word, one per call name and one per 8 characters of arguments.
const argPieces = (s) => s.match(/[\s\S]{1,8}/g) ?? [''];
const answerTokens = (p) =>
  p.reasoning.length + p.words.length + p.calls.reduce((n, c) => n + 1 + argPieces(JSON.stringify(c.arguments)).length, 0);

function sendJson(res, status, obj) {
  res.writeHead(status, { 'Content-Type': 'application/json' });
  res.end(JSON.stringify(obj));
}

async function handleGenerate(req, res, body, chat) {
  if (chat && !Array.isArray(body.messages)) return sendJson(res, 400, { error: { message: 'messages is required', type: 'invalid_request_error' } });
  if (!chat && typeof body.prompt !== 'string') return sendJson(res, 400, { error: { message: 'prompt must be a string', type: 'invalid_request_error' } });
  const promptText = chat ? JSON.stringify(body.messages) : body.prompt;
  const p = plan(body, promptText, chat);
  const usage = { prompt_tokens: chat ? chatPromptTokens(body.messages) : countWords(body.prompt), completion_tokens: answerTokens(p) };
  usage.total_tokens = usage.prompt_tokens + usage.completion_tokens;
  stats.requests += 1;
  stats.prompt_tokens += usage.prompt_tokens;
  stats.completion_tokens += usage.completion_tokens;
  const finish = p.calls.length ? 'tool_calls' : p.length ? 'length' : 'stop';
  const id = `mock-${stats.requests}`;
  const created = Math.floor(Date.now() / 1000);
  const text = p.words.join(' ');
  const calls = p.calls.map((c, k) => ({ id: `call_${id}_${k}`, type: 'function', function: { name: c.name, arguments: JSON.stringify(c.arguments) } }));

  if (!body.stream) {
    const choice = chat
      ? { index: 0, message: { role: 'assistant', content: calls.length ? null : text, ...(calls.length ? { tool_calls: calls } : {}), ...(p.reasoning.length ? { reasoning_content: p.reasoning.join(' ') } : {}) }, finish_reason: finish }
      : { index: 0, text: ` ${text}`, logprobs: null, finish_reason: finish };
    return sendJson(res, 200, { id, object: chat ? 'chat.completion' : 'text_completion', created, model: MODEL, choices: [choice], usage });
  }

  res.socket?.setNoDelay(true);  // one small write per token: do not let Nagle batch them
  res.writeHead(200, { 'Content-Type': 'text/event-stream', 'Cache-Control': 'no-cache', Connection: 'keep-alive' });
  const object = chat ? 'chat.completion.chunk' : 'text_completion';
  const send = async (choices, extra = {}) => {
    res.write(`data: ${JSON.stringify({ id, object, created, model: MODEL, choices, ...extra })}\n\n`);
    await sleep(DELAY_MS);
  };
  const delta = (d, finishReason = null) => (chat ? [{ index: 0, delta: d, finish_reason: finishReason }] : [{ index: 0, text: d.content ?? '', logprobs: null, finish_reason: finishReason }]);
  if (chat) await send(delta({ role: 'assistant', content: '' }));
  for (const w of p.reasoning) await send(delta({ reasoning_content: `${w} ` }));
  for (let i = 0; i < p.words.length; ++i) await send(delta({ content: (chat && i === 0 ? '' : ' ') + p.words[i] }));
  for (let k = 0; k < calls.length; ++k) {
    await send(delta({ tool_calls: [{ index: k, id: calls[k].id, type: 'function', function: { name: calls[k].function.name, arguments: '' } }] }));
    for (const piece of argPieces(calls[k].function.arguments)) await send(delta({ tool_calls: [{ index: k, function: { arguments: piece } }] }));
  }
  await send(delta({}, finish));
  if (body.stream_options?.include_usage) await send([], { usage });
  res.end('data: [DONE]\n\n');
}

const server = http.createServer((req, res) => {
  const chunks = [];
  req.on('data', (c) => chunks.push(c));
  req.on('end', async () => {
    const url = req.url.split('?')[0];
    try {
      if (req.method === 'GET' && url === '/v1/models')
        return sendJson(res, 200, { object: 'list', data: [{ id: MODEL, object: 'model', created: 0, owned_by: 'mock' }] });
      if (req.method === 'GET' && url === '/mock/stats') return sendJson(res, 200, stats);
      if (req.method === 'POST' && (url === '/v1/chat/completions' || url === '/v1/completions')) {
        let body;
        try {
          body = JSON.parse(Buffer.concat(chunks).toString('utf8'));
        } catch (e) {
          return sendJson(res, 400, { error: { message: `invalid JSON: ${e.message}`, type: 'invalid_request_error' } });
        }
        return await handleGenerate(req, res, body, url === '/v1/chat/completions');
      }
      sendJson(res, 404, { error: { message: `no route ${req.method} ${url}`, type: 'invalid_request_error' } });
    } catch (e) {
      if (!res.headersSent) sendJson(res, 500, { error: { message: String(e), type: 'server_error' } });
      else res.end();
    }
  });
});
server.keepAliveTimeout = 30000;
server.listen(0, '127.0.0.1', () => {
  console.log(JSON.stringify({ event: 'ready', port: server.address().port }));
});
process.on('SIGTERM', () => {
  server.close(() => process.exit(0));
  server.closeAllConnections();
});
