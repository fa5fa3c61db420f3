// Reference token ids from Hugging Face's tokenizers itself: the Rust library through its own
// Node binding (npm `tokenizers`, prebuilt for Linux x64 and arm64), the code Python's
// `tokenizers` and transformers run.
// stdin: JSON {"tokenizer": PATH of a tokenizer.json, "texts": [base64 of UTF-8 text, ...],
//              "add_special_tokens": true | false}
// stdout: JSON [[ids...], ...]
// or, to decode: stdin {"tokenizer": PATH, "ids": [[ids...], ...]}, stdout JSON [text, ...]
// (special tokens kept, as run prints them).
// The binding takes JavaScript strings, so a text must be valid UTF-8: one that is not is an
// error here, never silently replaced by U+FFFD. Added tokens written in a text are always
// recognised by the library; add_special_tokens only runs the post-processor (a BOS).
const fs = require("fs");
const { Tokenizer } = require("tokenizers");

const strictUtf8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });

async function main() {
  const request = JSON.parse(fs.readFileSync(0, "utf8"));
  const tokenizer = Tokenizer.fromFile(request.tokenizer);
  if (request.ids) {
    const texts = [];
    for (const ids of request.ids) texts.push(await tokenizer.decode(ids, false));
    process.stdout.write(JSON.stringify(texts));
    return;
  }
  const options = { addSpecialTokens: Boolean(request.add_special_tokens) };
  const out = [];
  for (const [i, b64] of request.texts.entries()) {
    let text;
    try {
      text = strictUtf8.decode(Buffer.from(b64, "base64"));
    } catch (e) {
      throw new Error(`text ${i} is not valid UTF-8, which the binding cannot be given`);
    }
    const encoding = await tokenizer.encode(text, null, options);
    out.push(encoding.getIds());
  }
  process.stdout.write(JSON.stringify(out));
}

main().catch((e) => {
  console.error(e && e.stack ? e.stack : String(e));
  process.exit(1);
});
