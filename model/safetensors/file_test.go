package safetensors

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// encodeFile writes tensors with Write and fails the test on error.
func encodeFile(t testing.TB, tensors []WriteTensor, metadata map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := Write(&buf, tensors, metadata); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// rawFile builds a file from a literal header and dataLen zero bytes.
func rawFile(header string, dataLen int) []byte {
	b := make([]byte, 8+len(header)+dataLen)
	binary.LittleEndian.PutUint64(b, uint64(len(header)))
	copy(b[8:], header)
	return b
}

// sameFloat reports whether a and b are the same value, NaNs equal.
func sameFloat(a, b float32) bool {
	return a == b && math.Signbit(float64(a)) == math.Signbit(float64(b)) ||
		math.IsNaN(float64(a)) && math.IsNaN(float64(b))
}

var specials = []float32{
	0, float32(math.Copysign(0, -1)), 1, -1, 0.1, 1.0 / 3, 65504, 65520, 1e-8, -6e-8, 0x1p-24,
	float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()),
	math.MaxFloat32, math.SmallestNonzeroFloat32, 3.14159265, -123456.789,
}

func TestRoundTrip(t *testing.T) {
	tests := []struct {
		dtype DType
		conv  func(float32) float32 // what the stored value reads back as
	}{
		{F32, func(v float32) float32 { return v }},
		{F16, func(v float32) float32 { return F16ToFloat32(Float32ToF16(v)) }},
		{BF16, func(v float32) float32 { return BF16ToFloat32(Float32ToBF16(v)) }},
	}
	for _, tt := range tests {
		t.Run(string(tt.dtype), func(t *testing.T) {
			shape := []int{2, 9}
			data := encodeFile(t, []WriteTensor{
				{Name: "w", DType: tt.dtype, Shape: shape, Data: specials},
				{Name: "scalar", DType: tt.dtype, Data: []float32{2.5}},
				{Name: "empty", DType: tt.dtype, Shape: []int{0, 3}, Data: []float32{}},
			}, map[string]string{"format": "pt", "note": "<&>"})
			f, err := Parse("rt.safetensors", data)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if got := f.Metadata(); got["format"] != "pt" || got["note"] != "<&>" || len(got) != 2 {
				t.Errorf("metadata = %v", got)
			}
			if gaps := f.Gaps(); gaps != nil {
				t.Errorf("gaps = %v, want none", gaps)
			}
			var names []string
			for _, tensor := range f.Tensors() {
				names = append(names, tensor.Name)
			}
			if !slices.Equal(names, []string{"empty", "scalar", "w"}) {
				t.Errorf("Tensors() names = %v, want sorted", names)
			}
			w, ok := f.Tensor("w")
			if !ok {
				t.Fatal("tensor w missing")
			}
			if w.DType != tt.dtype || !slices.Equal(w.Shape, shape) || w.NumElements() != 18 || len(w.Bytes()) != 18*tt.dtype.Size() {
				t.Fatalf("w = %v with %d elements, %d bytes", w, w.NumElements(), len(w.Bytes()))
			}
			got, err := w.Float32()
			if err != nil {
				t.Fatal(err)
			}
			for i, v := range specials {
				if want := tt.conv(v); !sameFloat(got[i], want) {
					t.Errorf("element %d: wrote %v, read %v, want %v", i, v, got[i], want)
				}
			}
			s, _ := f.Tensor("scalar")
			if v, err := s.Float32(); err != nil || len(s.Shape) != 0 || len(v) != 1 || v[0] != 2.5 {
				t.Errorf("scalar = %v %v (shape %v)", v, err, s.Shape)
			}
			e, _ := f.Tensor("empty")
			if v, err := e.Float32(); err != nil || len(v) != 0 || e.NumElements() != 0 {
				t.Errorf("empty = %v %v", v, err)
			}
		})
	}
}

