package model_test

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/gearboxlm/gearbox/internal/fixture"
	"github.com/gearboxlm/gearbox/model"
	"github.com/gearboxlm/gearbox/model/safetensors"
	"github.com/gearboxlm/gearbox/tensor"
)

// rowsEqual reports whether two matrices hold the same values.
func rowsEqual(a, b *tensor.Weights) bool {
	n, k := a.Shape()
	if bn, bk := b.Shape(); bn != n || bk != k {
		return false
	}
	ra, rb := make([]float32, k), make([]float32, k)
	for j := range n {
		a.Row(j, ra)
		b.Row(j, rb)
		for i := range ra {
			if ra[i] != rb[i] {
				return false
			}
		}
	}
	return true
}

// TestLoadStorage: the default keeps each matrix in the checkpoint's dtype
// as a view of the memory-mapped file; --dtype converts and int8 quantizes
// into the process's own memory, and the files are closed then.
func TestLoadStorage(t *testing.T) {
	bf := writeDir(t, fixture.Spec{Heads: 4, KVHeads: 2, DType: "BF16", Seed: 5})
	f32 := writeDir(t, fixture.Spec{Heads: 4, KVHeads: 2, Seed: 5})
	ref, err := model.Load(bf, model.Options{DType: model.Float32})
	if err != nil {
		t.Fatal(err)
	}
	mmap := runtime.GOOS == "linux" // little-endian, memory-mapped
	for _, c := range []struct {
		name  string
		dir   string
		opts  model.Options
		want  tensor.DType
		views bool
	}{
		{"bf16 auto", bf, model.Options{}, tensor.BF16, mmap},
		{"bf16 as float32", bf, model.Options{DType: model.Float32}, tensor.F32, false},
		{"bf16 as bfloat16", bf, model.Options{DType: model.BFloat16}, tensor.BF16, mmap},
		{"bf16 as float16", bf, model.Options{DType: model.Float16}, tensor.F16, false},
		{"bf16 int8", bf, model.Options{Quantization: model.Int8}, tensor.Q8_0, false},
		{"f32 auto", f32, model.Options{}, tensor.F32, mmap},
		{"f32 as bfloat16", f32, model.Options{DType: model.BFloat16}, tensor.BF16, false},
		{"f32 int8", f32, model.Options{DType: model.Float32, Quantization: model.Int8}, tensor.Q8_0, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			m, err := model.Load(c.dir, c.opts)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			w := m.Weights
			if d, ok := w.MatrixDType(); d != c.want || !ok {
				t.Fatalf("matrices %v (uniform %v), want %v", d, ok, c.want)
			}
			if w.Views() != c.views {
				t.Fatalf("Views() = %v, want %v", w.Views(), c.views)
			}
			if w.LMHead == nil || len(w.Norm) != m.Config.Hidden {
				t.Fatal("LM head or norm missing")
			}
			if c.dir == bf && (c.want == tensor.BF16 || c.want == tensor.F32) && !rowsEqual(w.Layers[1].WUp, ref.Weights.Layers[1].WUp) {
				t.Fatal("up_proj values differ from the float32 load of the same file")
			}
			var want int64
			for _, mat := range w.Matrices() {
				n, k := mat.Shape()
				want += int64(tensor.BytesFor(c.want, n, k))
			}
			for _, v := range w.Vectors() {
				want += 4 * int64(len(v))
			}
			if w.Bytes() != want {
				t.Fatalf("Bytes() = %d, want %d", w.Bytes(), want)
			}
		})
	}
	if _, err := model.Load(bf, model.Options{DType: model.BFloat16, Quantization: model.Int8}); err == nil || !strings.Contains(err.Error(), "use dtype auto or float32") {
		t.Fatalf("int8 with bfloat16: %v", err)
	}
}

// TestLoadUnalignedCopies: tensors whose data is not aligned to their
// element size (a file read into memory at an odd address) are copied
// rather than viewed, with the same values.
func TestLoadUnalignedCopies(t *testing.T) {
	dir := writeDir(t, fixture.Spec{Heads: 4, KVHeads: 2, DType: "BF16", Seed: 6})
	data, err := os.ReadFile(filepath.Join(dir, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := model.LoadConfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, len(data)+1)
	copy(buf[1:], data)
	load := func(blob []byte) *model.Weights {
		f, err := safetensors.Parse("m", blob)
		if err != nil {
			t.Fatal(err)
		}
		set, err := safetensors.NewSet(f)
		if err != nil {
			t.Fatal(err)
		}
		w, err := model.LoadWeights(cfg, set, model.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	odd, even := load(buf[1:]), load(data)
	if odd.Views() || !even.Views() {
		t.Fatalf("views: odd address %v, aligned %v", odd.Views(), even.Views())
	}
	if d, _ := odd.MatrixDType(); d != tensor.BF16 || !rowsEqual(odd.Embed, even.Embed) || !rowsEqual(odd.Layers[0].WDown, even.Layers[0].WDown) {
		t.Fatal("the copies differ from the views")
	}
}
