package model

import (
	"strings"
	"testing"

	"github.com/gearboxlm/gearbox/tensor"
)

func TestParseDType(t *testing.T) {
	for in, want := range map[string]DType{
		"auto": DTypeAuto, "": DTypeAuto, "float32": Float32, "float": Float32,
		"float16": Float16, "half": Float16, "bfloat16": BFloat16, "BFloat16": BFloat16,
	} {
		got, err := ParseDType(in)
		if err != nil || got != want {
			t.Errorf("ParseDType(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	if _, err := ParseDType("fp8"); err == nil {
		t.Error("ParseDType(fp8) succeeded")
	}
	for d, size := range map[DType]int{DTypeAuto: 0, Float32: 4, Float16: 2, BFloat16: 2} {
		if d.Size() != size {
			t.Errorf("%v.Size() = %d, want %d", d, d.Size(), size)
		}
		if back, err := ParseDType(d.String()); err != nil || back != d {
			t.Errorf("ParseDType(%q) = %v, %v", d.String(), back, err)
		}
	}
	for d, want := range map[DType]tensor.DType{DTypeAuto: tensor.F32, Float32: tensor.F32, Float16: tensor.F16, BFloat16: tensor.BF16} {
		if d.Tensor() != want {
			t.Errorf("%v.Tensor() = %v, want %v", d, d.Tensor(), want)
		}
	}
}

func TestResolveDType(t *testing.T) {
	for torch, want := range map[string]DType{"bfloat16": BFloat16, "float16": Float16, "float32": Float16, "": Float16} {
		c := &Config{TorchDtype: torch}
		if got := c.ResolveDType(DTypeAuto); got != want {
			t.Errorf("torch_dtype %q: auto = %v, want %v", torch, got, want)
		}
		if got := c.ResolveDType(Float32); got != Float32 {
			t.Errorf("torch_dtype %q: float32 resolved to %v", torch, got)
		}
	}
}

func TestRoundAndTensors(t *testing.T) {
	v := []float32{1, 1 + 1.0/256, 1 + 3.0/512, 65519, 1e-8}
	BFloat16.Round(v)
	if v[0] != 1 || v[1] != 1+1.0/128 && v[1] != 1 || v[2] != 1+1.0/128 {
		t.Errorf("bfloat16 rounding: %v", v)
	}
	h := []float32{1 + 1.0/4096, 65519, 2049}
	Float16.Round(h)
	if h[0] != 1 || h[2] != 2048 {
		t.Errorf("float16 rounding: %v", h)
	}
	f := []float32{1 + 1.0/4096}
	Float32.Round(f)
	if f[0] != 1+1.0/4096 {
		t.Errorf("float32 rounding changed %v", f)
	}

	c := &Config{Hidden: 4, Intermediate: 8, Layers: 2, Heads: 2, KVHeads: 1, HeadDim: 2, Vocab: 10, TieWordEmbeddings: true}
	w := &Weights{}
	n := 0
	for _, b := range Bindings(c, w) {
		size := 1
		for _, d := range b.Shape {
			size *= d
		}
		if (b.Mat != nil) == (b.Dst != nil) {
			t.Fatalf("%s: binding sets both or neither of Mat and Dst", b.Name)
		}
		if b.Mat != nil {
			*b.Mat = tensor.NewWeights(tensor.BF16, b.Shape[0], b.Shape[1])
		} else {
			*b.Dst = make([]float32, size)
		}
		n += size
	}
	w.LMHead = w.Embed
	got := 0
	for _, m := range w.Matrices() {
		r, k := m.Shape()
		got += r * k
	}
	for _, v := range w.Vectors() {
		got += len(v)
	}
	if got != n || int64(n) != c.NumParams() {
		t.Errorf("Matrices and Vectors cover %d elements, bindings %d, NumParams %d", got, n, c.NumParams())
	}
	// 328 matrix elements in BF16, 20 norm elements in float32.
	if b := w.Bytes(); b != 2*328+4*20 {
		t.Errorf("Bytes = %d, want %d", b, 2*328+4*20)
	}
	if d, ok := w.MatrixDType(); d != tensor.BF16 || !ok {
		t.Errorf("MatrixDType = %v, %v", d, ok)
	}
}

func TestParseQuantizationAndStorage(t *testing.T) {
	for in, want := range map[string]Quantization{"": NoQuantization, "none": NoQuantization, "int8": Int8, "Q8_0": Int8} {
		if got, err := ParseQuantization(in); err != nil || got != want {
			t.Errorf("ParseQuantization(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	if _, err := ParseQuantization("fp8"); err == nil || !strings.Contains(err.Error(), "int8 (alias q8_0)") {
		t.Errorf("ParseQuantization(fp8): %v", err)
	}
	for _, c := range []struct {
		o    Options
		src  tensor.DType
		want tensor.DType
	}{
		{Options{}, tensor.BF16, tensor.BF16},
		{Options{}, tensor.F16, tensor.F16},
		{Options{}, tensor.F32, tensor.F32},
		{Options{DType: Float32}, tensor.BF16, tensor.F32},
		{Options{DType: BFloat16}, tensor.F32, tensor.BF16},
		{Options{DType: Float16}, tensor.BF16, tensor.F16},
		{Options{Quantization: Int8}, tensor.BF16, tensor.Q8_0},
		{Options{DType: Float32, Quantization: Int8}, tensor.F32, tensor.Q8_0},
	} {
		if got := c.o.Storage(c.src); got != c.want {
			t.Errorf("%+v: Storage(%v) = %v, want %v", c.o, c.src, got, c.want)
		}
	}
	for _, d := range []DType{BFloat16, Float16} {
		if err := (Options{DType: d, Quantization: Int8}).Check(); err == nil || !strings.Contains(err.Error(), "use dtype auto or float32") {
			t.Errorf("int8 with %v: %v", d, err)
		}
	}
	if err := (Options{DType: Float32, Quantization: Int8}).Check(); err != nil {
		t.Error(err)
	}
}
