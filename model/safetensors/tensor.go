package safetensors

import (
	"fmt"
	"strconv"
	"strings"
)

// Tensor is a view of one tensor in a File. Its fields and data are
// read-only: they alias the file's memory and are shared by every caller.
// A Tensor stays valid until its File is closed.
type Tensor struct {
	Name  string
	DType DType
	Shape []int // row-major; empty for a scalar

	file   string // file name, for errors
	mapped bool   // data lies in a memory-mapped file (Open on Linux)
	n      int    // number of elements, product of Shape
	begin  int    // data_offsets relative to the data section
	data   []byte // exactly n·DType.Size() bytes inside the file
}

// NumElements is the product of Shape (1 for a scalar, 0 if any dimension
// is 0).
func (t *Tensor) NumElements() int { return t.n }

// Bytes returns the raw little-endian data, NumElements·DType.Size() bytes.
// It is a view into the file: do not modify it or use it after Close.
func (t *Tensor) Bytes() []byte { return t.data }

// File returns the name of the file the tensor was read from.
func (t *Tensor) File() string { return t.file }

// DataOffsets returns the tensor's [begin, end) byte range relative to the
// start of its file's data section, as recorded in the header.
func (t *Tensor) DataOffsets() (begin, end int) { return t.begin, t.begin + len(t.data) }

// String describes the tensor as name dtype[shape], e.g.
// `model.norm.weight BF16[4096]`.
func (t *Tensor) String() string {
	dims := make([]string, len(t.Shape))
	for i, d := range t.Shape {
		dims[i] = strconv.Itoa(d)
	}
	return fmt.Sprintf("%s %s[%s]", t.Name, t.DType, strings.Join(dims, " "))
}

// Float32 returns the values converted to a new float32 slice. It fails
// with ErrUnsupported unless DType is F32, F16 or BF16.
func (t *Tensor) Float32() ([]float32, error) {
	if !t.DType.Float() {
		return nil, t.unsupported()
	}
	dst := make([]float32, t.n)
	return dst, t.ReadFloat32(dst)
}

// ReadFloat32 converts the values into dst, whose length must equal
// NumElements. It fails with ErrUnsupported unless DType is F32, F16 or
// BF16, and allocates nothing.
func (t *Tensor) ReadFloat32(dst []float32) error {
	if !t.DType.Float() {
		return t.unsupported()
	}
	if len(dst) != t.n {
		return fmt.Errorf("safetensors: %s: tensor %q: destination holds %d values, tensor has %d", t.file, t.Name, len(dst), t.n)
	}
	if len(t.data) != t.n*t.DType.Size() {
		return fmt.Errorf("safetensors: %s: tensor %q: %w: %d data bytes for %d %s values", t.file, t.Name, ErrInvalid, len(t.data), t.n, t.DType)
	}
	switch t.DType {
	case F32:
		decodeF32(dst, t.data)
	case F16:
		decodeF16(dst, t.data)
	case BF16:
		decodeBF16(dst, t.data)
	}
	return nil
}

func (t *Tensor) unsupported() error {
	return fmt.Errorf("safetensors: %s: tensor %q: %w: %s cannot be converted to float32 (only F32, F16, BF16)", t.file, t.Name, ErrUnsupported, t.DType)
}
