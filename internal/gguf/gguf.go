// Package gguf writes and reads GGUF files (version 3), the single-file
// model format of ggml and llama.cpp, so that Gearbox's checkpoints can be
// timed beside llama.cpp on the same weights (scripts/llama-cpp-compare).
//
// Layout (ggml's docs/gguf.md): a header (magic "GGUF", version, tensor
// count, metadata count), the typed metadata key-value pairs, the tensor
// infos (name, dimensions fastest-first, ggml type, offset relative to the
// data section), zero padding to the alignment (general.alignment, 32 by
// default), then the tensor data, each tensor starting at a multiple of
// the alignment. Everything is little-endian.
package gguf

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
)

// Magic is the file's first four bytes.
const Magic = "GGUF"

// Version is the format version written.
const Version = 3

// DefaultAlignment is the data alignment when general.alignment is absent.
const DefaultAlignment = 32

// ValueType is a metadata value's type (gguf_metadata_value_type).
type ValueType uint32

// Metadata value types.
const (
	TypeUint8   ValueType = 0
	TypeInt8    ValueType = 1
	TypeUint16  ValueType = 2
	TypeInt16   ValueType = 3
	TypeUint32  ValueType = 4
	TypeInt32   ValueType = 5
	TypeFloat32 ValueType = 6
	TypeBool    ValueType = 7
	TypeString  ValueType = 8
	TypeArray   ValueType = 9
	TypeUint64  ValueType = 10
	TypeInt64   ValueType = 11
	TypeFloat64 ValueType = 12
)

// GGMLType is a tensor's element type (ggml_type).
type GGMLType uint32

// Tensor types this package writes.
const (
	F32  GGMLType = 0
	F16  GGMLType = 1
	Q8_0 GGMLType = 8
	BF16 GGMLType = 30
)

// Q8_0 blocks: 32 weights as an fp16 scale d and 32 int8 quants q, each
// weight d·q.
const (
	QK8_0        = 32
	BlockQ8_0Len = 2 + QK8_0
)

func (t GGMLType) String() string {
	switch t {
	case F32:
		return "F32"
	case F16:
		return "F16"
	case Q8_0:
		return "Q8_0"
	case BF16:
		return "BF16"
	}
	return fmt.Sprintf("ggml_type(%d)", uint32(t))
}

// RowBytes is the byte size of n consecutive elements of type t (n must be
// a multiple of the block size for block types).
func (t GGMLType) RowBytes(n uint64) (uint64, error) {
	switch t {
	case F32:
		return 4 * n, nil
	case F16, BF16:
		return 2 * n, nil
	case Q8_0:
		if n%QK8_0 != 0 {
			return 0, fmt.Errorf("gguf: Q8_0 row of %d elements is not a multiple of %d", n, QK8_0)
		}
		return n / QK8_0 * BlockQ8_0Len, nil
	}
	return 0, fmt.Errorf("gguf: unsupported tensor type %v", t)
}

// File types (general.file_type): the type of most tensors.
const (
	FileAllF32     = 0
	FileMostlyF16  = 1
	FileMostlyQ8_0 = 7
	FileMostlyBF16 = 32
)

// KV is one metadata pair. Value holds uint8, int8, uint16, int16,
// uint32, int32, float32, bool, string, uint64, int64 or float64, or an
// Array.
type KV struct {
	Key   string
	Value any
}

// Array is a metadata array: Elem is the element type, Values its
// elements (of the Go types KV lists; nested arrays are not written).
type Array struct {
	Elem   ValueType
	Values []any
}

// TensorInfo describes one tensor: Dims are ggml's ne, fastest-varying
// first (a row-major [rows, cols] matrix is Dims {cols, rows}), and Offset
// is relative to the start of the data section.
type TensorInfo struct {
	Name   string
	Dims   []uint64
	Type   GGMLType
	Offset uint64
}

// Elements is the product of Dims.
func (t TensorInfo) Elements() uint64 {
	n := uint64(1)
	for _, d := range t.Dims {
		n *= d
	}
	return n
}

// Bytes is the tensor's data size.
func (t TensorInfo) Bytes() (uint64, error) {
	if len(t.Dims) == 0 {
		return t.Type.RowBytes(1)
	}
	row, err := t.Type.RowBytes(t.Dims[0])
	if err != nil {
		return 0, fmt.Errorf("gguf: tensor %q: %w", t.Name, err)
	}
	return row * (t.Elements() / t.Dims[0]), nil
}

