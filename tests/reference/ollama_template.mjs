// Prints the real chat template (tokenizer.chat_template of the model's GGUF file) that
// @huggingface/ollama-utils records for an Ollama library model, e.g. "library/mistral:7b-instruct-fp16".
// usage: node ollama_template.mjs MODEL > template.jinja
// The package keeps that table unexported, in its generated source src/chat-template-automap.ts: a
// plain array literal, read here as data.
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const model = process.argv[2];
if (!model) throw new Error("usage: node ollama_template.mjs MODEL");
const root = join(dirname(fileURLToPath(import.meta.url)), "node_modules", "@huggingface", "ollama-utils");
const source = readFileSync(join(root, "src", "chat-template-automap.ts"), "utf8");
const marker = source.indexOf("OLLAMA_CHAT_TEMPLATE_MAPPING");
const begin = source.indexOf("= [", marker);
const end = source.lastIndexOf("];");
if (marker < 0 || begin < 0 || end < begin) throw new Error("unexpected layout of chat-template-automap.ts");
const table = new Function(`return ${source.slice(begin + 2, end + 1)};`)();
const entry = table.find((e) => e.model === model);
if (!entry || typeof entry.gguf !== "string") throw new Error(`no chat template for ${model} in @huggingface/ollama-utils`);
process.stdout.write(entry.gguf);
