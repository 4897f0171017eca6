package gguf

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/gearboxlm/gearbox/model"
	"github.com/gearboxlm/gearbox/model/safetensors"
)

// Options choose the converted file's tensor type.
type Options struct {
	// Type is the matrices' type: F32, F16, BF16 or Q8_0; 0 (F32) unless
	// Auto. Vectors (the RMSNorm weights, rope_freqs) are always F32, as
	// convert_hf_to_gguf writes them; a Q8_0 matrix whose rows are not a
	// multiple of 32 falls back to F16, as it does there.
	Type GGMLType
	// Auto keeps each matrix in the checkpoint's dtype (F32, F16 or BF16).
	Auto bool
	// Name is general.name; the directory's base name when empty.
	Name string
}

// ParseType reads a -type flag: f32, f16, bf16, q8_0 or auto.
func ParseType(s string) (Options, error) {
	switch strings.ToLower(s) {
	case "auto":
		return Options{Auto: true}, nil
	case "f32", "float32":
		return Options{Type: F32}, nil
	case "f16", "float16":
		return Options{Type: F16}, nil
	case "bf16", "bfloat16":
		return Options{Type: BF16}, nil
	case "q8_0", "int8":
		return Options{Type: Q8_0}, nil
	}
	return Options{}, fmt.Errorf("gguf: type %q: want auto, f32, f16, bf16 or q8_0", s)
}

// ConvertFile converts the Hugging Face Llama directory dir (config.json,
// safetensors, tokenizer.json, tokenizer_config.json) into the GGUF file
// out.
func ConvertFile(dir, out string, opt Options) error {
	w, closeSet, err := Convert(dir, opt)
	if err != nil {
		return err
	}
	defer closeSet()
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	if _, err := w.WriteTo(f); err != nil {
		f.Close()
		os.Remove(out)
		return err
	}
	return f.Close()
}

// Convert prepares the GGUF writer for dir: llama architecture metadata,
// the tokenizer, and the tensors under llama.cpp's names, q and k
// permuted to its interleaved RoPE layout (PermuteRoPE). The tensors read
// the checkpoint when written; call closeSet after writing.
func Convert(dir string, opt Options) (w *Writer, closeSet func() error, err error) {
	cfg, err := model.LoadConfig(dir)
	if err != nil {
		return nil, nil, err
	}
	if err := supported(cfg); err != nil {
		return nil, nil, err
	}
	set, err := safetensors.OpenDir(dir)
	if err != nil {
		return nil, nil, err
	}
	defer func() {
		if err != nil {
			set.Close()
		}
	}()
	if opt.Name == "" {
		abs, _ := filepath.Abs(dir)
		opt.Name = filepath.Base(abs)
	}
	w = &Writer{}
	if err := addModelMetadata(w, cfg, opt); err != nil {
		return nil, nil, err
	}
	if err := addTokenizer(w, dir, cfg); err != nil {
		return nil, nil, err
	}
	if err := addTensors(w, set, cfg, opt); err != nil {
		return nil, nil, err
	}
	return w, set.Close, nil
}

// supported refuses what llama.cpp's llama architecture cannot express.
func supported(c *model.Config) error {
	switch {
	case c.ModelType != "llama" && c.ModelType != "mistral":
		return fmt.Errorf("gguf: model_type %q: only llama and mistral convert", c.ModelType)
	case c.AttentionBias || c.OutputBias || c.MLPBias:
		return errors.New("gguf: attention or MLP biases do not convert")
	case c.QKNorm:
		return errors.New("gguf: q/k norms do not convert")
	case c.SlidingWindow > 0:
		return errors.New("gguf: sliding-window attention does not convert")
	case c.RopeScaling.Type != "" && c.RopeScaling.Type != "linear" && c.RopeScaling.Type != "llama3":
		return fmt.Errorf("gguf: rope scaling %q does not convert", c.RopeScaling.Type)
	}
	return nil
}

func fileType(opt Options, set *safetensors.Set) uint32 {
	t := opt.Type
	if opt.Auto {
		t = F32
		if x, ok := set.Tensor("model.embed_tokens.weight"); ok {
			t, _ = fromSafetensors(x.DType)
		}
	}
	switch t {
	case F16:
		return FileMostlyF16
	case BF16:
		return FileMostlyBF16
	case Q8_0:
		return FileMostlyQ8_0
	}
	return FileAllF32
}

