// Reference token ids from Hugging Face's tokenizers for JavaScript (npm @huggingface/tokenizers),
// which reads a tokenizer.json as the Python/Rust library does.
// stdin: JSON {"tokenizer": PATH of a tokenizer.json, "texts": [base64 of UTF-8 text, ...],
//              "add_special_tokens": true | false}
// stdout: JSON [[ids...], ...]
const fs = require("fs");
const { Tokenizer } = require("@huggingface/tokenizers");
let input = "";
process.stdin.on("data", (d) => (input += d));
process.stdin.on("end", () => {
  const req = JSON.parse(input);
  const tokenizer = new Tokenizer(JSON.parse(fs.readFileSync(req.tokenizer, "utf8")), {});
  const out = req.texts.map((b64) =>
    Array.from(tokenizer.encode(Buffer.from(b64, "base64").toString("utf8"),
                                { add_special_tokens: req.add_special_tokens }).ids));
  process.stdout.write(JSON.stringify(out));
});
