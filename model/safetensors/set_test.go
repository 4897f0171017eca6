package safetensors

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// ramp returns n values 0, 1, 2, ... scaled by s (exact in BF16 for small n).
func ramp(n int, s float32) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(i) * s
	}
	return v
}

func modelTensors() []WriteTensor {
	return []WriteTensor{
		{Name: "model.embed_tokens.weight", DType: BF16, Shape: []int{8, 4}, Data: ramp(32, 1)},
		{Name: "model.layers.0.input_layernorm.weight", DType: F32, Shape: []int{4}, Data: ramp(4, 0.5)},
		{Name: "model.layers.0.self_attn.q_proj.weight", DType: BF16, Shape: []int{4, 4}, Data: ramp(16, -1)},
		{Name: "model.layers.0.mlp.up_proj.weight", DType: F16, Shape: []int{6, 4}, Data: ramp(24, 0.25)},
		{Name: "model.layers.1.input_layernorm.weight", DType: F32, Shape: []int{4}, Data: ramp(4, 2)},
		{Name: "model.norm.weight", DType: F32, Shape: []int{4}, Data: ramp(4, 1)},
		{Name: "lm_head.weight", DType: BF16, Shape: []int{8, 4}, Data: ramp(32, 3)},
	}
}

// checkSet asserts that s holds exactly tensors, with their values.
func checkSet(t *testing.T, s *Set, tensors []WriteTensor) {
	t.Helper()
	var want []string
	for _, wt := range tensors {
		want = append(want, wt.Name)
		got, ok := s.Tensor(wt.Name)
		if !ok {
			t.Errorf("tensor %q missing", wt.Name)
			continue
		}
		vals, err := got.Float32()
		if err != nil || !slices.Equal(vals, wt.Data) || !slices.Equal(got.Shape, wt.Shape) || got.DType != wt.DType {
			t.Errorf("tensor %v = %v, %v; want %v", got, vals, err, wt.Data)
		}
	}
	slices.Sort(want)
	if names := s.Names(); !slices.Equal(names, want) {
		t.Errorf("Names() = %v, want %v", names, want)
	}
}

func TestWriteShardedOpenDir(t *testing.T) {
	tensors := modelTensors()
	for shards := 1; shards <= len(tensors); shards++ {
		t.Run(fmt.Sprint(shards), func(t *testing.T) {
			dir := t.TempDir()
			if err := WriteSharded(dir, tensors, shards); err != nil {
				t.Fatal(err)
			}
			s, err := OpenDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			checkSet(t, s, tensors)
			if len(s.Files()) != shards {
				t.Errorf("%d files, want %d", len(s.Files()), shards)
			}
			for i, f := range s.Files() {
				if want := filepath.Join(dir, ShardName(i+1, shards)); f.Name() != want {
					t.Errorf("file %d is %s, want %s", i, f.Name(), want)
				}
				if len(f.Tensors()) == 0 {
					t.Errorf("shard %s is empty", f.Name())
				}
				if md := f.Metadata(); md["format"] != "pt" {
					t.Errorf("shard %s metadata = %v", f.Name(), md)
				}
			}
		})
	}
}

// TestIndexFormat pins the index bytes to what transformers writes:
// json.dumps(index, indent=2, sort_keys=True) + "\n".
func TestIndexFormat(t *testing.T) {
	dir := t.TempDir()
	tensors := []WriteTensor{
		{Name: "b", DType: F32, Shape: []int{2}, Data: []float32{1, 2}},
		{Name: "a", DType: BF16, Shape: []int{3}, Data: []float32{1, 2, 3}},
		{Name: "ñ\"", DType: F16, Shape: []int{1}, Data: []float32{1}},
	}
	if err := WriteSharded(dir, tensors, 2); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(dir, IndexName))
	if err != nil {
		t.Fatal(err)
	}
	want := `{
  "metadata": {
    "total_parameters": 6,
    "total_size": 16
  },
  "weight_map": {
    "a": "model-00002-of-00002.safetensors",
    "b": "model-00001-of-00002.safetensors",
    "\u00f1\"": "model-00002-of-00002.safetensors"
  }
}
`
	if string(got) != want {
		t.Errorf("index =\n%s\nwant\n%s", got, want)
	}
}

func TestSplitShards(t *testing.T) {
	sized := func(sizes ...int) []WriteTensor {
		var ts []WriteTensor
		for i, n := range sizes {
			ts = append(ts, WriteTensor{Name: fmt.Sprint(i), DType: U8, Shape: []int{n}, Raw: make([]byte, n)})
		}
		return ts
	}
	tests := []struct {
		sizes []int
		n     int
		want  []int // tensors per shard
	}{
		{[]int{1, 1, 1, 1}, 2, []int{2, 2}},
		{[]int{1, 1, 1, 1}, 4, []int{1, 1, 1, 1}},
		{[]int{100, 1, 1, 1}, 2, []int{1, 3}},
		{[]int{1, 1, 1, 100}, 2, []int{3, 1}},
		{[]int{1, 1, 1, 100}, 3, []int{2, 1, 1}},
		{[]int{0, 0, 0}, 3, []int{1, 1, 1}},
		{[]int{10, 10, 10, 10, 10, 10}, 3, []int{2, 2, 2}},
	}
	for _, tt := range tests {
		var got []int
		for _, run := range splitShards(sized(tt.sizes...), tt.n) {
			got = append(got, len(run))
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("splitShards(%v, %d) = %v, want %v", tt.sizes, tt.n, got, tt.want)
		}
	}
	if err := WriteSharded(t.TempDir(), sized(1, 1), 3); err == nil {
		t.Error("WriteSharded with more shards than tensors succeeded")
	}
}