func addModelMetadata(w *Writer, c *model.Config, opt Options) error {
	w.Add("general.architecture", "llama")
	w.Add("general.name", opt.Name)
	// file_type is filled in by addTensors, which knows the dtypes.
	w.Add("llama.vocab_size", uint32(c.Vocab))
	w.Add("llama.context_length", uint32(c.MaxPositions))
	w.Add("llama.embedding_length", uint32(c.Hidden))
	w.Add("llama.block_count", uint32(c.Layers))
	w.Add("llama.feed_forward_length", uint32(c.Intermediate))
	w.Add("llama.rope.dimension_count", uint32(c.HeadDim))
	w.Add("llama.attention.head_count", uint32(c.Heads))
	w.Add("llama.attention.head_count_kv", uint32(c.KVHeads))
	if c.HeadDim*c.Heads != c.Hidden {
		w.Add("llama.attention.key_length", uint32(c.HeadDim))
		w.Add("llama.attention.value_length", uint32(c.HeadDim))
	}
	w.Add("llama.rope.freq_base", float32(c.RopeTheta))
	w.Add("llama.attention.layer_norm_rms_epsilon", float32(c.RMSNormEps))
	if c.RopeScaling.Type == "linear" {
		w.Add("llama.rope.scaling.type", "linear")
		w.Add("llama.rope.scaling.factor", float32(c.RopeScaling.Factor))
	}
	return nil
}

// fromSafetensors is the GGUF type of a safetensors float dtype.
func fromSafetensors(d safetensors.DType) (GGMLType, error) {
	switch d {
	case safetensors.F32:
		return F32, nil
	case safetensors.F16:
		return F16, nil
	case safetensors.BF16:
		return BF16, nil
	}
	return 0, fmt.Errorf("gguf: dtype %s does not convert", d)
}

// hfTensor is one output tensor's source.
type hfTensor struct {
	gguf, hf string
	heads    int // > 0: permute rows for RoPE with this many heads
}

func tensorMap(c *model.Config) []hfTensor {
	m := []hfTensor{{gguf: "token_embd.weight", hf: "model.embed_tokens.weight"}}
	for i := range c.Layers {
		p, b := fmt.Sprintf("model.layers.%d.", i), fmt.Sprintf("blk.%d.", i)
		m = append(m,
			hfTensor{gguf: b + "attn_norm.weight", hf: p + "input_layernorm.weight"},
			hfTensor{gguf: b + "attn_q.weight", hf: p + "self_attn.q_proj.weight", heads: c.Heads},
			hfTensor{gguf: b + "attn_k.weight", hf: p + "self_attn.k_proj.weight", heads: c.KVHeads},
			hfTensor{gguf: b + "attn_v.weight", hf: p + "self_attn.v_proj.weight"},
			hfTensor{gguf: b + "attn_output.weight", hf: p + "self_attn.o_proj.weight"},
			hfTensor{gguf: b + "ffn_norm.weight", hf: p + "post_attention_layernorm.weight"},
			hfTensor{gguf: b + "ffn_gate.weight", hf: p + "mlp.gate_proj.weight"},
			hfTensor{gguf: b + "ffn_up.weight", hf: p + "mlp.up_proj.weight"},
			hfTensor{gguf: b + "ffn_down.weight", hf: p + "mlp.down_proj.weight"},
		)
	}
	m = append(m, hfTensor{gguf: "output_norm.weight", hf: "model.norm.weight"})
	if !c.TieWordEmbeddings {
		m = append(m, hfTensor{gguf: "output.weight", hf: "lm_head.weight"})
	}
	return m
}

