// MB/s of Hugging Face's tokenizers for JavaScript (npm @huggingface/tokenizers) encoding a file
// without special tokens, best of N runs, one thread.
// usage: node tests/bench/hf_tokenizers_speed.js FILE N TOKENIZER.json ...  ->  {"PATH": MB/s, ...}
const fs = require("fs");
const { Tokenizer } = require("@huggingface/tokenizers");
const [file, runs, ...tokenizers] = process.argv.slice(2);
const text = fs.readFileSync(file, "utf8");
const mb = Buffer.byteLength(text, "utf8") / 1e6;
const out = {};
for (const path of tokenizers) {
  const tokenizer = new Tokenizer(JSON.parse(fs.readFileSync(path, "utf8")), {});
  tokenizer.encode("warm up", { add_special_tokens: false });
  let best = Infinity;
  for (let i = 0; i < Number(runs); i++) {
    const t0 = process.hrtime.bigint();
    tokenizer.encode(text, { add_special_tokens: false });
    best = Math.min(best, Number(process.hrtime.bigint() - t0) / 1e9);
  }
  out[path] = mb / best;
}
process.stdout.write(JSON.stringify(out));
