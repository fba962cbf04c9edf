// Writes the tokenizer test strings as JSONL: the hand-picked cases of cases/strings.jsonl, then
// COUNT seeded random strings drawn from scripts and characters that stress pre-tokenization
// (CJK, emoji with ZWJ and skin tones, combining marks, whitespace runs, CR/LF, digits, code,
// special-token text). usage: node gen_strings.mjs [COUNT=3000] [SEED=1234] > strings.jsonl
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const count = Number(process.argv[2] ?? 3000);
let state = BigInt(process.argv[3] ?? 1234);
function rand() {  // splitmix64: the same sequence on every node version
  state = (state + 0x9e3779b97f4a7c15n) & 0xffffffffffffffffn;
  let z = state;
  z = ((z ^ (z >> 30n)) * 0xbf58476d1ce4e5b9n) & 0xffffffffffffffffn;
  z = ((z ^ (z >> 27n)) * 0x94d049bb133111ebn) & 0xffffffffffffffffn;
  return Number((z ^ (z >> 31n)) >> 11n) / 2 ** 53;
}
const pick = (xs) => xs[Math.floor(rand() * xs.length)];

const atoms = [
  "a", "b", "Z", "the", " the", "Hello", " world", "don't", "I'M", "we'll", "'s", "'LL", "x_y", "camelCase",
  " ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", " \n", "\u00a0", "\u3000", "\u2009", "\u200b", "\u2028", "\f", "\v",
  "0", "7", "42", "123", "2024", "3.14159", "1,000,000", "٣٤٥", "①", "Ⅻ", "½",
  "中", "文字", "日本語", "한국어", "ひらがな", "カタカナ", "漢字テスト", "你好，世界！",
  "é", "e\u0301", "n\u0303", "A\u030a", "\u0301", "ﬁ", "Å", "ḱ\u0323", "\u1100\u1161\u11a8", "각",
  "😀", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇫🇷", "❤️", "🧑🏿‍💻", "\ud83d\ude00\ud83d\ude00",
  "Привет", "мир", "Ελληνικά", "עברית", "العربية", "हिन्दी", "ไทย", "Tiếng Việt",
  "def f(x):", "    return x", "{", "}", "()", "[];", "=>", "!==", "//", "/* c */", "#include", "<div>", "&amp;",
  "...", "!!!", "???", "--", "—", "–", "\"", "'", "`", "~", "@", "$", "%", "^", "&", "*", "|", "\\", "€", "©",
  "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>", "<|begin_of_text|>", "<|eot_id|>",
  "<|start_header_id|>", "<s>", "</s>", "<unk>", "<0x41>", "<|im_start", "im_end|>",
];
const ranges = [[0x20, 0x7e], [0xa0, 0x24f], [0x300, 0x36f], [0x370, 0x3ff], [0x400, 0x4ff], [0x590, 0x6ff],
                [0x900, 0x97f], [0xe00, 0xe7f], [0x1100, 0x11ff], [0x2000, 0x206f], [0x2100, 0x27bf],
                [0x3000, 0x30ff], [0x4e00, 0x9fff], [0xac00, 0xd7a3], [0xff00, 0xffef], [0x1f300, 0x1faff],
                [0x10000, 0x1007f], [0xe000, 0xe0ff]];

const lines = readFileSync(join(dirname(fileURLToPath(import.meta.url)), "cases", "strings.jsonl"), "utf8")
  .split("\n").filter((l) => l.length > 0);
const out = [...lines];
for (let i = 0; i < count; ++i) {
  const n = 1 + Math.floor(rand() * 12);
  let s = "";
  for (let k = 0; k < n; ++k) {
    if (rand() < 0.6) {
      s += pick(atoms);
    } else {
      const [lo, hi] = pick(ranges);
      const len = 1 + Math.floor(rand() * 4);
      for (let j = 0; j < len; ++j) s += String.fromCodePoint(lo + Math.floor(rand() * (hi - lo + 1)));
    }
  }
  out.push(JSON.stringify(s.toWellFormed ? s.toWellFormed() : s));
}
process.stdout.write(out.join("\n") + "\n");
