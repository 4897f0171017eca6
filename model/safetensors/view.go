package safetensors

import (
	"encoding/binary"
	"fmt"
	"unsafe"
)

// Typed views of a tensor's data, for loaders that keep weights in the
// file's dtype: no copy, the memory of the (memory-mapped) file itself.
// They exist only where the machine's byte order is little-endian and the
// data is aligned to its element size; otherwise ok is false and the
// caller copies (ReadFloat32, ReadUint16). Like Bytes, a view is
// read-only (writing to a mapped file's view faults) and valid until the
// File is closed.

// Float32View returns an F32 tensor's values as a view of the file.
func (t *Tensor) Float32View() (v []float32, ok bool) {
	if t.DType != F32 || !viewable(t.data, 4) {
		return nil, false
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(&t.data[0])), t.n), true
}

// Uint16View returns an F16 or BF16 tensor's raw 16-bit values (the bits
// of each binary16 or bfloat16) as a view of the file.
func (t *Tensor) Uint16View() (v []uint16, ok bool) {
	if (t.DType != F16 && t.DType != BF16) || !viewable(t.data, 2) {
		return nil, false
	}
	return unsafe.Slice((*uint16)(unsafe.Pointer(&t.data[0])), t.n), true
}

// ReadUint16 copies an F16 or BF16 tensor's raw 16-bit values into dst,
// whose length must equal NumElements.
func (t *Tensor) ReadUint16(dst []uint16) error {
	if t.DType != F16 && t.DType != BF16 {
		return fmt.Errorf("safetensors: %s: tensor %q: %w: %s has no 16-bit values (only F16, BF16)", t.file, t.Name, ErrUnsupported, t.DType)
	}
	if len(dst) != t.n || len(t.data) != 2*t.n {
		return fmt.Errorf("safetensors: %s: tensor %q: destination holds %d values, tensor has %d", t.file, t.Name, len(dst), t.n)
	}
	for i := range dst {
		dst[i] = binary.LittleEndian.Uint16(t.data[2*i:])
	}
	return nil
}

func viewable(b []byte, align uintptr) bool {
	return nativeLittleEndian && len(b) > 0 && uintptr(unsafe.Pointer(&b[0]))%align == 0
}
