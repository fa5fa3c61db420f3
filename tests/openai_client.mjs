// OpenAI's official Node client (npm openai, pinned in package.json) against `run --serve`:
// node tests/openai_client.mjs BASE_URL REQUESTS_JSON. Each request is {kind, params}, kind one
// of models, chat, completion; with params.stream the pieces are gathered. Prints one JSON
// array of what the client returned (or the APIError it threw), for tests/test_server.py.
import OpenAI from "openai";

const [baseURL, requestsJson] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey: process.env.SERVER_KEY || "none", maxRetries: 0, timeout: 120000 });
const requests = JSON.parse(requestsJson);

async function one({ kind, params }) {
  try {
    if (kind === "models") {
      const list = await client.models.list();
      return { ids: list.data.map((m) => m.id) };
    }
    const api = kind === "chat" ? client.chat.completions : client.completions;
    if (!params.stream) return { response: await api.create(params) };
    const stream = await api.create(params);
    const pieces = [];
    for await (const chunk of stream) pieces.push(chunk);
    return { chunks: pieces };
  } catch (err) {
    if (err instanceof OpenAI.APIError) return { status: err.status, error: err.error ?? null, message: err.message };
    throw err;
  }
}

const out = [];
for (const r of requests) out.push(await one(r));
process.stdout.write(JSON.stringify(out));