// TestWriteLayout pins the exact bytes of the reference writer's layout:
// metadata first, widest dtype first, header padded with spaces.
func TestWriteLayout(t *testing.T) {
	data := encodeFile(t, []WriteTensor{
		{Name: "b", DType: BF16, Shape: []int{1, 2}, Data: []float32{1, -2}},
		{Name: "a", DType: F32, Shape: []int{2}, Data: []float32{1, 0.5}},
		{Name: "c", DType: F16, Shape: []int{1}, Data: []float32{1}},
		{Name: "i", DType: I64, Shape: []int{1}, Raw: []byte{7, 0, 0, 0, 0, 0, 0, 0}},
	}, map[string]string{"format": "pt"})
	header := `{"__metadata__":{"format":"pt"},` +
		`"i":{"dtype":"I64","shape":[1],"data_offsets":[0,8]},` +
		`"a":{"dtype":"F32","shape":[2],"data_offsets":[8,16]},` +
		`"b":{"dtype":"BF16","shape":[1,2],"data_offsets":[16,20]},` +
		`"c":{"dtype":"F16","shape":[1],"data_offsets":[20,22]}}`
	header += strings.Repeat(" ", (8-len(header)%8)%8)
	want := rawFile(header, 0)
	want = append(want, 7, 0, 0, 0, 0, 0, 0, 0)
	want = append(want, 0, 0, 0x80, 0x3f, 0, 0, 0, 0x3f)
	want = append(want, 0x80, 0x3f, 0x00, 0xc0)
	want = append(want, 0x00, 0x3c)
	if !bytes.Equal(data, want) {
		t.Errorf("Write produced\n%q\nwant\n%q", data, want)
	}
}

func TestConvertErrors(t *testing.T) {
	data := encodeFile(t, []WriteTensor{
		{Name: "ids", DType: I64, Shape: []int{2}, Raw: make([]byte, 16)},
		{Name: "x", DType: F32, Shape: []int{3}, Data: []float32{1, 2, 3}},
	}, nil)
	f, err := Parse("conv.safetensors", data)
	if err != nil {
		t.Fatal(err)
	}
	ids, _ := f.Tensor("ids")
	if len(ids.Bytes()) != 16 {
		t.Errorf("ids bytes = %d, want 16", len(ids.Bytes()))
	}
	_, err = ids.Float32()
	if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "I64") || !strings.Contains(err.Error(), `"ids"`) {
		t.Errorf("I64 Float32() error = %v, want ErrUnsupported naming dtype and tensor", err)
	}
	x, _ := f.Tensor("x")
	if err := x.ReadFloat32(make([]float32, 2)); err == nil || !strings.Contains(err.Error(), "destination holds 2 values, tensor has 3") {
		t.Errorf("short ReadFloat32 error = %v", err)
	}
	dst := make([]float32, 3)
	if err := x.ReadFloat32(dst); err != nil || !slices.Equal(dst, []float32{1, 2, 3}) {
		t.Errorf("ReadFloat32 = %v, %v", dst, err)
	}
	if s := x.String(); s != "x F32[3]" {
		t.Errorf("String() = %q", s)
	}
	if f.Metadata() != nil {
		t.Errorf("Metadata() = %v, want nil", f.Metadata())
	}
}

func TestWriteErrors(t *testing.T) {
	tests := []struct {
		name    string
		tensors []WriteTensor
		want    string
	}{
		{"empty name", []WriteTensor{{DType: F32, Data: []float32{1}}}, "empty name"},
		{"reserved", []WriteTensor{{Name: "__metadata__", DType: F32, Data: []float32{1}}}, "reserved"},
		{"duplicate", []WriteTensor{{Name: "a", DType: F32, Data: []float32{1}}, {Name: "a", DType: F32, Data: []float32{1}}}, "duplicate name"},
		{"unknown dtype", []WriteTensor{{Name: "a", DType: "F12", Data: []float32{1}}}, `unknown dtype "F12"`},
		{"count", []WriteTensor{{Name: "a", DType: F16, Shape: []int{2, 2}, Data: []float32{1}}}, "Data has 1 values, shape [2 2] needs 4"},
		{"negative", []WriteTensor{{Name: "a", DType: F32, Shape: []int{-1}, Data: []float32{}}}, "negative dimension"},
		{"overflow", []WriteTensor{{Name: "a", DType: F32, Shape: []int{math.MaxInt / 2, 4}}}, "overflows"},
		{"data as I32", []WriteTensor{{Name: "a", DType: I32, Data: []float32{1}}}, "cannot be written as I32"},
		{"raw size", []WriteTensor{{Name: "a", DType: I32, Shape: []int{2}, Raw: []byte{1}}}, "Raw has 1 bytes"},
		{"both", []WriteTensor{{Name: "a", DType: F32, Data: []float32{1}, Raw: make([]byte, 4)}}, "both Data and Raw"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			err := Write(&buf, tt.tensors, nil)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Write error = %v, want it to mention %q", err, tt.want)
			}
			if buf.Len() != 0 {
				t.Errorf("Write wrote %d bytes before failing", buf.Len())
			}
		})
	}
}