// Tensor is a tensor to write: its info (Offset is assigned by the
// Writer) and a function that writes exactly Bytes() bytes of data.
type Tensor struct {
	TensorInfo
	Write func(w io.Writer) error
}

// Writer collects metadata and tensors and writes a GGUF file.
type Writer struct {
	Alignment int // 0: DefaultAlignment; otherwise written as general.alignment
	KV        []KV
	Tensors   []Tensor
}

// Add appends a metadata pair.
func (w *Writer) Add(key string, v any) { w.KV = append(w.KV, KV{key, v}) }

// AddTensor appends a tensor.
func (w *Writer) AddTensor(name string, typ GGMLType, dims []uint64, write func(io.Writer) error) {
	w.Tensors = append(w.Tensors, Tensor{TensorInfo{Name: name, Dims: dims, Type: typ}, write})
}

// Strings makes a string array.
func Strings(s []string) Array {
	a := Array{Elem: TypeString, Values: make([]any, len(s))}
	for i, v := range s {
		a.Values[i] = v
	}
	return a
}

// Float32s makes a float32 array.
func Float32s(s []float32) Array {
	a := Array{Elem: TypeFloat32, Values: make([]any, len(s))}
	for i, v := range s {
		a.Values[i] = v
	}
	return a
}

// Int32s makes an int32 array.
func Int32s(s []int32) Array {
	a := Array{Elem: TypeInt32, Values: make([]any, len(s))}
	for i, v := range s {
		a.Values[i] = v
	}
	return a
}

func (w *Writer) alignment() uint64 {
	if w.Alignment > 0 {
		return uint64(w.Alignment)
	}
	return DefaultAlignment
}

// Layout assigns every tensor's Offset and returns the data section's
// size (the last tensor unpadded).
func (w *Writer) Layout() (uint64, error) {
	align := w.alignment()
	if align%8 != 0 {
		return 0, fmt.Errorf("gguf: alignment %d is not a multiple of 8", align)
	}
	var off uint64
	for i := range w.Tensors {
		t := &w.Tensors[i]
		if len(t.Name) > 64 {
			return 0, fmt.Errorf("gguf: tensor name %q is longer than 64 bytes", t.Name)
		}
		n, err := t.Bytes()
		if err != nil {
			return 0, err
		}
		off = alignUp(off, align)
		t.Offset = off
		off += n
	}
	return off, nil
}

func alignUp(x, a uint64) uint64 { return (x + a - 1) / a * a }

// countWriter counts the bytes written through it.
type countWriter struct {
	w *bufio.Writer
	n uint64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += uint64(n)
	return n, err
}

// WriteTo writes the file: header, metadata, tensor infos, padding and
// every tensor's data at its aligned offset.
func (w *Writer) WriteTo(out io.Writer) (int64, error) {
	kvs := w.KV
	if w.Alignment > 0 {
		kvs = append([]KV{{"general.alignment", uint32(w.Alignment)}}, kvs...)
	}
	if _, err := w.Layout(); err != nil {
		return 0, err
	}
	cw := &countWriter{w: bufio.NewWriterSize(out, 1<<20)}
	e := &encoder{w: cw}
	e.raw([]byte(Magic))
	e.u32(Version)
	e.u64(uint64(len(w.Tensors)))
	e.u64(uint64(len(kvs)))
	seen := map[string]bool{}
	for _, kv := range kvs {
		if seen[kv.Key] {
			return int64(cw.n), fmt.Errorf("gguf: duplicate key %q", kv.Key)
		}
		seen[kv.Key] = true
		e.str(kv.Key)
		if err := e.value(kv.Value, true); err != nil {
			return int64(cw.n), fmt.Errorf("gguf: key %q: %w", kv.Key, err)
		}
	}
	for _, t := range w.Tensors {
		e.str(t.Name)
		e.u32(uint32(len(t.Dims)))
		for _, d := range t.Dims {
			e.u64(d)
		}
		e.u32(uint32(t.Type))
		e.u64(t.Offset)
	}
	if e.err != nil {
		return int64(cw.n), e.err
	}
	align := w.alignment()
	start := alignUp(cw.n, align)
	if err := pad(cw, start-cw.n); err != nil {
		return int64(cw.n), err
	}
	for _, t := range w.Tensors {
		if err := pad(cw, start+t.Offset-cw.n); err != nil {
			return int64(cw.n), err
		}
		want, _ := t.Bytes()
		before := cw.n
		if err := t.Write(cw); err != nil {
			return int64(cw.n), fmt.Errorf("gguf: tensor %q: %w", t.Name, err)
		}
		if got := cw.n - before; got != want {
			return int64(cw.n), fmt.Errorf("gguf: tensor %q: wrote %d bytes, want %d", t.Name, got, want)
		}
	}
	// Pad the file to the alignment, as ggml's writer does.
	if err := pad(cw, alignUp(cw.n, align)-cw.n); err != nil {
		return int64(cw.n), err
	}
	return int64(cw.n), cw.w.Flush()
}