func addTensors(w *Writer, set *safetensors.Set, c *model.Config, opt Options) error {
	w.Add("general.file_type", fileType(opt, set))
	quantized := false
	if c.RopeScaling.Type == "llama3" {
		f := llama3RopeFactors(c)
		w.AddTensor("rope_freqs.weight", F32, []uint64{uint64(len(f))}, func(out io.Writer) error {
			return binary.Write(out, binary.LittleEndian, f)
		})
	}
	for _, m := range tensorMap(c) {
		t, ok := set.Tensor(m.hf)
		if !ok {
			return fmt.Errorf("gguf: missing tensor %s", m.hf)
		}
		src, err := fromSafetensors(t.DType)
		if err != nil {
			return fmt.Errorf("gguf: %s: %w", m.hf, err)
		}
		dims := make([]uint64, len(t.Shape))
		for i, d := range t.Shape {
			dims[len(dims)-1-i] = uint64(d)
		}
		typ := F32
		if len(t.Shape) == 2 {
			typ = opt.Type
			if opt.Auto {
				typ = src
			}
			if typ == Q8_0 && dims[0]%QK8_0 != 0 {
				typ = F16
			}
		}
		if len(t.Shape) != 1 && len(t.Shape) != 2 {
			return fmt.Errorf("gguf: %s: %d dimensions", m.hf, len(t.Shape))
		}
		quantized = quantized || typ == Q8_0
		w.AddTensor(m.gguf, typ, dims, tensorWriter(t, src, typ, m.heads))
	}
	if quantized {
		w.Add("general.quantization_version", uint32(2))
	}
	return nil
}

// tensorWriter writes t converted from src to typ, rows permuted for RoPE
// when heads > 0. Unpermuted tensors stream in chunks of rows.
func tensorWriter(t *safetensors.Tensor, src, typ GGMLType, heads int) func(io.Writer) error {
	return func(out io.Writer) error {
		raw := t.Bytes()
		cols := t.Shape[len(t.Shape)-1]
		rows := t.NumElements() / cols
		if heads > 0 {
			var err error
			if raw, err = PermuteRoPE(raw, heads, cols*t.DType.Size()); err != nil {
				return err
			}
		}
		if typ == src {
			_, err := out.Write(raw)
			return err
		}
		rowBytes := cols * t.DType.Size()
		chunk := max(1, (1<<22)/cols)
		f := make([]float32, chunk*cols)
		var enc []byte
		for r := 0; r < rows; r += chunk {
			n := min(chunk, rows-r)
			x := f[:n*cols]
			decode(x, src, raw[r*rowBytes:(r+n)*rowBytes])
			size, err := typ.RowBytes(uint64(n * cols))
			if err != nil {
				return err
			}
			enc = slices.Grow(enc[:0], int(size))[:size]
			if err := encode(enc, typ, x); err != nil {
				return err
			}
			if _, err := out.Write(enc); err != nil {
				return err
			}
		}
		return nil
	}
}

func decode(dst []float32, src GGMLType, b []byte) {
	for i := range dst {
		switch src {
		case F32:
			dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		case F16:
			dst[i] = safetensors.F16ToFloat32(binary.LittleEndian.Uint16(b[2*i:]))
		case BF16:
			dst[i] = safetensors.BF16ToFloat32(binary.LittleEndian.Uint16(b[2*i:]))
		}
	}
}

func encode(dst []byte, typ GGMLType, x []float32) error {
	switch typ {
	case F32:
		for i, v := range x {
			binary.LittleEndian.PutUint32(dst[4*i:], math.Float32bits(v))
		}
	case F16:
		for i, v := range x {
			binary.LittleEndian.PutUint16(dst[2*i:], safetensors.Float32ToF16(v))
		}
	case BF16:
		for i, v := range x {
			binary.LittleEndian.PutUint16(dst[2*i:], safetensors.Float32ToBF16(v))
		}
	case Q8_0:
		return QuantizeQ8_0(dst, x)
	default:
		return fmt.Errorf("gguf: cannot encode %v", typ)
	}
	return nil
}

// llama3RopeFactors is rope_freqs.weight for Llama 3.1's rope scaling, as
// convert_hf_to_gguf computes it: per frequency pair, 1 for wavelengths
// below original/high_freq_factor, factor above original/low_freq_factor,
// and a smooth blend between. llama.cpp divides each frequency by it.
func llama3RopeFactors(c *model.Config) []float32 {
	s := c.RopeScaling
	low, high, orig := s.LowFreqFactor, s.HighFreqFactor, float64(s.OriginalMaxPositionEmbeddings)
	if low == 0 {
		low = 1
	}
	if high == 0 {
		high = 4
	}
	if orig == 0 {
		orig = 8192
	}
	lowWave, highWave := orig/low, orig/high
	out := make([]float32, c.HeadDim/2)
	for i := range out {
		freq := 1 / math.Pow(c.RopeTheta, float64(2*i)/float64(c.HeadDim))
		wave := 2 * math.Pi / freq
		switch {
		case wave < highWave:
			out[i] = 1
		case wave > lowWave:
			out[i] = float32(s.Factor)
		default:
			smooth := (orig/wave - low) / (high - low)
			out[i] = float32(1 / ((1-smooth)/s.Factor + smooth))
		}
	}
	return out
}

