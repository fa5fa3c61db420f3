// Reference token ids from OpenAI's tiktoken (npm package: the Rust core compiled to wasm).
// stdin: JSON {"encoding": "gpt2" | "cl100k_base" | "o200k_base", "texts": [base64 of UTF-8 text, ...]}
// stdout: JSON [[ids...], ...] from encode_ordinary (special-token text stays plain text).
const { get_encoding } = require("tiktoken");
let input = "";
process.stdin.on("data", (d) => (input += d));
process.stdin.on("end", () => {
  const req = JSON.parse(input);
  const enc = get_encoding(req.encoding);
  const out = req.texts.map((b64) => Array.from(enc.encode_ordinary(Buffer.from(b64, "base64").toString("utf8"))));
  enc.free();
  process.stdout.write(JSON.stringify(out));
});
