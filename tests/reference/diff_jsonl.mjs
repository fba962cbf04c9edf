// Compares reference and nibble JSONL outputs line by line; prints the first mismatches with their
// inputs and exits 1 if any line differs (or the line counts differ).
// usage: node diff_jsonl.mjs INPUT EXPECTED ACTUAL KIND
import { readFileSync } from "node:fs";

const [inputPath, expectedPath, actualPath, kind] = process.argv.slice(2);
const lines = (p) => readFileSync(p, "utf8").split("\n").filter((l) => l.length > 0);
const inputs = lines(inputPath), expected = lines(expectedPath), actual = lines(actualPath);
if (expected.length !== inputs.length || actual.length !== inputs.length) {
  console.log(`line counts differ: ${inputs.length} inputs, ${expected.length} reference, ${actual.length} nibble`);
  process.exit(1);
}
let mismatches = 0;
for (let i = 0; i < inputs.length; ++i) {
  if (expected[i] === actual[i]) continue;
  if (++mismatches <= 5) {
    console.log(`MISMATCH line ${i + 1}\n  input:     ${inputs[i]}\n  reference: ${expected[i]}\n  nibble:    ${actual[i]}`);
  }
}
if (mismatches > 0) {
  console.log(`${mismatches} of ${inputs.length} ${kind} results differ from the reference`);
  process.exit(1);
}
console.log(`${inputs.length} ${kind} results identical to the reference`);
