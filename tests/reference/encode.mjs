// Reference token ids from @huggingface/tokenizers (the JS port of Hugging Face tokenizers).
// usage: node encode.mjs MODEL_DIR [--no-special] < strings.jsonl > ids.jsonl
// MODEL_DIR holds tokenizer.json and tokenizer_config.json; each input line is one JSON string and
// each output line the JSON array of its ids (same contract as `nibble tokenize --jsonl`).
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { Tokenizer } from "@huggingface/tokenizers";

const args = process.argv.slice(2);
const dir = args.find((a) => !a.startsWith("--"));
if (!dir) throw new Error("usage: node encode.mjs MODEL_DIR [--no-special] < strings.jsonl");
const addSpecial = !args.includes("--no-special");
const tok = new Tokenizer(JSON.parse(readFileSync(join(dir, "tokenizer.json"), "utf8")),
                          JSON.parse(readFileSync(join(dir, "tokenizer_config.json"), "utf8")));
const out = [];
for (const line of readFileSync(0, "utf8").split("\n")) {
  if (line.length === 0) continue;
  out.push(JSON.stringify(tok.encode(JSON.parse(line), { add_special_tokens: addSpecial }).ids));
}
process.stdout.write(out.join("\n") + (out.length ? "\n" : ""));
