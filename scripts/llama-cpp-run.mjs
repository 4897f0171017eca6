// llama-cpp-run.mjs: one timed greedy generation with llama.cpp, through
// the npm package node-llama-cpp (its prebuilt llama.cpp libraries, CPU
// only). Used by scripts/llama-cpp-compare; not part of go test.
//
//   NODE_LLAMA_CPP=/path/to/node_modules/node-llama-cpp \
//     node scripts/llama-cpp-run.mjs MODEL.gguf THREADS TOKENS IDS [TEXT]
//
// IDS is the prompt as comma-separated token ids (Gearbox's tokenization,
// BOS included), fed to llama.cpp as they are; TOKENS is how many tokens
// to generate, greedily (temperature 0, no penalties, end-of-sequence
// ignored). Prints one JSON line: prompt tokens, prefill time (evaluating
// the prompt and picking the first token) and rate, decode rate over the
// remaining TOKENS-1 tokens, the generated ids, and, when TEXT is given,
// llama.cpp's own tokenization of TEXT (to compare with IDS).
import { performance } from "node:perf_hooks";
import path from "node:path";

const [modelPath, threadsArg, tokensArg, idsArg, text] = process.argv.slice(2);
if (!modelPath || !threadsArg || !tokensArg || !idsArg) {
	console.error("usage: llama-cpp-run.mjs MODEL.gguf THREADS TOKENS IDS [TEXT]");
	process.exit(2);
}
const pkg = process.env.NODE_LLAMA_CPP;
if (!pkg) {
	console.error("llama-cpp-run.mjs: set NODE_LLAMA_CPP to the node_modules/node-llama-cpp directory");
	process.exit(2);
}
const { getLlama, LlamaLogLevel } = await import(path.join(pkg, "dist", "index.js"));
const threads = Number(threadsArg);
const want = Number(tokensArg);
const prompt = idsArg.split(",").map(Number);

const logs = [];
const llama = await getLlama({
	gpu: false, build: "never", maxThreads: threads, logLevel: LlamaLogLevel.info,
	logger: (level, message) => logs.push(message),
});
const model = await llama.loadModel({ modelPath, gpuLayers: 0 });
const context = await model.createContext({
	contextSize: prompt.length + want + 16,
	batchSize: Math.max(512, prompt.length),
	threads: { ideal: threads, min: threads },
	sequences: 1,
	performanceTracking: true,
});
const sequence = context.getSequence();

const out = [];
const t0 = performance.now();
let t1 = t0;
for await (const tok of sequence.evaluate(prompt, { temperature: 0 })) {
	if (out.length === 0) t1 = performance.now();
	out.push(tok);
	if (out.length >= want) break;
}
const t2 = performance.now();
const result = {
	prompt_tokens: prompt.length,
	prefill_ms: t1 - t0,
	prompt_tokens_per_second: (prompt.length / (t1 - t0)) * 1000,
	completion_tokens: out.length,
	tokens_per_second: out.length > 1 ? ((out.length - 1) / (t2 - t1)) * 1000 : 0,
	token_ids: out,
	threads: context.currentThreads,
	flash_attention: context.flashAttention,
	system_info: llama.systemInfo.trim(),
};
logs.length = 0;
await context.printTimings();
result.timings = logs.join("").replace(/llama_perf_context_print: */g, "; ").replace(/\s+/g, " ").trim();
if (text) {
	const bos = model.tokens.bos;
	result.llama_cpp_prompt_ids = [...(bos != null ? [bos] : []), ...model.tokenize(text)];
}
console.log(JSON.stringify(result));
await context.dispose();
await model.dispose();
await llama.dispose();
