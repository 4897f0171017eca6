package safetensors

import (
	"cmp"
	"encoding/binary"
	"errors"
	"slices"
	"strings"
	"testing"
	"unsafe"
)

// FuzzParse feeds arbitrary bytes to Parse. It must never panic, and every
// file it accepts must keep the package invariant: each tensor's bytes lie
// inside the data section, have the size its shape and dtype imply, and
// overlap no other tensor's.
func FuzzParse(f *testing.F) {
	f.Add(encodeFile(f, modelTensors(), map[string]string{"format": "pt"}))
	f.Add(encodeFile(f, []WriteTensor{
		{Name: "s", DType: F16, Data: []float32{1}},
		{Name: "e", DType: BF16, Shape: []int{0}, Data: []float32{}},
		{Name: "i", DType: I32, Shape: []int{2}, Raw: make([]byte, 8)},
	}, nil))
	f.Add(rawFile(`{"a":{"dtype":"U8","shape":[1],"data_offsets":[2,3]},"b":{"dtype":"U8","shape":[2],"data_offsets":[5,7]}}`, 9))
	for _, m := range malformed {
		f.Add(m.data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := Parse("fuzz", data)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %v does not match ErrInvalid", err)
			}
			return
		}
		checkInvariant(t, data, file)
	})
}

// checkInvariant verifies the package invariant for a file parsed from
// data, by address: the views must alias data, not copies of it.
func checkInvariant(t *testing.T, data []byte, file *File) {
	hlen := int(binary.LittleEndian.Uint64(data))
	dataStart := uintptr(unsafe.Pointer(unsafe.SliceData(data))) + uintptr(8+hlen)
	dataSize := len(data) - 8 - hlen
	type span struct{ begin, end int }
	var spans []span
	tensors := file.Tensors()
	if !slices.IsSortedFunc(tensors, func(a, b *Tensor) int { return strings.Compare(a.Name, b.Name) }) {
		t.Fatal("Tensors() not sorted by name")
	}
	for _, tn := range tensors {
		b := tn.Bytes()
		if got, ok := file.Tensor(tn.Name); !ok || got != tn {
			t.Fatalf("Tensor(%q) does not find it", tn.Name)
		}
		if len(b) != tn.NumElements()*tn.DType.Size() || cap(b) != len(b) {
			t.Fatalf("%v: %d bytes (cap %d) for %d elements", tn, len(b), cap(b), tn.NumElements())
		}
		n := 1
		for _, d := range tn.Shape {
			n *= d
		}
		if n != tn.NumElements() {
			t.Fatalf("%v: NumElements %d, shape product %d", tn, tn.NumElements(), n)
		}
		begin, end := tn.DataOffsets()
		if len(b) > 0 {
			addr := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
			if addr < dataStart || addr+uintptr(len(b)) > dataStart+uintptr(dataSize) || int(addr-dataStart) != begin {
				t.Fatalf("%v: view at data offset %d, length %d, outside the %d-byte data section or not at %d", tn, int(addr-dataStart), len(b), dataSize, begin)
			}
			spans = append(spans, span{begin, end})
		}
		if tn.DType.Float() {
			if v, err := tn.Float32(); err != nil || len(v) != tn.NumElements() {
				t.Fatalf("%v: Float32() = %d values, %v", tn, len(v), err)
			}
		} else if _, err := tn.Float32(); !errors.Is(err, ErrUnsupported) {
			t.Fatalf("%v: Float32() error %v, want ErrUnsupported", tn, err)
		}
	}
	slices.SortFunc(spans, func(a, b span) int { return cmp.Compare(a.begin, b.begin) })
	covered := 0
	for i, s := range spans {
		if i > 0 && s.begin < spans[i-1].end {
			t.Fatalf("views [%d, %d) and [%d, %d) overlap", spans[i-1].begin, spans[i-1].end, s.begin, s.end)
		}
		covered += s.end - s.begin
	}
	for _, g := range file.Gaps() {
		covered += g.End - g.Begin
	}
	if covered != dataSize {
		t.Fatalf("tensors and gaps cover %d bytes of a %d-byte data section", covered, dataSize)
	}
}
