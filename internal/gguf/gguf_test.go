package gguf

import (
	"bytes"
	"encoding/binary"
	"io"
	"math"
	"reflect"
	"testing"

	"github.com/gearboxlm/gearbox/model/safetensors"
)

func bytesTensor(b []byte) func(io.Writer) error {
	return func(w io.Writer) error { _, err := w.Write(b); return err }
}

func seqBytes(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i*7)
	}
	return b
}

// TestRoundTrip writes every value type and tensors of every type with
// sizes that are not multiples of the alignment, parses the header back,
// and finds each tensor's bytes at DataOffset + Offset.
func TestRoundTrip(t *testing.T) {
	for _, align := range []int{0, 64} {
		w := &Writer{Alignment: align}
		kvs := []KV{
			{"general.architecture", "llama"},
			{"a.u8", uint8(200)}, {"a.i8", int8(-100)}, {"a.u16", uint16(60000)}, {"a.i16", int16(-30000)},
			{"a.u32", uint32(4e9)}, {"a.i32", int32(-2e9)}, {"a.f32", float32(1.5)}, {"a.bool", true},
			{"a.str", "héllo"}, {"a.u64", uint64(1) << 60}, {"a.i64", int64(-1) << 60}, {"a.f64", math.Pi},
			{"a.strs", Strings([]string{"x", "", "yz"})},
			{"a.f32s", Float32s([]float32{-1, 0.5})},
			{"a.i32s", Int32s([]int32{1, 6, 3})},
		}
		for _, kv := range kvs {
			w.Add(kv.Key, kv.Value)
		}
		data := map[string][]byte{
			"f32":  seqBytes(4*3*5, 1),
			"f16":  seqBytes(2*7, 2),
			"bf16": seqBytes(2*9*2, 3),
			"q8":   seqBytes(BlockQ8_0Len*2*3, 4),
		}
		w.AddTensor("f32", F32, []uint64{3, 5}, bytesTensor(data["f32"]))
		w.AddTensor("f16", F16, []uint64{7}, bytesTensor(data["f16"]))
		w.AddTensor("bf16", BF16, []uint64{9, 2}, bytesTensor(data["bf16"]))
		w.AddTensor("q8", Q8_0, []uint64{64, 3}, bytesTensor(data["q8"]))
		var buf bytes.Buffer
		n, err := w.WriteTo(&buf)
		if err != nil {
			t.Fatal(err)
		}
		file := buf.Bytes()
		if int(n) != len(file) {
			t.Fatalf("WriteTo returned %d, wrote %d", n, len(file))
		}
		if string(file[:4]) != "GGUF" || binary.LittleEndian.Uint32(file[4:]) != 3 {
			t.Fatalf("header % x", file[:8])
		}
		f, err := Read(bytes.NewReader(file))
		if err != nil {
			t.Fatal(err)
		}
		wantAlign := uint64(DefaultAlignment)
		wantKV := kvs
		if align != 0 {
			wantAlign = uint64(align)
			wantKV = append([]KV{{"general.alignment", uint32(align)}}, kvs...)
		}
		if f.Alignment != wantAlign || f.DataOffset%wantAlign != 0 || len(file)%int(wantAlign) != 0 {
			t.Errorf("alignment %d, data at %d, file %d bytes; want multiples of %d", f.Alignment, f.DataOffset, len(file), wantAlign)
		}
		if !reflect.DeepEqual(f.KV, wantKV) {
			t.Errorf("metadata:\n got %v\nwant %v", f.KV, wantKV)
		}
		if len(f.Tensors) != 4 {
			t.Fatalf("%d tensors", len(f.Tensors))
		}
		var end uint64
		for i, ti := range f.Tensors {
			if ti.Name != w.Tensors[i].Name || !reflect.DeepEqual(ti.Dims, w.Tensors[i].Dims) || ti.Type != w.Tensors[i].Type {
				t.Errorf("tensor %d: %+v, wrote %+v", i, ti, w.Tensors[i].TensorInfo)
			}
			if ti.Offset%wantAlign != 0 || ti.Offset < end {
				t.Errorf("tensor %s at %d: unaligned or overlapping (previous ends at %d)", ti.Name, ti.Offset, end)
			}
			size, _ := ti.Bytes()
			at := f.DataOffset + ti.Offset
			if got := file[at : at+size]; !bytes.Equal(got, data[ti.Name]) {
				t.Errorf("tensor %s: data differs", ti.Name)
			}
			for _, b := range file[f.DataOffset+end : at] {
				if b != 0 {
					t.Fatalf("tensor %s: non-zero padding before it", ti.Name)
				}
			}
			end = ti.Offset + size
		}
	}
}

