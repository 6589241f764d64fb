// Deterministic parity corpus for the tokenizer: hand-written edge cases plus strings generated
// from a seeded PRNG (mulberry32), so every run and every machine produces the same corpus.
//
// Random code points come only from blocks that were fully settled by Unicode 14 (the tables in
// the PCRE2 that onecard links); U+FEFF and U+0085 are left out on purpose: the JS reference's
// ECMAScript \s disagrees with Hugging Face tokenizers (Oniguruma) on exactly those two.

export function mulberry32(seed) {
  let a = seed >>> 0;
  return function () {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const RANGES = [
  [0x20, 0x7e], [0xa0, 0x17f], [0x180, 0x24f], [0x250, 0x2af], [0x2b0, 0x2ff], [0x300, 0x36f],
  [0x391, 0x3a9], [0x3b1, 0x3c9], [0x400, 0x4ff], [0x531, 0x556], [0x561, 0x586], [0x5d0, 0x5ea],
  [0x620, 0x64a], [0x64b, 0x65f], [0x660, 0x669], [0x905, 0x939], [0x93e, 0x94d], [0x966, 0x96f],
  [0xe01, 0xe3a], [0xe40, 0xe5b], [0x10d0, 0x10fa], [0x1100, 0x1112], [0x2000, 0x200f], [0x2010, 0x2027],
  [0x2028, 0x2029], [0x2030, 0x205e], [0x20a0, 0x20bf], [0x2150, 0x2189], [0x2190, 0x21ff],
  [0x2200, 0x22ff], [0x2460, 0x24ff], [0x2500, 0x257f], [0x2600, 0x26ff], [0x3000, 0x303f],
  [0x3041, 0x3096], [0x30a1, 0x30fa], [0x4e00, 0x9fa5], [0x9fa6, 0x9fd5], [0xac00, 0xd7a3],
  [0xfe00, 0xfe0f], [0xff01, 0xff5e], [0xff61, 0xff9f], [0x1d400, 0x1d454], [0x1f1e6, 0x1f1ff],
  [0x1f300, 0x1f5ff], [0x1f600, 0x1f64f], [0x1f680, 0x1f6c5], [0x1f900, 0x1f9ff],
];

const WORDS = ("the of and to in is that for it as was with be by on not he this are or his from at which " +
  "but have an they you were her she there one all we their can has more will if about out so what up " +
  "tokenizer inference server model weights kernel tensor attention cache decode prefill sampling " +
  "don't it's we're they've I'm you'll he'd O'Neil rock'n'roll e-mail co-operate naïve café résumé").split(" ");

const CODE = [
  "for (int i = 0; i < n; ++i) {\n    sum += a[i] * b[i];\n}\n",
  "def f(x, *args, **kwargs):\n\treturn {k: v for k, v in kwargs.items() if v is not None}\n",
  "const re = /^[a-z_][a-z0-9_]*$/i;\nexport default async () => await fetch(`${base}/v1`);\n",
  "#include <vector>\ntemplate <typename T> T max3(T a, T b, T c) { return std::max({a, b, c}); }\n",
  "SELECT id, name FROM users WHERE created_at >= '2024-01-01' ORDER BY id DESC LIMIT 10;\n",
  "if [ -f \"$HOME/.bashrc\" ]; then\n  source ~/.bashrc && echo ok || exit 1\nfi\n",
  "{\"model\": \"deepseek\", \"messages\": [{\"role\": \"user\", \"content\": \"hi\\n\"}], \"stream\": true}",
  "<div class=\"x\">&lt;tag&gt; &amp; &#x27;</div>\n<!-- comment -->\n",
  "fn main() -> Result<(), Box<dyn Error>> {\n    let v: Vec<u8> = vec![0xFF; 16];\n    Ok(())\n}\n",
  "x = np.linalg.norm(a - b, axis=-1) ** 2 / (2 * sigma ** 2)\n",
  "    \t  return;\r\n}\r\n",
  "a+=b; c-=d; e*=f; g/=h; i%=j; k<<=1; l>>=2; m&=n; o|=p; q^=r; s&&t||!u;\n",
];

const EMOJI = [
  "😀", "👍", "👍🏻", "👍🏿", "👋🏽", "🧑‍💻", "👩🏽‍💻", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🏴‍☠️", "❤️", "❤️‍🔥", "1️⃣", "#️⃣",
  "🇺🇸", "🇯🇵", "🇫🇷🇩🇪", "🤦🏼‍♂️", "🫠", "🚀", "✨", "🙏🏾", "👁️‍🗨️", "🐈‍⬛", "©️", "™", "☕",
];

const HAND = [
  "", " ", "  ", "\n", "\r\n", "\r", "\t", " \n ", "hello", " hello", "hello ", "Hello, world!",
  "Hello! 毕老师！1 + 1 = 2 ĠÑĤÐ²ÑĬÑĢ", "123", "1234", "12345678901234567890", "3.14159", "1,000,000",
  "-42", "0x1F600", "v1.2.3-rc.4", "2026-11-29T08:00:00Z", "$9.99 / €8,50 / ¥1000",
  "  leading", "trailing  ", "a  b   c    d", "tab\tsep\tvalues", "line1\nline2\n\nline4\n\n\n",
  "crlf\r\nline\r\n\r\nend", "mixed \r\n \n\r \t\r\n", "\n\n\n", "   \n   \n", "x\u3000y\u00a0z\u2003w",
  "我爱北京天安门", "这是一个测试。", "日本語のテキストです。カタカナとひらがな", "ｶﾀｶﾅ ﾃｽﾄ", "한국어 텍스트입니다",
  "مرحبا بالعالم ١٢٣", "Привет, мир! Как дела?", "Γειά σου Κόσμε", "שלום עולם", "नमस्ते दुनिया", "สวัสดีชาวโลก",
  "Ｆｕｌｌ－ｗｉｄｔｈ　ＡＢＣ　１２３！", "（括号）【方括号】「引号」", "e\u0301 a\u0308 n\u0303 Z\u0336\u0321\u0353a\u0335lgo",
  "👨‍👩‍👧‍👦 family", "👍🏻👍🏼👍🏽👍🏾👍🏿", "🏳️‍🌈🏳️‍⚧️", "I ❤️ NY", "don't can't won't it's I'm we'll they'd",
  "'s 't 're 've 'm 'll 'd", "\"quoted\" 'single' «guillemets» „German“", "a.b,c;d:e!f?g", "...!!!???",
  "----====____", "<<>>{{}}[[]]", "https://example.com/path?q=1&r=%20x#frag", "user@example.com",
  "C:\\Windows\\System32", "~/src/onecard$ make -j2", "snake_case camelCase PascalCase kebab-case",
  "<｜User｜>hi<｜Assistant｜>", "<｜begin▁of▁sentence｜>text<｜end▁of▁sentence｜>", "<｜User｜><｜User｜>",
  "x<｜User｜>y", " <｜User｜> ", "<｜User", "｜User｜>", "<|EOT|>", "<｜▁pad▁｜>", "<｜place▁holder▁no▁7｜>",
  "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get\n```json\n{}\n```<｜tool▁call▁end｜>",
  "a".repeat(300), "a".repeat(5000), "ab".repeat(1500), "x".repeat(257), "9".repeat(1000),
  "中".repeat(600), " ".repeat(500), "\n".repeat(300), "!".repeat(400), "é".repeat(300),
  "Supercalifragilisticexpialidocious".repeat(20), "pneumonoultramicroscopicsilicovolcanoconiosis",
];

function pick(rng, arr) { return arr[Math.floor(rng() * arr.length)]; }
function int(rng, lo, hi) { return lo + Math.floor(rng() * (hi - lo + 1)); }

function randomChar(rng) {
  const [lo, hi] = pick(rng, RANGES);
  return String.fromCodePoint(int(rng, lo, hi));
}
function randomRange(rng, lo, hi, n) {
  let s = "";
  for (let i = 0; i < n; ++i) s += String.fromCodePoint(int(rng, lo, hi));
  return s;
}

const GENERATORS = {
  prose(rng) {
    const n = int(rng, 1, 25);
    let s = "";
    for (let i = 0; i < n; ++i) {
      let w = pick(rng, WORDS);
      if (rng() < 0.15) w = w[0].toUpperCase() + w.slice(1);
      s += (i ? pick(rng, [" ", " ", " ", ", ", ". ", "  ", "\n"]) : "") + w;
    }
    return s + pick(rng, ["", ".", "!", "?", "...", "\n"]);
  },
  code(rng) { return pick(rng, CODE).replace(/x|n|a/g, (m) => (rng() < 0.2 ? m.toUpperCase() : m)); },
  whitespace(rng) {
    const parts = [];
    for (let i = int(rng, 1, 8); i > 0; --i) {
      parts.push(pick(rng, WORDS));
      parts.push(pick(rng, [" ", "  ", "\t", "\n", "\r\n", "\r", " \n", "\n ", "\u3000", "\u00a0", "\u2003",
        "\u2028", " ".repeat(int(rng, 2, 12)), "\n".repeat(int(rng, 2, 5)), "\t".repeat(int(rng, 1, 4)), " \t \r\n  "]));
    }
    return parts.join("");
  },
  numbers(rng) {
    const n = int(rng, 1, 6);
    const out = [];
    for (let i = 0; i < n; ++i) {
      out.push(pick(rng, [
        () => String(int(rng, 0, 9)),
        () => String(int(rng, 0, 999999999)),
        () => randomRange(rng, 0x30, 0x39, int(rng, 4, 30)),
        () => `${int(rng, 0, 9999)}.${int(rng, 0, 99999)}`,
        () => `${int(rng, 1, 999)},${String(int(rng, 0, 999)).padStart(3, "0")},${String(int(rng, 0, 999)).padStart(3, "0")}`,
        () => `0x${int(rng, 0, 0xffffff).toString(16)}`,
        () => `${int(rng, 1990, 2030)}-${int(rng, 1, 12)}-${int(rng, 1, 28)}`,
        () => randomRange(rng, 0x660, 0x669, int(rng, 1, 8)),
        () => randomRange(rng, 0xff10, 0xff19, int(rng, 1, 8)),
        () => randomRange(rng, 0x2160, 0x216f, int(rng, 1, 4)) + randomRange(rng, 0x2460, 0x2473, 2),
      ])());
    }
    return out.join(pick(rng, [" ", "", "+", " x ", "\n", "/", "-"]));
  },
  cjk(rng) {
    const s = randomRange(rng, 0x4e00, 0x9fa5, int(rng, 1, 20));
    return s + pick(rng, ["", "。", "，", "！", "？", "、", " ", "\n"]) + (rng() < 0.3 ? randomRange(rng, 0x9fa6, 0x9fd5, 3) : "");
  },
  japanese(rng) {
    return randomRange(rng, 0x3041, 0x3096, int(rng, 1, 8)) + randomRange(rng, 0x4e00, 0x9fa5, int(rng, 0, 4)) +
      randomRange(rng, 0x30a1, 0x30fa, int(rng, 0, 8)) + pick(rng, ["", "ー", "。", "ｱｲｳ", "・"]);
  },
  korean(rng) { return randomRange(rng, 0xac00, 0xd7a3, int(rng, 1, 10)) + pick(rng, ["", " ", ".", "요", "!"]); },
  arabic(rng) {
    let s = "";
    for (let i = int(rng, 1, 12); i > 0; --i) {
      s += randomRange(rng, 0x620, 0x64a, 1);
      if (rng() < 0.3) s += randomRange(rng, 0x64b, 0x652, 1);
    }
    return s + pick(rng, ["", " ", "،", "؟", " ١٢٣"]);
  },
  cyrillic(rng) {
    let s = randomRange(rng, 0x410, 0x44f, int(rng, 1, 12));
    if (rng() < 0.3) s = s[0] + s.slice(1).toLowerCase();
    return s + pick(rng, ["", " ", ", ", "!", "ё", "Ї"]);
  },
  indic(rng) {
    let s = "";
    for (let i = int(rng, 1, 8); i > 0; --i) s += randomRange(rng, 0x905, 0x939, 1) + (rng() < 0.5 ? randomRange(rng, 0x93e, 0x94d, 1) : "");
    return s + (rng() < 0.3 ? " " + randomRange(rng, 0xe01, 0xe30, 5) : "");
  },
  emoji(rng) {
    let s = "";
    for (let i = int(rng, 1, 6); i > 0; --i) s += pick(rng, EMOJI) + (rng() < 0.3 ? " " : "");
    return s;
  },
  combining(rng) {
    let s = "";
    for (let i = int(rng, 1, 10); i > 0; --i) {
      s += randomRange(rng, 0x61, 0x7a, 1);
      for (let k = int(rng, 0, 3); k > 0; --k) s += randomRange(rng, 0x300, 0x36f, 1);
    }
    return s;
  },
  fullwidth(rng) { return randomRange(rng, 0xff01, 0xff5e, int(rng, 1, 12)) + pick(rng, ["", "　", "。", "ｶﾞ"]); },
  longword(rng) {
    return pick(rng, [
      () => "a".repeat(int(rng, 100, 3000)),
      () => randomRange(rng, 0x61, 0x7a, int(rng, 200, 2000)),
      () => randomRange(rng, 0x41, 0x5a, int(rng, 50, 600)) + randomRange(rng, 0x61, 0x7a, int(rng, 50, 600)),
      () => randomRange(rng, 0x30, 0x39, int(rng, 100, 800)),
      () => randomRange(rng, 0x4e00, 0x9fa5, int(rng, 100, 600)),
      () => randomRange(rng, 0x430, 0x44f, int(rng, 100, 800)),
      () => "=".repeat(int(rng, 50, 500)),
      () => "https://example.com/" + randomRange(rng, 0x61, 0x7a, int(rng, 100, 800)),
    ])();
  },
  random_unicode(rng) {
    let s = "";
    for (let i = int(rng, 1, 40); i > 0; --i) s += randomChar(rng);
    return s;
  },
  crlf(rng) {
    const lines = [];
    for (let i = int(rng, 2, 6); i > 0; --i) lines.push(GENERATORS.prose(rng).replace(/\n/g, ""));
    return lines.join(pick(rng, ["\r\n", "\r\n\r\n", "\r", "\n\r", " \r\n"])) + pick(rng, ["", "\r\n"]);
  },
};

/**
 * @param {{seed: number, count: number, specials: string[]}} opts
 * @returns {string[]} hand-written cases followed by `count` generated strings
 */
export function makeCorpus({ seed, count, specials }) {
  const rng = mulberry32(seed);
  const names = Object.keys(GENERATORS);
  const out = [...HAND];
  for (const sp of specials) out.push(sp, ` ${sp} `, `a${sp}b`, `${sp}${sp}`);
  for (let i = 0; i < count; ++i) {
    const parts = [];
    for (let k = int(rng, 1, 4); k > 0; --k) {
      parts.push(GENERATORS[pick(rng, names)](rng));
      if (specials.length && rng() < 0.2) parts.push(pick(rng, specials));
    }
    out.push(parts.join(pick(rng, ["", " ", "\n", "", "\t", ", "])));
  }
  return out;
}