// malformed is shared with FuzzParse as seeds.
var malformed = []struct {
	name   string
	data   []byte
	tensor string // tensor the error must name, if any
	want   string // text the error must contain
}{
	{"empty file", nil, "", "0 bytes, shorter than the 8-byte header length"},
	{"7 bytes", []byte{1, 2, 3, 4, 5, 6, 7}, "", "7 bytes, shorter"},
	{"header past end", append(binary.LittleEndian.AppendUint64(nil, 100), "{}"...), "", "header length 100 exceeds the 2 bytes"},
	{"header over cap", binary.LittleEndian.AppendUint64(nil, 1<<40), "", "exceeds the 104857600-byte limit"},
	{"invalid JSON", rawFile(`{"a":`, 0), "", "header is not a valid JSON object: unexpected EOF"},
	{"header array", rawFile(`[]`, 0), "", "expected a JSON object, found an array"},
	{"trailing garbage", rawFile(`{} {}`, 0), "", "trailing data (an object) after the object"},
	{"entry not object", rawFile(`{"w":5}`, 0), "w", "entry is not a valid JSON object"},
	{"entry null", rawFile(`{"w":null}`, 0), "w", "found null"},
	{"missing fields", rawFile(`{"w":{"dtype":"F32"}}`, 0), "w", "entry lacks shape, data_offsets"},
	{"unknown dtype", rawFile(`{"w":{"dtype":"Q7","shape":[1],"data_offsets":[0,1]}}`, 1), "w", `unknown dtype "Q7"`},
	{"dtype not string", rawFile(`{"w":{"dtype":4,"shape":[1],"data_offsets":[0,4]}}`, 4), "w", "dtype is not a string: 4"},
	{"sub-byte dtype", rawFile(`{"w":{"dtype":"F4","shape":[2],"data_offsets":[0,1]}}`, 1), "w", "dtype F4 packs several values per byte"},
	{"negative dim", rawFile(`{"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}}`, 4), "w", "element 0 is negative (-1)"},
	{"fractional dim", rawFile(`{"w":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}}`, 4), "w", "element 0 (1.5) is not an integer"},
	{"exponent dim", rawFile(`{"w":{"dtype":"F32","shape":[1e1],"data_offsets":[0,40]}}`, 40), "w", "(1e1) is not an integer"},
	{"string dim", rawFile(`{"w":{"dtype":"F32","shape":["1"],"data_offsets":[0,4]}}`, 4), "w", "element 0 is a string, not an integer"},
	{"huge dim", rawFile(`{"w":{"dtype":"F32","shape":[18446744073709551616],"data_offsets":[0,4]}}`, 4), "w", "out of range"},
	{"shape overflow", rawFile(`{"w":{"dtype":"F32","shape":[2147483647,2147483647,2147483647],"data_offsets":[0,4]}}`, 4), "w", "overflows the element count"},
	{"byte overflow", rawFile(`{"w":{"dtype":"F64","shape":[1073741824,1073741824,4],"data_offsets":[0,4]}}`, 4), "w", "overflows"},
	{"too many dims", rawFile(`{"w":{"dtype":"F32","shape":[`+strings.Repeat("1,", 64)+`1],"data_offsets":[0,4]}}`, 4), "w", "more than 64 elements"},
	{"shape not array", rawFile(`{"w":{"dtype":"F32","shape":{},"data_offsets":[0,4]}}`, 4), "w", "bad shape: expected an array, found an object"},
	{"three offsets", rawFile(`{"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4,8]}}`, 8), "w", "data_offsets is not two integers: more than 2 elements"},
	{"one offset", rawFile(`{"w":{"dtype":"F32","shape":[1],"data_offsets":[4]}}`, 8), "w", "data_offsets is not two integers: got 1"},
	{"negative offset", rawFile(`{"w":{"dtype":"F32","shape":[1],"data_offsets":[-4,0]}}`, 8), "w", "element 0 is negative (-4)"},
	{"descending offsets", rawFile(`{"w":{"dtype":"F32","shape":[1],"data_offsets":[8,4]}}`, 8), "w", "data_offsets [8, 4] are not ascending"},
	{"offsets past data", rawFile(`{"w":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}}`, 8), "w", "data_offsets [8, 12] lie outside the 8-byte data section"},
	{"length mismatch", rawFile(`{"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}`, 8), "w", "span 8 bytes, but shape [3] of F32 needs 12"},
	{"overlap", rawFile(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, 8), "b", `data_offsets [4, 8] overlap tensor "a" at [0, 8]`},
	{"duplicate name", rawFile(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, 8), "a", "duplicate name in header"},
	{"duplicate field", rawFile(`{"a":{"dtype":"F32","dtype":"F16","shape":[1],"data_offsets":[0,4]}}`, 4), "a", `duplicate key "dtype"`},
	{"metadata not object", rawFile(`{"__metadata__":[1]}`, 0), "", "bad __metadata__: expected a JSON object, found an array"},
	{"metadata not string", rawFile(`{"__metadata__":{"k":1}}`, 0), "", `bad __metadata__: value of "k" is not a string`},
}