func TestWriterRefuses(t *testing.T) {
	for name, w := range map[string]*Writer{
		"short data":      {Tensors: []Tensor{{TensorInfo{Name: "x", Dims: []uint64{4}, Type: F32}, bytesTensor(make([]byte, 15))}}},
		"q8 row":          {Tensors: []Tensor{{TensorInfo{Name: "x", Dims: []uint64{33}, Type: Q8_0}, bytesTensor(nil)}}},
		"duplicate key":   {KV: []KV{{"a", uint8(1)}, {"a", uint8(2)}}},
		"mixed array":     {KV: []KV{{"a", Array{Elem: TypeInt32, Values: []any{int32(1), uint32(2)}}}}},
		"bad alignment":   {Alignment: 12},
		"unsupported kv":  {KV: []KV{{"a", 3}}},
		"long tensorname": {Tensors: []Tensor{{TensorInfo{Name: string(make([]byte, 65)), Dims: []uint64{1}, Type: F32}, bytesTensor(make([]byte, 4))}}},
	} {
		if _, err := w.WriteTo(io.Discard); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestReadRefuses(t *testing.T) {
	var buf bytes.Buffer
	w := &Writer{KV: []KV{{"k", "v"}}}
	w.AddTensor("t", F32, []uint64{2}, bytesTensor(make([]byte, 8)))
	if _, err := w.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	good := buf.Bytes()
	for i := 0; i < 60; i++ { // every truncation of the header
		if _, err := Read(bytes.NewReader(good[:i])); err == nil {
			t.Errorf("truncated at %d: no error", i)
		}
	}
	bad := bytes.Clone(good)
	bad[0] = 'X'
	if _, err := Read(bytes.NewReader(bad)); err == nil {
		t.Error("bad magic: no error")
	}
	bad = bytes.Clone(good)
	bad[4] = 9
	if _, err := Read(bytes.NewReader(bad)); err == nil {
		t.Error("version 9: no error")
	}
}

// TestQuantizeQ8_0 checks blocks against a hand computation: max |x| =
// 63.5 gives d = 0.5 (fp16 0x3800) and q = 2x, ±0.25 rounds away from
// zero to ±1, and an all-zero block has d = 0 and q = 0.
func TestQuantizeQ8_0(t *testing.T) {
	x := make([]float32, 64)
	for j := range 32 {
		x[j] = float32(j-16) * 0.5
	}
	x[1], x[2], x[31] = 0.25, -0.25, 63.5
	dst := make([]byte, 2*BlockQ8_0Len)
	if err := QuantizeQ8_0(dst, x); err != nil {
		t.Fatal(err)
	}
	want := make([]byte, 2*BlockQ8_0Len)
	want[0], want[1] = 0x00, 0x38
	for j := range 32 {
		want[2+j] = byte(int8(j - 16))
	}
	want[2+1], want[2+2], want[2+31] = 1, 0xff, 127
	if !bytes.Equal(dst, want) {
		t.Errorf("blocks\n got % x\nwant % x", dst, want)
	}
	// A scale that fp16 rounds: max |x| = 1 gives d = 1/127, fp16 0x2008
	// (2⁻⁷·(1+8/1024)); q = 127 at the maximum and the quants use the
	// float32 d.
	y := make([]float32, 32)
	y[0], y[5] = 1, -1
	if err := QuantizeQ8_0(dst[:BlockQ8_0Len], y); err != nil {
		t.Fatal(err)
	}
	if d := binary.LittleEndian.Uint16(dst); d != 0x2008 || int8(dst[2]) != 127 || int8(dst[7]) != -127 {
		t.Errorf("d %#04x, q %d %d", d, int8(dst[2]), int8(dst[7]))
	}
	if err := QuantizeQ8_0(dst[:BlockQ8_0Len], make([]float32, 31)); err == nil {
		t.Error("31 values: no error")
	}
	// Round trip within half a step plus the scale's fp16 rounding (the
	// quants use the float32 d: up to 127·|d - fp16(d)| ≤ 127·2⁻¹¹·d).
	z := make([]float32, 32*8)
	for i := range z {
		z[i] = float32(math.Sin(float64(i)*0.37)) * float32(1+i%5)
	}
	q := make([]byte, 8*BlockQ8_0Len)
	if err := QuantizeQ8_0(q, z); err != nil {
		t.Fatal(err)
	}
	back := make([]float32, len(z))
	DequantizeQ8_0(back, q)
	for b := range 8 {
		d := safetensors.F16ToFloat32(binary.LittleEndian.Uint16(q[b*BlockQ8_0Len:]))
		for j := range 32 {
			i := b*32 + j
			if diff := math.Abs(float64(back[i] - z[i])); diff > float64(d)*(0.5+127.0/2048)+1e-6 {
				t.Fatalf("value %d: %g back as %g (d %g)", i, z[i], back[i], d)
			}
		}
	}
}

func TestPermuteRoPE(t *testing.T) {
	// Two heads of dimension 4, one column: within a head, rows 0 1 2 3
	// (pairs 0–2 and 1–3 in the rotate-half layout) become 0 2 1 3.
	got, err := PermuteRoPE([]int{0, 1, 2, 3, 4, 5, 6, 7}, 2, 1)
	if err != nil {
		t.Fatal(err)
	}
	if want := []int{0, 2, 1, 3, 4, 6, 5, 7}; !reflect.DeepEqual(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	// Head dimension 6, two columns: rows 0..5 → 0 3 1 4 2 5.
	w := []int{0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5}
	got, _ = PermuteRoPE(w, 1, 2)
	if want := []int{0, 0, 3, 3, 1, 1, 4, 4, 2, 2, 5, 5}; !reflect.DeepEqual(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	if _, err := PermuteRoPE([]int{0, 1, 2}, 1, 1); err == nil {
		t.Error("odd head dimension: no error")
	}
}
