// Reference token ids from Hugging Face's tokenizers, the Rust library itself through its Node
// binding (npm tokenizers), for texts that hold special tokens: a rendered chat is tokenized as
// transformers' apply_chat_template tokenizes it, with add_special_tokens false (the added
// tokens' texts are still matched in the text, with their lstrip and rstrip).
// stdin: JSON {"tokenizer": PATH of a tokenizer.json, "texts": [base64 of UTF-8 text, ...]}
// stdout: JSON [[ids...], ...]
const fs = require("fs");
const { Tokenizer } = require("tokenizers");
let input = "";
process.stdin.on("data", (d) => (input += d));
process.stdin.on("end", async () => {
  const req = JSON.parse(input);
  const tokenizer = Tokenizer.fromFile(req.tokenizer);
  const out = [];
  for (const b64 of req.texts) {
    const text = Buffer.from(b64, "base64").toString("utf8");
    out.push(Array.from((await tokenizer.encode(text, null, { addSpecialTokens: false })).getIds()));
  }
  process.stdout.write(JSON.stringify(out));
});