func TestOpenDirFallbacks(t *testing.T) {
	tensors := modelTensors()
	t.Run("model.safetensors", func(t *testing.T) {
		dir := t.TempDir()
		if err := WriteFile(filepath.Join(dir, SingleName), tensors, nil); err != nil {
			t.Fatal(err)
		}
		// A stray file is ignored when model.safetensors exists.
		WriteFile(filepath.Join(dir, "other.safetensors"), tensors[:1], nil)
		s, err := OpenDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		checkSet(t, s, tensors)
	})
	t.Run("glob", func(t *testing.T) {
		dir := t.TempDir()
		WriteFile(filepath.Join(dir, "b.safetensors"), tensors[:3], nil)
		WriteFile(filepath.Join(dir, "a.safetensors"), tensors[3:], nil)
		os.WriteFile(filepath.Join(dir, "config.json"), []byte("{}"), 0o644)
		s, err := OpenDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		checkSet(t, s, tensors)
		if f := s.Files(); len(f) != 2 || filepath.Base(f[0].Name()) != "a.safetensors" {
			t.Errorf("files not opened in name order: %v", f)
		}
	})
	t.Run("empty", func(t *testing.T) {
		_, err := OpenDir(t.TempDir())
		if !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("error = %v, want fs.ErrNotExist", err)
		}
	})
}

func TestOpenDirErrors(t *testing.T) {
	tensors := modelTensors()
	shard1, shard2 := ShardName(1, 2), ShardName(2, 2)
	tests := []struct {
		name  string
		setup func(t *testing.T, dir string)
		want  string
	}{
		{"name in two files", func(t *testing.T, dir string) {
			WriteFile(filepath.Join(dir, "a.safetensors"), tensors[:2], nil)
			WriteFile(filepath.Join(dir, "b.safetensors"), tensors[1:3], nil)
		}, `tensor "model.layers.0.input_layernorm.weight" is in both`},
		{"bad file", func(t *testing.T, dir string) {
			os.WriteFile(filepath.Join(dir, "a.safetensors"), []byte("garbage!garbage!"), 0o644)
		}, "a.safetensors: header length"},
		{"index lists missing tensor", func(t *testing.T, dir string) {
			WriteSharded(dir, tensors, 2)
			editIndex(t, dir, `"weight_map": {`, `"weight_map": {"ghost": "`+shard1+`",`)
		}, `weight_map puts tensor "ghost" in ` + shard1 + `, which does not contain it`},
		{"index names wrong shard", func(t *testing.T, dir string) {
			WriteSharded(dir, tensors, 2)
			editIndex(t, dir, `"model.norm.weight": "`+shard2, `"model.norm.weight": "`+shard1)
		}, `weight_map puts tensor "model.norm.weight" in ` + shard1},
		{"tensor missing from index", func(t *testing.T, dir string) {
			WriteSharded(dir, tensors, 2)
			editIndex(t, dir, `"lm_head.weight": "`+shard2+`",`, ``)
		}, `tensor "lm_head.weight" in ` + filepath.Join("DIR", shard2) + ` is missing from weight_map`},
		{"index escapes dir", func(t *testing.T, dir string) {
			WriteSharded(dir, tensors, 2)
			editIndex(t, dir, shard1, "../"+shard1)
		}, "not a file inside the directory"},
		{"index not JSON", func(t *testing.T, dir string) {
			os.WriteFile(filepath.Join(dir, IndexName), []byte("{"), 0o644)
		}, IndexName},
		{"index without weight_map", func(t *testing.T, dir string) {
			os.WriteFile(filepath.Join(dir, IndexName), []byte(`{"metadata":{}}`), 0o644)
		}, "no weight_map entries"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			tt.setup(t, dir)
			_, err := OpenDir(dir)
			want := strings.ReplaceAll(tt.want, "DIR", dir)
			if !errors.Is(err, ErrInvalid) || err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("OpenDir error = %v, want ErrInvalid mentioning %q", err, want)
			}
		})
	}
}

// editIndex replaces old with new in dir's index, which must contain old.
func editIndex(t *testing.T, dir, old, new string) {
	t.Helper()
	path := filepath.Join(dir, IndexName)
	b, err := os.ReadFile(path)
	if err != nil || !strings.Contains(string(b), old) {
		t.Fatalf("index lacks %q (%v)", old, err)
	}
	os.WriteFile(path, []byte(strings.Replace(string(b), old, new, 1)), 0o644)
}

func TestNewSet(t *testing.T) {
	tensors := modelTensors()
	a, _ := Parse("a", encodeFile(t, tensors[:4], nil))
	b, _ := Parse("b", encodeFile(t, tensors[4:], nil))
	s, err := NewSet(a, b)
	if err != nil {
		t.Fatal(err)
	}
	checkSet(t, s, tensors)
	if _, ok := s.Tensor("nope"); ok {
		t.Error("Tensor(nope) found")
	}
	if err := s.Close(); err != nil {
		t.Error(err)
	}
	if _, err := NewSet(a, b, a); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "in both a and a") {
		t.Errorf("NewSet with a file twice: %v", err)
	}
}
