package gguf

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	"github.com/gearboxlm/gearbox/internal/fixture"
	"github.com/gearboxlm/gearbox/model/safetensors"
)

// convert writes dir as GGUF and returns the parsed header and the file.
func convert(t *testing.T, dir string, opt Options) (*File, []byte) {
	t.Helper()
	out := filepath.Join(t.TempDir(), "m.gguf")
	if err := ConvertFile(dir, out, opt); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	f, err := Read(bytesReader(data))
	if err != nil {
		t.Fatal(err)
	}
	return f, data
}

func tensorData(t *testing.T, f *File, data []byte, name string) []byte {
	t.Helper()
	ti, ok := f.Tensor(name)
	if !ok {
		t.Fatalf("no tensor %s", name)
	}
	n, err := ti.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	return data[f.DataOffset+ti.Offset : f.DataOffset+ti.Offset+n]
}

func f32s(b []byte) []float32 {
	out := make([]float32, len(b)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out
}

func source(t *testing.T, dir, name string) []float32 {
	t.Helper()
	set, err := safetensors.OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	x, ok := set.Tensor(name)
	if !ok {
		t.Fatalf("no source tensor %s", name)
	}
	v, err := x.Float32()
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func get[T any](t *testing.T, f *File, key string) T {
	t.Helper()
	v, ok := f.Get(key)
	if !ok {
		t.Fatalf("no key %s", key)
	}
	x, ok := v.(T)
	if !ok {
		t.Fatalf("key %s is %T", key, v)
	}
	return x
}

// TestConvertBuiltin converts stories260K to F32: llama metadata, the
// SentencePiece-style vocabulary with byte and control types and merge
// scores, tensors under llama.cpp's names with dims fastest-first, and q/k
// permuted for interleaved RoPE (8 query, 4 KV heads).
func TestConvertBuiltin(t *testing.T) {
	dir := "../../model/builtin/stories260K"
	f, data := convert(t, dir, Options{Type: F32})
	for key, want := range map[string]uint32{
		"llama.vocab_size": 512, "llama.context_length": 512, "llama.embedding_length": 64, "llama.block_count": 5,
		"llama.feed_forward_length": 172, "llama.rope.dimension_count": 8, "llama.attention.head_count": 8,
		"llama.attention.head_count_kv": 4, "general.file_type": FileAllF32, "tokenizer.ggml.bos_token_id": 1,
		"tokenizer.ggml.eos_token_id": 2, "tokenizer.ggml.unknown_token_id": 0,
	} {
		if got := get[uint32](t, f, key); got != want {
			t.Errorf("%s = %d, want %d", key, got, want)
		}
	}
	if get[string](t, f, "general.architecture") != "llama" || get[string](t, f, "tokenizer.ggml.model") != "llama" ||
		get[float32](t, f, "llama.rope.freq_base") != 10000 || get[float32](t, f, "llama.attention.layer_norm_rms_epsilon") != 1e-5 ||
		!get[bool](t, f, "tokenizer.ggml.add_bos_token") {
		t.Error("architecture, tokenizer model, rope base, eps or add_bos wrong")
	}
	if _, ok := f.Get("general.quantization_version"); ok {
		t.Error("quantization_version in an F32 file")
	}
	tokens := get[Array](t, f, "tokenizer.ggml.tokens").Values
	types := get[Array](t, f, "tokenizer.ggml.token_type").Values
	scores := get[Array](t, f, "tokenizer.ggml.scores").Values
	if len(tokens) != 512 || len(types) != 512 || len(scores) != 512 {
		t.Fatalf("%d tokens, %d types, %d scores", len(tokens), len(types), len(scores))
	}
	if tokens[0] != "<unk>" || types[0] != int32(tokUnknown) || tokens[1] != "<s>" || types[1] != int32(tokControl) ||
		tokens[3] != "<0x00>" || types[3] != int32(tokByte) || types[300] != int32(tokNormal) {
		t.Errorf("tokens/types: %v %v %v %v / %v", tokens[0], tokens[1], tokens[3], tokens[300], types[:4])
	}
	// The first merge's product scores 0, later ones lower.
	var tj tokenizerJSON
	raw, _ := os.ReadFile(filepath.Join(dir, "tokenizer.json"))
	if err := json.Unmarshal(raw, &tj); err != nil {
		t.Fatal(err)
	}
	merges, _ := parseMerges(tj.Model.Merges)
	first, second := tj.Model.Vocab[merges[0][0]+merges[0][1]], tj.Model.Vocab[merges[1][0]+merges[1][1]]
	if scores[first] != float32(0) || scores[second] != float32(-1) {
		t.Errorf("merge scores %v %v, want 0 -1", scores[first], scores[second])
	}

	if len(f.Tensors) != 1+5*9+1 {
		t.Errorf("%d tensors, want 47 (tied: no output.weight)", len(f.Tensors))
	}
	if ti, _ := f.Tensor("blk.4.ffn_down.weight"); !reflect.DeepEqual(ti.Dims, []uint64{172, 64}) || ti.Type != F32 {
		t.Errorf("ffn_down %v %v", ti.Dims, ti.Type)
	}
	for _, c := range []struct {
		gguf, hf string
		heads    int
	}{
		{"token_embd.weight", "model.embed_tokens.weight", 0},
		{"blk.2.attn_q.weight", "model.layers.2.self_attn.q_proj.weight", 8},
		{"blk.2.attn_k.weight", "model.layers.2.self_attn.k_proj.weight", 4},
		{"blk.2.attn_v.weight", "model.layers.2.self_attn.v_proj.weight", 0},
		{"blk.3.ffn_norm.weight", "model.layers.3.post_attention_layernorm.weight", 0},
		{"output_norm.weight", "model.norm.weight", 0},
	} {
		want := source(t, dir, c.hf)
		if c.heads > 0 {
			want, _ = PermuteRoPE(want, c.heads, 64)
		}
		if got := f32s(tensorData(t, f, data, c.gguf)); !slices.Equal(got, want) {
			t.Errorf("%s differs from %s", c.gguf, c.hf)
		}
	}
}

// TestConvertQ8_0 converts a BF16 checkpoint with untied embeddings and
// Llama 3 rope scaling to Q8_0: matrices quantized (within a step of the
// BF16 values), norms F32, output.weight present, rope_freqs computed.
func TestConvertQ8_0(t *testing.T) {
	spec := fixture.Spec{Hidden: 64, Intermediate: 96, Heads: 4, KVHeads: 2, Layers: 2, Vocab: 320, DType: "BF16", Seed: 3,
		RopeTheta: 500000, RopeScaling: map[string]any{"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
			"high_freq_factor": 4.0, "original_max_position_embeddings": 64}}
	dir, err := fixture.Dir(t.TempDir(), spec)
	if err != nil {
		t.Fatal(err)
	}
	f, data := convert(t, dir, Options{Type: Q8_0})
	if get[uint32](t, f, "general.file_type") != FileMostlyQ8_0 || get[uint32](t, f, "general.quantization_version") != 2 {
		t.Error("file type or quantization version")
	}
	for name, typ := range map[string]GGMLType{"token_embd.weight": Q8_0, "blk.1.ffn_down.weight": Q8_0, "output.weight": Q8_0,
		"blk.0.attn_norm.weight": F32, "rope_freqs.weight": F32} {
		if ti, ok := f.Tensor(name); !ok || ti.Type != typ {
			t.Errorf("%s: %v (present %v), want %v", name, ti.Type, ok, typ)
		}
	}
	want := source(t, dir, "model.layers.1.self_attn.k_proj.weight")
	want, _ = PermuteRoPE(want, 2, 64)
	q := tensorData(t, f, data, "blk.1.attn_k.weight")
	expect := make([]byte, len(q))
	if err := QuantizeQ8_0(expect, want); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(q, expect) {
		t.Error("attn_k is not the Q8_0 of the permuted BF16 values")
	}
	// rope_freqs: head dim 16, theta 5e5, original context 64: the
	// highest frequencies (wavelength < 16) keep factor 1, the lowest
	// (wavelength > 64) take factor 8.
	rf := f32s(tensorData(t, f, data, "rope_freqs.weight"))
	if len(rf) != 8 || rf[0] != 1 || rf[7] != 8 {
		t.Errorf("rope_freqs %v", rf)
	}
	for i, v := range rf {
		if v < 1 || v > 8 || (i > 0 && v < rf[i-1]) {
			t.Errorf("rope_freqs %v: not rising from 1 to 8", rf)
		}
	}

	// auto keeps BF16.
	f, _ = convert(t, dir, Options{Auto: true})
	if ti, _ := f.Tensor("blk.0.ffn_up.weight"); ti.Type != BF16 || get[uint32](t, f, "general.file_type") != FileMostlyBF16 {
		t.Errorf("auto: %v", ti.Type)
	}
}

// TestConvertByteLevel writes a GPT-2-style byte-level tokenizer as the
// gpt2 model with its merges and Llama 3's pre-tokenizer name.
func TestConvertByteLevel(t *testing.T) {
	dir, err := fixture.Dir(t.TempDir(), fixture.Spec{Vocab: 16, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	tok := map[string]any{
		"added_tokens": []any{map[string]any{"id": 6, "content": "<|begin_of_text|>", "special": true}},
		"pre_tokenizer": map[string]any{"type": "Sequence", "pretokenizers": []any{
			map[string]any{"type": "Split", "pattern": map[string]any{"Regex": llama3Pre + `|\s+`}, "behavior": "Isolated"},
			map[string]any{"type": "ByteLevel", "add_prefix_space": false},
		}},
		"model": map[string]any{"type": "BPE", "vocab": map[string]int{"a": 0, "b": 1, "Ġ": 2, "ab": 3, "Ġab": 4, "c": 5},
			"merges": [][]string{{"a", "b"}, {"Ġ", "ab"}}},
	}
	raw, _ := json.Marshal(tok)
	if err := os.WriteFile(filepath.Join(dir, "tokenizer.json"), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	f, _ := convert(t, dir, Options{Type: F32})
	if get[string](t, f, "tokenizer.ggml.model") != "gpt2" || get[string](t, f, "tokenizer.ggml.pre") != "llama-bpe" {
		t.Error("model or pre")
	}
	if m := get[Array](t, f, "tokenizer.ggml.merges").Values; !reflect.DeepEqual(m, []any{"a b", "Ġ ab"}) {
		t.Errorf("merges %v", m)
	}
	types := get[Array](t, f, "tokenizer.ggml.token_type").Values
	tokens := get[Array](t, f, "tokenizer.ggml.tokens").Values
	if types[6] != int32(tokControl) || tokens[7] != "[PAD7]" || types[7] != int32(tokUnused) || types[0] != int32(tokNormal) {
		t.Errorf("types %v tokens %v", types, tokens)
	}
	if _, ok := f.Get("tokenizer.ggml.scores"); ok {
		t.Error("gpt2 vocabulary with scores")
	}
}

func TestConvertRefuses(t *testing.T) {
	for _, spec := range []fixture.Spec{
		{ModelType: "qwen2", Seed: 1},
		{AttentionBias: true, Seed: 1},
		{Vocab: 200, Seed: 1}, // tokenizer ids beyond the embedding
	} {
		dir, err := fixture.Dir(t.TempDir(), spec)
		if err != nil {
			t.Fatal(err)
		}
		if err := ConvertFile(dir, filepath.Join(t.TempDir(), "x.gguf"), Options{Type: F32}); err == nil {
			t.Errorf("%+v: no error", spec)
		}
	}
	if _, err := ParseType("q4_0"); err == nil {
		t.Error("q4_0: no error")
	}
}

func bytesReader(b []byte) *bytes.Reader { return bytes.NewReader(b) }
