// MB/s of Hugging Face's tokenizers (the Rust library through its Node binding, npm `tokenizers`)
// encoding a file without special tokens, best of N runs, one thread.
// usage: node tests/bench/hf_tokenizers_speed.js FILE N TOKENIZER.json ...  ->  {"PATH": MB/s, ...}
// The library's thread pool would spread a batch over cores; one text on one thread is what
// run's one core is measured against, so its parallelism is switched off before it loads.
process.env.TOKENIZERS_PARALLELISM = "false";
const fs = require("fs");
const { Tokenizer } = require("tokenizers");

async function main() {
  const [file, runs, ...tokenizers] = process.argv.slice(2);
  const text = fs.readFileSync(file, "utf8");
  const mb = Buffer.byteLength(text, "utf8") / 1e6;
  const out = {};
  for (const path of tokenizers) {
    const tokenizer = Tokenizer.fromFile(path);
    await tokenizer.encode("warm up", null, { addSpecialTokens: false });
    let best = Infinity;
    for (let i = 0; i < Number(runs); i++) {
      const t0 = process.hrtime.bigint();
      await tokenizer.encode(text, null, { addSpecialTokens: false });
      best = Math.min(best, Number(process.hrtime.bigint() - t0) / 1e9);
    }
    out[path] = mb / best;
  }
  process.stdout.write(JSON.stringify(out));
}

main().catch((e) => {
  console.error(e && e.stack ? e.stack : String(e));
  process.exit(1);
});