func TestMalformed(t *testing.T) {
	for _, tt := range malformed {
		t.Run(tt.name, func(t *testing.T) {
			f, err := Parse("bad.safetensors", tt.data)
			if err == nil {
				t.Fatalf("Parse accepted it: %v", f.Tensors())
			}
			msg := err.Error()
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("error %q does not match ErrInvalid", msg)
			}
			if !strings.Contains(msg, "bad.safetensors") {
				t.Errorf("error %q does not name the file", msg)
			}
			if tt.tensor != "" && !strings.Contains(msg, `tensor "`+tt.tensor+`"`) {
				t.Errorf("error %q does not name tensor %q", msg, tt.tensor)
			}
			if !strings.Contains(msg, tt.want) {
				t.Errorf("error %q does not mention %q", msg, tt.want)
			}
		})
	}
}

func TestSubByteIsUnsupported(t *testing.T) {
	_, err := Parse("f4.safetensors", rawFile(`{"w":{"dtype":"F4","shape":[2],"data_offsets":[0,1]}}`, 1))
	if !errors.Is(err, ErrUnsupported) || !errors.Is(err, ErrInvalid) {
		t.Errorf("error = %v, want ErrInvalid and ErrUnsupported", err)
	}
}

func TestAcceptedEdgeCases(t *testing.T) {
	tests := []struct {
		name string
		data []byte
		gaps []Gap
	}{
		{"no tensors", rawFile(`{}`, 0), nil},
		{"padded header", rawFile(`{"w":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}}      `, 2), nil},
		{"metadata null", rawFile(`{"__metadata__":null}`, 0), nil},
		{"extra field ignored", rawFile(`{"w":{"dtype":"U8","shape":[],"data_offsets":[0,1],"x":[1]}}`, 1), nil},
		{"gaps", rawFile(`{"a":{"dtype":"U8","shape":[1],"data_offsets":[2,3]},"b":{"dtype":"U8","shape":[2],"data_offsets":[5,7]}}`, 9),
			[]Gap{{0, 2}, {3, 5}, {7, 9}}},
		{"empty tensor inside another", rawFile(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"e":{"dtype":"F32","shape":[0],"data_offsets":[2,2]}}`, 4), nil},
		{"zero dim beside huge dims", rawFile(`{"z":{"dtype":"F32","shape":[2147483647,0,2147483647],"data_offsets":[0,0]}}`, 0), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := Parse("ok.safetensors", tt.data)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(f.Gaps(), tt.gaps) {
				t.Errorf("Gaps() = %v, want %v", f.Gaps(), tt.gaps)
			}
		})
	}
}

func TestOpen(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "model.safetensors")
	values := []float32{1, 2, 3, 4, 5, 6}
	if err := WriteFile(path, []WriteTensor{
		{Name: "w", DType: BF16, Shape: []int{2, 3}, Data: values},
		{Name: "b", DType: F32, Shape: []int{3}, Data: values[:3]},
	}, map[string]string{"format": "pt"}); err != nil {
		t.Fatal(err)
	}
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if f.Name() != path {
		t.Errorf("Name() = %q", f.Name())
	}
	w, ok := f.Tensor("w")
	if !ok || w.File() != path {
		t.Fatalf("tensor w: %v, file %q", ok, w.File())
	}
	got, err := w.Float32()
	if err != nil || !slices.Equal(got, values) {
		t.Errorf("w = %v, %v", got, err)
	}
	if err := f.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if err := f.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}

	short := filepath.Join(dir, "short.safetensors")
	os.WriteFile(short, []byte{1, 2, 3}, 0o644)
	trunc := filepath.Join(dir, "trunc.safetensors")
	whole, _ := os.ReadFile(path)
	os.WriteFile(trunc, whole[:len(whole)-1], 0o644)
	for _, tt := range []struct {
		path string
		is   error
		want string
	}{
		{filepath.Join(dir, "missing.safetensors"), fs.ErrNotExist, "missing.safetensors"},
		{short, ErrInvalid, "3 bytes, shorter"},
		{trunc, ErrInvalid, "lie outside"},
		{dir, nil, "not a regular file"},
	} {
		_, err := Open(tt.path)
		if err == nil || tt.is != nil && !errors.Is(err, tt.is) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Open(%s) error = %v, want %v mentioning %q", tt.path, err, tt.is, tt.want)
		}
	}
}