// tokenizerJSON is the part of tokenizer.json the conversion reads.
type tokenizerJSON struct {
	AddedTokens []struct {
		ID      int    `json:"id"`
		Content string `json:"content"`
		Special bool   `json:"special"`
	} `json:"added_tokens"`
	PreTokenizer json.RawMessage `json:"pre_tokenizer"`
	Model        struct {
		Type         string          `json:"type"`
		Vocab        map[string]int  `json:"vocab"`
		Merges       json.RawMessage `json:"merges"`
		UnkToken     *string         `json:"unk_token"`
		ByteFallback bool            `json:"byte_fallback"`
	} `json:"model"`
}

// Token types (tokenizer.ggml.token_type).
const (
	tokNormal      = 1
	tokUnknown     = 2
	tokControl     = 3
	tokUserDefined = 4
	tokUnused      = 5
	tokByte        = 6
)

// IsByteLevel reports whether a tokenizer.json pre_tokenizer contains a
// ByteLevel step (alone or in a Sequence): GPT-2-style byte-level BPE,
// llama.cpp's "gpt2" tokenizer model. Otherwise the tokenizer is
// SentencePiece-style BPE (a ▁ normalizer or Metaspace, byte fallback),
// llama.cpp's "llama" model. The tokenizer package draws the same line.
func IsByteLevel(preTokenizer json.RawMessage) bool {
	var c struct {
		Type          string            `json:"type"`
		PreTokenizers []json.RawMessage `json:"pretokenizers"`
	}
	if len(preTokenizer) == 0 || json.Unmarshal(preTokenizer, &c) != nil {
		return false
	}
	if c.Type == "ByteLevel" {
		return true
	}
	return slices.ContainsFunc(c.PreTokenizers, IsByteLevel)
}

// regexes lists the Split patterns' regular expressions in a
// pre_tokenizer.
func regexes(raw json.RawMessage) []string {
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return nil
	}
	var out []string
	var walk func(any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			if r, ok := x["Regex"].(string); ok {
				out = append(out, r)
			}
			for _, e := range x {
				walk(e)
			}
		case []any:
			for _, e := range x {
				walk(e)
			}
		}
	}
	walk(v)
	return out
}

// parseMerges reads merges as "a b" strings or [a, b] pairs.
func parseMerges(raw json.RawMessage) ([][2]string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var strs []string
	if err := json.Unmarshal(raw, &strs); err == nil {
		out := make([][2]string, len(strs))
		for i, s := range strs {
			a, b, ok := strings.Cut(s, " ")
			if !ok {
				return nil, fmt.Errorf("gguf: merge %q has no space", s)
			}
			out[i] = [2]string{a, b}
		}
		return out, nil
	}
	var pairs [][2]string
	if err := json.Unmarshal(raw, &pairs); err != nil {
		return nil, fmt.Errorf("gguf: merges: %w", err)
	}
	return pairs, nil
}

