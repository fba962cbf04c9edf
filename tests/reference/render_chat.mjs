// Reference chat-template renderings from @huggingface/jinja.
// usage: node render_chat.mjs TEMPLATE_SOURCE [EXTRA_JSON] < contexts.jsonl > rendered.jsonl
// TEMPLATE_SOURCE is a tokenizer_config.json (its chat_template is used), a plain .jinja file, or "-":
// then each input line is {"template": SOURCE, "context": {...}} (one small template per line, for the
// feature cases). Otherwise each input line is a JSON object of template variables (messages,
// add_generation_prompt, bos_token, ...). Either way the context is merged with the EXTRA_JSON object;
// each output line is the rendered text as a JSON string, or {"error": true} when parsing or rendering
// fails (e.g. raise_exception).
import { readFileSync } from "node:fs";
import { Template } from "@huggingface/jinja";

const path = process.argv[2];
if (!path) throw new Error("usage: node render_chat.mjs TEMPLATE_SOURCE < contexts.jsonl");
const inline = path === "-";
let template = null;
if (!inline) {
  const text = readFileSync(path, "utf8");
  template = new Template(path.endsWith(".json") ? JSON.parse(text).chat_template : text);
}
const extra = JSON.parse(process.argv[3] ?? "{}");
const out = [];
for (const line of readFileSync(0, "utf8").split("\n")) {
  if (line.length === 0) continue;
  const input = JSON.parse(line);
  try {
    const t = inline ? new Template(input.template) : template;
    const context = { ...(inline ? input.context ?? {} : input), ...extra };
    out.push(JSON.stringify(t.render(context)));
  } catch (e) {
    out.push(JSON.stringify({ error: true }));  // messages differ between implementations
  }
}
process.stdout.write(out.join("\n") + (out.length ? "\n" : ""));
