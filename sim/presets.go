package sim

import (
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"

	"github.com/gearboxlm/gearbox/model"
)

// presetFS holds the model presets: for each Hugging Face id, the fields
// of its config.json that model.ParseConfig reads (architecture, sizes,
// heads, head_dim, vocabulary, context length, RoPE, tying, special
// tokens, dtype), copied from the repository's config.json. The file of
// "org/name" is presets/org--name.json.
//
// Provenance of the Seesaw paper's models (Su et al., MLSys 2025, §6.1),
// where the file is not a verbatim copy:
//   - meta-llama/Llama-2-70b-hf: the fields of its config.json (hidden
//     8192, intermediate 28672, 80 layers, 64 heads, 8 KV heads, vocabulary
//     32000, context 4096, float16), as mirrored byte for byte by
//     TheBloke/Llama-2-70B-fp16 and quoted by fine-tunes whose
//     _name_or_path is meta-llama/Llama-2-70b-hf; it has no rope_theta
//     (the default 10000 applies).
//   - elinas/Llama-3-15B-Instruct-zeroed: Meta-Llama-3-8B-Instruct with its
//     layers duplicated to 64 (a mergekit passthrough merge whose added
//     layers have zeroed o_proj and down_proj). The repository's own
//     config.json could not be read here; every shape field (hidden 4096,
//     intermediate 14336, 64 layers, 32 heads, 8 KV heads, vocabulary
//     128256, context 8192, rope_theta 500000, untied embeddings, bfloat16)
//     is the same in the config.json of three models fine-tuned from it
//     that name it as _name_or_path (ZeusLabs/L3-Aethora-15B-V2, uploaded
//     by elinas; SteelStorage/L3-NA-Aethora-15B;
//     bullerwins/L3-Aethora-15B-V2-exl2_4.0bpw). Not verified: eos_token_id
//     (128001 here, from L3-Aethora-15B-V2; L3-NA-Aethora-15B has 128009),
//     which the simulator does not use.
//
// meta-llama/Llama-3.2-1B-Instruct, a draft model of the Llama 3.1 presets
// (their vocabulary) for simulated draft-model speculative decoding, is a
// verbatim copy of the fields above from its config.json.
//
// The CSPS paper's 1M-context models (Zhang & Shen, papers/002 §5.2) are
// not Llama checkpoints; their presets restate the shapes of their
// config.json files in Llama's field names, which is all the simulator
// reads (the shapes spec csps.md S2 asks to check):
//   - THUDM/glm-4-9b-chat-1m (ChatGLM): num_layers 40, hidden_size 4096,
//     ffn_hidden_size 13696 (SwiGLU), num_attention_heads 32, kv_channels
//     128, multi_query_group_num 4 (4 KV heads; the spec's "2 KV groups"
//     is glm-4-9b-chat's 128K model), padded_vocab_size 151552,
//     add_qkv_bias true (written attention_bias, which also gives o_proj a
//     bias GLM lacks: 163,840 parameters of 9.48 B), layernorm_epsilon
//     1.5625e-07, rope_ratio 10000 on base 10000 (rope_theta 1e8),
//     seq_length 1048576 (max_position_embeddings), untied.
//   - internlm/internlm2_5-7b-chat-1m (InternLM2): 32 layers, hidden 4096,
//     intermediate 14336, 32 heads, 8 KV heads, vocabulary 92544,
//     rope_theta 5e7, untied, bfloat16, 7,737,708,544 parameters. Its
//     config.json's max_position_embeddings is 262144 with dynamic NTK
//     scaling (factor 2.5, as opencompass's lmdeploy config serves it with
//     session_len 1048576); the preset gives the 1M context the model is
//     served at, which is what the engine checks prompts against.
//
// The SiDP paper's models (papers/001, §5.1) are verbatim copies of the
// fields above from their repositories' config.json:
// Qwen/Qwen2.5-72B-Instruct, meta-llama/Llama-3.1-70B-Instruct (the same
// shape as Llama-3.3-70B-Instruct) and meta-llama/Llama-3.1-405B (the
// paper's 82% FFN share).
//
//go:embed presets/*.json
var presetFS embed.FS

// Models lists the preset Hugging Face ids, sorted.
func Models() []string {
	entries, err := fs.ReadDir(presetFS, "presets")
	if err != nil {
		return nil // the embedded directory always exists
	}
	var out []string
	for _, e := range entries {
		out = append(out, strings.Replace(strings.TrimSuffix(e.Name(), ".json"), "--", "/", 1))
	}
	slices.Sort(out)
	return out
}

// LookupModel returns the config of a model named the way vLLM's --model
// takes it: a preset's Hugging Face id (case-insensitive, e.g.
// "meta-llama/Llama-3.3-70B-Instruct", "Qwen/Qwen3-32B"), or a directory
// holding a config.json (only the config is read; no weights are needed).
// A preset is parsed by model.ParseConfig, so it is validated like a
// checkpoint's config.
func LookupModel(name string) (*model.Config, error) {
	if st, err := os.Stat(name); err == nil && st.IsDir() {
		return model.LoadConfig(name)
	} else if err == nil || !errors.Is(err, os.ErrNotExist) {
		if err == nil {
			err = fmt.Errorf("%s is not a directory", name)
		}
		return nil, fmt.Errorf("sim: model %q: %w", name, err)
	}
	for _, id := range Models() {
		if strings.EqualFold(id, strings.TrimSpace(name)) {
			data, err := presetFS.ReadFile("presets/" + strings.Replace(id, "/", "--", 1) + ".json")
			if err != nil {
				return nil, fmt.Errorf("sim: preset %s: %w", id, err)
			}
			cfg, err := model.ParseConfig(data)
			if err != nil {
				return nil, fmt.Errorf("sim: preset %s: %w", id, err)
			}
			return cfg, nil
		}
	}
	return nil, fmt.Errorf("sim: model %q is neither a directory with config.json nor a preset (presets: %s)",
		name, strings.Join(Models(), ", "))
}