// llama3Pre is the start of Llama 3's pre-tokenizer split pattern.
const llama3Pre = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}`

func addTokenizer(w *Writer, dir string, c *model.Config) error {
	data, err := os.ReadFile(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		return fmt.Errorf("gguf: %w", err)
	}
	var tj tokenizerJSON
	if err := json.Unmarshal(data, &tj); err != nil {
		return fmt.Errorf("gguf: tokenizer.json: %w", err)
	}
	if tj.Model.Type != "BPE" {
		return fmt.Errorf("gguf: tokenizer model %q: only BPE converts", tj.Model.Type)
	}
	merges, err := parseMerges(tj.Model.Merges)
	if err != nil {
		return err
	}
	n := c.Vocab
	tokens := make([]string, n)
	types := make([]int32, n)
	set := make([]bool, n)
	put := func(tok string, id, typ int) error {
		if id < 0 || id >= n {
			return fmt.Errorf("gguf: token %q has id %d outside the model's vocabulary of %d", tok, id, n)
		}
		tokens[id], types[id], set[id] = tok, int32(typ), true
		return nil
	}
	byteLevel := IsByteLevel(tj.PreTokenizer)
	for tok, id := range tj.Model.Vocab {
		typ := tokNormal
		if !byteLevel && len(tok) == 6 && strings.HasPrefix(tok, "<0x") && strings.HasSuffix(tok, ">") {
			typ = tokByte
		}
		if tj.Model.UnkToken != nil && tok == *tj.Model.UnkToken {
			typ = tokUnknown
		}
		if err := put(tok, id, typ); err != nil {
			return err
		}
	}
	for _, a := range tj.AddedTokens {
		typ := tokUserDefined
		if a.Special {
			typ = tokControl
		}
		if tj.Model.UnkToken != nil && a.Content == *tj.Model.UnkToken {
			typ = tokUnknown
		}
		if err := put(a.Content, a.ID, typ); err != nil {
			return err
		}
	}
	for i := range tokens {
		if !set[i] {
			tokens[i], types[i] = fmt.Sprintf("[PAD%d]", i), tokUnused
		}
	}
	if byteLevel {
		w.Add("tokenizer.ggml.model", "gpt2")
		pre := "default"
		if slices.ContainsFunc(regexes(tj.PreTokenizer), func(r string) bool { return strings.HasPrefix(r, llama3Pre) }) {
			pre = "llama-bpe"
		}
		w.Add("tokenizer.ggml.pre", pre)
		w.Add("tokenizer.ggml.tokens", Strings(tokens))
		w.Add("tokenizer.ggml.token_type", Int32s(types))
		ms := make([]string, len(merges))
		for i, m := range merges {
			ms[i] = m[0] + " " + m[1]
		}
		w.Add("tokenizer.ggml.merges", Strings(ms))
	} else {
		// SentencePiece merges by score: a merged token scores minus the
		// rank of the first merge that makes it, so llama.cpp's SPM
		// tokenizer applies merges in the BPE order. Tokens no merge makes
		// score below every merge.
		scores := make([]float32, n)
		for i := range scores {
			scores[i] = -1e9
			if len([]rune(tokens[i])) == 1 {
				scores[i] = 0
			}
		}
		for rank := len(merges) - 1; rank >= 0; rank-- {
			if id, ok := tj.Model.Vocab[merges[rank][0]+merges[rank][1]]; ok && id < n {
				scores[id] = -float32(rank)
			}
		}
		w.Add("tokenizer.ggml.model", "llama")
		w.Add("tokenizer.ggml.tokens", Strings(tokens))
		w.Add("tokenizer.ggml.scores", Float32s(scores))
		w.Add("tokenizer.ggml.token_type", Int32s(types))
	}
	if c.BOS >= 0 {
		w.Add("tokenizer.ggml.bos_token_id", uint32(c.BOS))
	}
	if len(c.EOS) > 0 {
		w.Add("tokenizer.ggml.eos_token_id", uint32(c.EOS[0]))
	}
	if tj.Model.UnkToken != nil {
		if id, ok := tj.Model.Vocab[*tj.Model.UnkToken]; ok {
			w.Add("tokenizer.ggml.unknown_token_id", uint32(id))
		}
	}
	cfgData, err := os.ReadFile(filepath.Join(dir, "tokenizer_config.json"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("gguf: %w", err)
	}
	if err == nil {
		var tc struct {
			AddBOS       *bool           `json:"add_bos_token"`
			AddEOS       *bool           `json:"add_eos_token"`
			ChatTemplate json.RawMessage `json:"chat_template"`
		}
		if err := json.Unmarshal(cfgData, &tc); err != nil {
			return fmt.Errorf("gguf: tokenizer_config.json: %w", err)
		}
		if tc.AddBOS != nil {
			w.Add("tokenizer.ggml.add_bos_token", *tc.AddBOS)
		}
		if tc.AddEOS != nil {
			w.Add("tokenizer.ggml.add_eos_token", *tc.AddEOS)
		}
		var tmpl string
		if json.Unmarshal(tc.ChatTemplate, &tmpl) == nil && tmpl != "" {
			w.Add("tokenizer.chat_template", tmpl)
		}
	}
	return nil
}
