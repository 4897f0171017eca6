// Runs the official OpenAI Node client against a Gearbox server:
//   node openai_client.mjs BASE_URL MODEL
// Prints one line per check and exits non-zero on the first failure.
import { createRequire } from "node:module";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(path.join(here, "npm", "package.json"));
const OpenAI = require("openai").default ?? require("openai");

const [baseURL, model] = process.argv.slice(2);
const client = new OpenAI({ baseURL: baseURL + "/v1", apiKey: "unused", maxRetries: 0 });

function check(cond, what) {
  if (!cond) {
    console.error("FAIL " + what);
    process.exit(1);
  }
  console.log("ok   " + what);
}

const models = await client.models.list();
check(models.data.some((m) => m.id === model), "models.list names " + model);

const completion = await client.completions.create({ model, prompt: "Once upon a time", max_tokens: 16, temperature: 0 });
const want = completion.choices[0].text;
check(want.length > 0 && completion.usage.completion_tokens === 16, "completions.create: " + JSON.stringify(want));

let streamed = "";
let usageChunk = null;
const cstream = await client.completions.create({ model, prompt: "Once upon a time", max_tokens: 16, temperature: 0, stream: true, stream_options: { include_usage: true } });
for await (const chunk of cstream) {
  for (const c of chunk.choices) streamed += c.text;
  if (chunk.usage) usageChunk = chunk.usage;
}
check(streamed === want, "streamed completion equals the non-streamed one");
check(usageChunk && usageChunk.completion_tokens === 16, "stream_options.include_usage chunk");

const chat = await client.chat.completions.create({ model, messages: [{ role: "user", content: "Once upon a time" }], max_tokens: 16, temperature: 0 });
check(chat.choices[0].message.role === "assistant" && chat.choices[0].message.content === want, "chat.completions.create");

let chatStreamed = "";
const sstream = await client.chat.completions.create({ model, messages: [{ role: "user", content: "Once upon a time" }], max_tokens: 16, temperature: 0, stream: true });
for await (const chunk of sstream) chatStreamed += chunk.choices[0]?.delta?.content ?? "";
check(chatStreamed === want, "streamed chat equals the non-streamed one");

// Tool calling: a named function holds the generation to its arguments
// with any model; the client's stream helper assembles the streamed call.
const tools = [{ type: "function", function: { name: "get_weather", parameters: { type: "object", properties: { city: { type: "string", maxLength: 6 } }, required: ["city"] } } }];
const toolRequest = { model, messages: [{ role: "user", content: "Weather?" }], tools, tool_choice: { type: "function", function: { name: "get_weather" } }, max_tokens: 200, temperature: 0 };
const forced = await client.chat.completions.create(toolRequest);
const call = forced.choices[0].message.tool_calls?.[0];
check(call && call.type === "function" && call.id && call.function.name === "get_weather" && typeof JSON.parse(call.function.arguments).city === "string",
  "tool_choice naming a function → message.tool_calls: " + JSON.stringify(call));
const final = await client.chat.completions.stream(toolRequest).finalChatCompletion();
const scall = final.choices[0].message.tool_calls?.[0];
check(scall && scall.function.name === "get_weather" && scall.function.arguments === call.function.arguments,
  "streamed tool call assembled by ChatCompletionStream equals the non-streamed one");

// The Responses API: a response, and the same streamed and assembled by
// the client's strict accumulator (ResponseStream).
const rreq = { model, input: "Once upon a time", max_output_tokens: 16, temperature: 0 };
const response = await client.responses.create(rreq);
check(response.output_text === want && response.status === "incomplete" && response.usage.output_tokens === 16, "responses.create: " + JSON.stringify(response.output_text));
const rfinal = await client.responses.stream(rreq).finalResponse();
check(rfinal.output_text === want && rfinal.output[0].type === "message", "responses.stream assembled by ResponseStream equals responses.create");
const retrieved = await client.responses.retrieve(response.id);
check(retrieved.id === response.id && retrieved.output_text === want, "responses.retrieve returns the kept response");
const followUp = await client.responses.create({ model, input: "And then?", previous_response_id: response.id, max_output_tokens: 4, temperature: 0 });
check(followUp.status === "incomplete" && followUp.usage.input_tokens > response.usage.input_tokens + response.usage.output_tokens,
  "previous_response_id continues the kept conversation (" + followUp.usage.input_tokens + " input tokens)");
const rtools = [{ type: "function", name: "get_weather", parameters: tools[0].function.parameters }];
const rcall = await client.responses.stream({ model, input: "Weather?", tools: rtools, tool_choice: { type: "function", name: "get_weather" }, max_output_tokens: 200, temperature: 0 }).finalResponse();
const fc = rcall.output.find((o) => o.type === "function_call");
check(fc && fc.name === "get_weather" && fc.call_id && typeof JSON.parse(fc.arguments).city === "string", "responses function_call streamed: " + JSON.stringify(fc));

// Embeddings: the client asks for base64 unless told otherwise and
// decodes it.
const emb = await client.embeddings.create({ model, input: ["Once upon a time", "The cat"] });
const v = emb.data[0].embedding;
const norm = Math.sqrt(v.reduce((s, x) => s + x * x, 0));
check(emb.data.length === 2 && emb.data[1].index === 1 && v.length > 0 && Math.abs(norm - 1) < 1e-5 && emb.usage.prompt_tokens > 0,
  "embeddings.create (base64, decoded by the client): " + v.length + " values, norm " + norm.toFixed(6));
const embFloat = await client.embeddings.create({ model, input: "Once upon a time", encoding_format: "float" });
check(embFloat.data[0].embedding.every((x, i) => Math.abs(x - v[i]) < 1e-6), "embeddings as floats equal the base64 ones");

try {
  await client.completions.create({ model: "no-such-model", prompt: "hi", max_tokens: 4 });
  check(false, "unknown model raises");
} catch (e) {
  check(e instanceof OpenAI.NotFoundError && e.status === 404, "unknown model → NotFoundError (404)");
}
try {
  await client.completions.create({ model, prompt: "hi", max_tokens: -1 });
  check(false, "max_tokens -1 raises");
} catch (e) {
  check(e instanceof OpenAI.BadRequestError && e.status === 400 && e.param === "max_tokens", "max_tokens -1 → BadRequestError (400, param max_tokens)");
}
console.log("all checks passed");
