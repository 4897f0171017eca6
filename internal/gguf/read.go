package gguf

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
)

// File is a parsed GGUF header: the metadata in file order, the tensor
// infos and where the data section starts.
type File struct {
	Version    uint32
	KV         []KV
	Tensors    []TensorInfo
	Alignment  uint64
	DataOffset uint64 // absolute offset of the data section
}

// Get returns the value of key, if present.
func (f *File) Get(key string) (any, bool) {
	for _, kv := range f.KV {
		if kv.Key == key {
			return kv.Value, true
		}
	}
	return nil, false
}

// Tensor returns the info of the named tensor.
func (f *File) Tensor(name string) (TensorInfo, bool) {
	for _, t := range f.Tensors {
		if t.Name == name {
			return t, true
		}
	}
	return TensorInfo{}, false
}

// Limits on what a header may ask for, so that a corrupt file cannot make
// the reader allocate without bound.
const (
	maxString = 1 << 30
	maxCount  = 1 << 26
	maxDims   = 8
)

// Read parses the header, metadata and tensor infos from r (positioned at
// the file's start); it reads no tensor data.
func Read(r io.Reader) (*File, error) {
	d := &decoder{r: bufio.NewReaderSize(r, 1<<16)}
	magic := d.bytes(4)
	if d.err == nil && string(magic) != Magic {
		return nil, fmt.Errorf("gguf: bad magic %q", magic)
	}
	f := &File{Version: d.u32(), Alignment: DefaultAlignment}
	if d.err == nil && f.Version != 2 && f.Version != 3 {
		return nil, fmt.Errorf("gguf: unsupported version %d", f.Version)
	}
	nt, nkv := d.u64(), d.u64()
	if d.err == nil && (nt > maxCount || nkv > maxCount) {
		return nil, fmt.Errorf("gguf: %d tensors, %d keys: too many", nt, nkv)
	}
	for i := uint64(0); i < nkv && d.err == nil; i++ {
		key := d.str()
		v := d.value(ValueType(d.u32()), 0)
		f.KV = append(f.KV, KV{key, v})
		if key == "general.alignment" {
			a, ok := v.(uint32)
			if !ok || a == 0 || a%8 != 0 {
				return nil, fmt.Errorf("gguf: bad general.alignment %v", v)
			}
			f.Alignment = uint64(a)
		}
	}
	for i := uint64(0); i < nt && d.err == nil; i++ {
		t := TensorInfo{Name: d.str()}
		nd := d.u32()
		if nd > maxDims {
			return nil, fmt.Errorf("gguf: tensor %q has %d dimensions", t.Name, nd)
		}
		for j := uint32(0); j < nd; j++ {
			t.Dims = append(t.Dims, d.u64())
		}
		t.Type = GGMLType(d.u32())
		t.Offset = d.u64()
		f.Tensors = append(f.Tensors, t)
	}
	if d.err != nil {
		return nil, fmt.Errorf("gguf: %w", d.err)
	}
	f.DataOffset = alignUp(d.n, f.Alignment)
	for _, t := range f.Tensors {
		if t.Offset%f.Alignment != 0 {
			return nil, fmt.Errorf("gguf: tensor %q at offset %d is not aligned to %d", t.Name, t.Offset, f.Alignment)
		}
	}
	return f, nil
}

type decoder struct {
	r   *bufio.Reader
	n   uint64
	err error
}

func (d *decoder) bytes(n uint64) []byte {
	if d.err != nil {
		return nil
	}
	if n > maxString {
		d.err = fmt.Errorf("string of %d bytes: too long", n)
		return nil
	}
	b := make([]byte, n)
	_, d.err = io.ReadFull(d.r, b)
	if errors.Is(d.err, io.EOF) {
		d.err = io.ErrUnexpectedEOF
	}
	d.n += n
	return b
}

func (d *decoder) u8() uint8 {
	b := d.bytes(1)
	if d.err != nil {
		return 0
	}
	return b[0]
}

func (d *decoder) u16() uint16 {
	b := d.bytes(2)
	if d.err != nil {
		return 0
	}
	return binary.LittleEndian.Uint16(b)
}

func (d *decoder) u32() uint32 {
	b := d.bytes(4)
	if d.err != nil {
		return 0
	}
	return binary.LittleEndian.Uint32(b)
}

func (d *decoder) u64() uint64 {
	b := d.bytes(8)
	if d.err != nil {
		return 0
	}
	return binary.LittleEndian.Uint64(b)
}

func (d *decoder) str() string { return string(d.bytes(d.u64())) }

func (d *decoder) value(t ValueType, depth int) any {
	switch t {
	case TypeUint8:
		return d.u8()
	case TypeInt8:
		return int8(d.u8())
	case TypeUint16:
		return d.u16()
	case TypeInt16:
		return int16(d.u16())
	case TypeUint32:
		return d.u32()
	case TypeInt32:
		return int32(d.u32())
	case TypeFloat32:
		return math.Float32frombits(d.u32())
	case TypeBool:
		b := d.u8()
		if d.err == nil && b > 1 {
			d.err = fmt.Errorf("bool value %d", b)
		}
		return b == 1
	case TypeString:
		return d.str()
	case TypeUint64:
		return d.u64()
	case TypeInt64:
		return int64(d.u64())
	case TypeFloat64:
		return math.Float64frombits(d.u64())
	case TypeArray:
		if depth > 0 {
			d.setErr(errors.New("nested arrays are not supported"))
			return nil
		}
		a := Array{Elem: ValueType(d.u32())}
		n := d.u64()
		if n > maxCount {
			d.setErr(fmt.Errorf("array of %d elements: too long", n))
			return nil
		}
		for i := uint64(0); i < n && d.err == nil; i++ {
			a.Values = append(a.Values, d.value(a.Elem, depth+1))
		}
		return a
	}
	d.setErr(fmt.Errorf("unknown value type %d", t))
	return nil
}

func (d *decoder) setErr(err error) {
	if d.err == nil {
		d.err = err
	}
}