var zeros [4096]byte

func pad(w io.Writer, n uint64) error {
	for n > 0 {
		k := min(n, uint64(len(zeros)))
		if _, err := w.Write(zeros[:k]); err != nil {
			return err
		}
		n -= k
	}
	return nil
}

type encoder struct {
	w   io.Writer
	err error
	buf [8]byte
}

func (e *encoder) raw(b []byte) {
	if e.err == nil {
		_, e.err = e.w.Write(b)
	}
}

func (e *encoder) u32(v uint32) {
	binary.LittleEndian.PutUint32(e.buf[:4], v)
	e.raw(e.buf[:4])
}

func (e *encoder) u64(v uint64) {
	binary.LittleEndian.PutUint64(e.buf[:8], v)
	e.raw(e.buf[:8])
}

func (e *encoder) str(s string) {
	e.u64(uint64(len(s)))
	e.raw([]byte(s))
}

// typeOf is the value type of a Go metadata value.
func typeOf(v any) (ValueType, error) {
	switch v.(type) {
	case uint8:
		return TypeUint8, nil
	case int8:
		return TypeInt8, nil
	case uint16:
		return TypeUint16, nil
	case int16:
		return TypeInt16, nil
	case uint32:
		return TypeUint32, nil
	case int32:
		return TypeInt32, nil
	case float32:
		return TypeFloat32, nil
	case bool:
		return TypeBool, nil
	case string:
		return TypeString, nil
	case Array:
		return TypeArray, nil
	case uint64:
		return TypeUint64, nil
	case int64:
		return TypeInt64, nil
	case float64:
		return TypeFloat64, nil
	}
	return 0, fmt.Errorf("unsupported metadata value type %T", v)
}

// value writes v, preceded by its type when typed is true (array elements
// are not).
func (e *encoder) value(v any, typed bool) error {
	t, err := typeOf(v)
	if err != nil {
		return err
	}
	if typed {
		e.u32(uint32(t))
	}
	switch x := v.(type) {
	case uint8:
		e.raw([]byte{x})
	case int8:
		e.raw([]byte{byte(x)})
	case uint16:
		binary.LittleEndian.PutUint16(e.buf[:2], x)
		e.raw(e.buf[:2])
	case int16:
		binary.LittleEndian.PutUint16(e.buf[:2], uint16(x))
		e.raw(e.buf[:2])
	case uint32:
		e.u32(x)
	case int32:
		e.u32(uint32(x))
	case float32:
		e.u32(math.Float32bits(x))
	case bool:
		b := byte(0)
		if x {
			b = 1
		}
		e.raw([]byte{b})
	case string:
		e.str(x)
	case uint64:
		e.u64(x)
	case int64:
		e.u64(uint64(x))
	case float64:
		e.u64(math.Float64bits(x))
	case Array:
		if x.Elem == TypeArray {
			return errors.New("nested arrays are not supported")
		}
		e.u32(uint32(x.Elem))
		e.u64(uint64(len(x.Values)))
		for i, el := range x.Values {
			if et, err := typeOf(el); err != nil || et != x.Elem {
				return fmt.Errorf("array element %d is %T, not of the array's type %d", i, el, x.Elem)
			}
			if err := e.value(el, false); err != nil {
				return err
			}
		}
	}
	return e.err
}
