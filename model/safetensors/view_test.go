package safetensors

import (
	"path/filepath"
	"testing"
)

func TestViews(t *testing.T) {
	path := filepath.Join(t.TempDir(), "v.safetensors")
	vals := []float32{1, -2, 0.5, 3}
	if err := WriteFile(path, []WriteTensor{
		{Name: "f", DType: F32, Shape: []int{4}, Data: vals},
		{Name: "b", DType: BF16, Shape: []int{4}, Data: vals},
		{Name: "h", DType: F16, Shape: []int{2, 2}, Data: vals},
	}, nil); err != nil {
		t.Fatal(err)
	}
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ft, _ := f.Tensor("f")
	if v, ok := ft.Float32View(); !ok || len(v) != 4 || v[1] != -2 {
		t.Fatalf("F32 view %v, %v", v, ok)
	}
	if _, ok := ft.Uint16View(); ok {
		t.Fatal("F32 tensor has a 16-bit view")
	}
	for _, name := range []string{"b", "h"} {
		tt, _ := f.Tensor(name)
		v, ok := tt.Uint16View()
		if !ok || len(v) != 4 {
			t.Fatalf("%s: view %v, %v", name, v, ok)
		}
		c := make([]uint16, 4)
		if err := tt.ReadUint16(c); err != nil {
			t.Fatal(err)
		}
		for i := range c {
			if c[i] != v[i] {
				t.Fatalf("%s: copy %v, view %v", name, c, v)
			}
		}
		if _, ok := tt.Float32View(); ok {
			t.Fatalf("%s: 16-bit tensor has an F32 view", name)
		}
	}
	bt, _ := f.Tensor("b")
	v, _ := bt.Uint16View()
	if BF16ToFloat32(v[2]) != 0.5 {
		t.Fatalf("BF16 view value %v", BF16ToFloat32(v[2]))
	}
	if err := ft.ReadUint16(make([]uint16, 4)); err == nil {
		t.Fatal("ReadUint16 of an F32 tensor succeeded")
	}
}

// TestEvict: a tensor's data reads back unchanged after Evict, mapped or
// not.
func TestEvict(t *testing.T) {
	path := filepath.Join(t.TempDir(), "e.safetensors")
	vals := make([]float32, 10000)
	for i := range vals {
		vals[i] = float32(i)
	}
	if err := WriteFile(path, []WriteTensor{{Name: "w", DType: F32, Shape: []int{len(vals)}, Data: vals}}, nil); err != nil {
		t.Fatal(err)
	}
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tt, _ := f.Tensor("w")
	before, _ := tt.Float32()
	tt.Evict()
	after, _ := tt.Float32()
	for i := range before {
		if before[i] != after[i] || after[i] != vals[i] {
			t.Fatalf("value %d: %v before Evict, %v after, want %v", i, before[i], after[i], vals[i])
		}
	}
}
