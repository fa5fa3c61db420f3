// MB/s of the npm package tiktoken's encode_ordinary on a file, best of N runs, one thread.
// usage: node tests/bench/tiktoken_speed.js FILE N   ->  {"gpt2": MB/s, "cl100k_base": MB/s}
const fs = require("fs");
const { get_encoding } = require("tiktoken");
const [file, runs] = [process.argv[2], Number(process.argv[3] || 5)];
const text = fs.readFileSync(file, "utf8");
const mb = Buffer.byteLength(text, "utf8") / 1e6;
const out = {};
for (const name of ["gpt2", "cl100k_base"]) {
  const enc = get_encoding(name);
  enc.encode_ordinary("warm up");
  let best = Infinity;
  for (let i = 0; i < runs; i++) {
    const t0 = process.hrtime.bigint();
    enc.encode_ordinary(text);
    best = Math.min(best, Number(process.hrtime.bigint() - t0) / 1e9);
  }
  out[name] = mb / best;
  enc.free();
}
process.stdout.write(JSON.stringify(out));
