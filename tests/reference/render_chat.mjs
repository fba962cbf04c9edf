// Reference chat-template renderings from @huggingface/jinja.
// usage: node render_chat.mjs TEMPLATE_SOURCE [EXTRA_JSON] < contexts.jsonl > rendered.jsonl
// TEMPLATE_SOURCE is a tokenizer_config.json (its chat_template is used) or a plain .jinja file.
// Each input line is a JSON object of template variables (messages, add_generation_prompt,
// bos_token, ...), merged with the EXTRA_JSON object; each output line is the rendered text as a JSON
// string, or {"error": true} when rendering fails (e.g. raise_exception).
import { readFileSync } from "node:fs";
import { Template } from "@huggingface/jinja";

const path = process.argv[2];
if (!path) throw new Error("usage: node render_chat.mjs TEMPLATE_SOURCE < contexts.jsonl");
const text = readFileSync(path, "utf8");
const source = path.endsWith(".json") ? JSON.parse(text).chat_template : text;
const extra = JSON.parse(process.argv[3] ?? "{}");
const template = new Template(source);
const out = [];
for (const line of readFileSync(0, "utf8").split("\n")) {
  if (line.length === 0) continue;
  const context = { ...JSON.parse(line), ...extra };
  try {
    out.push(JSON.stringify(template.render(context)));
  } catch (e) {
    out.push(JSON.stringify({ error: true }));  // messages differ between implementations
  }
}
process.stdout.write(out.join("\n") + (out.length ? "\n" : ""));
