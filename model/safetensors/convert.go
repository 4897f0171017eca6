package safetensors

import (
	"encoding/binary"
	"math"
	"math/bits"
	"unsafe"
)

// BF16ToFloat32 converts a bfloat16 bit pattern to float32. The conversion
// is exact for every pattern, NaN payloads included.
func BF16ToFloat32(h uint16) float32 {
	return math.Float32frombits(uint32(h) << 16)
}

// Float32ToBF16 converts f to the nearest bfloat16, rounding ties to even.
// Values beyond the largest finite bfloat16 round to ±Inf; NaN stays NaN
// (quieted, sign and top payload bits kept).
func Float32ToBF16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 {
		return uint16(b>>16) | 0x0040
	}
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}

// F16ToFloat32 converts an IEEE 754 binary16 bit pattern to float32. The
// conversion is exact for every pattern: subnormals are normalized, ±Inf
// stays infinite and NaN payloads are kept.
func F16ToFloat32(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h) & 0x3ff
	switch {
	case exp == 0x1f:
		return math.Float32frombits(sign | 0x7f800000 | mant<<13)
	case exp != 0:
		return math.Float32frombits(sign | (exp+127-15)<<23 | mant<<13)
	case mant == 0:
		return math.Float32frombits(sign)
	}
	// Subnormal: mant·2⁻²⁴. Shift the leading one into the implicit bit.
	shift := uint32(bits.LeadingZeros32(mant) - 21)
	return math.Float32frombits(sign | (127-15+1-shift)<<23 | (mant<<shift)&0x3ff<<13)
}

// Float32ToF16 converts f to the nearest IEEE 754 binary16, rounding ties
// to even, with gradual underflow to subnormals and zero. Values at or
// beyond 65520 in magnitude round to ±Inf; NaN stays NaN (quieted, sign and
// top payload bits kept).
func Float32ToF16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int(b>>23) & 0xff
	mant := b & 0x7fffff
	if exp == 0xff {
		if mant == 0 {
			return sign | 0x7c00
		}
		return sign | 0x7e00 | uint16(mant>>13)
	}
	e := exp - 127 + 15
	if e >= 0x1f {
		return sign | 0x7c00
	}
	if e <= 0 {
		// Result is subnormal (or rounds up to the smallest normal):
		// value = m·2^(e-14) in units of the smallest subnormal 2⁻²⁴.
		if e < -10 {
			return sign // below half the smallest subnormal
		}
		m := mant | 0x800000
		shift := uint(14 - e)
		h := m >> shift
		rem := m & (1<<shift - 1)
		half := uint32(1) << (shift - 1)
		if rem > half || rem == half && h&1 == 1 {
			h++
		}
		return sign | uint16(h)
	}
	h := uint32(e)<<10 | mant>>13
	rem := mant & 0x1fff
	if rem > 0x1000 || rem == 0x1000 && h&1 == 1 {
		h++ // a carry into the exponent is correct, up to Inf
	}
	return sign | uint16(h)
}

// nativeLittleEndian reports whether this machine stores integers least
// significant byte first, so F32 data can be copied without swapping.
var nativeLittleEndian = func() bool {
	x := uint16(1)
	return *(*byte)(unsafe.Pointer(&x)) == 1
}()

// decodeF32 fills dst from little-endian F32 bytes; len(src) == 4·len(dst).
func decodeF32(dst []float32, src []byte) {
	if len(dst) == 0 {
		return
	}
	if nativeLittleEndian {
		copy(unsafe.Slice((*byte)(unsafe.Pointer(&dst[0])), 4*len(dst)), src)
		return
	}
	src = src[:4*len(dst)]
	for i := range dst {
		dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:]))
	}
}

// decodeBF16 fills dst from little-endian BF16 bytes; len(src) == 2·len(dst).
// The main loop widens four values from one 8-byte load; reslicing both
// sides each step lets the compiler drop the bounds checks.
func decodeBF16(dst []float32, src []byte) {
	src = src[:2*len(dst)]
	for len(src) >= 8 && len(dst) >= 4 {
		x := binary.LittleEndian.Uint64(src)
		dst[0] = math.Float32frombits(uint32(x) << 16)
		dst[1] = math.Float32frombits(uint32(x) & 0xffff0000)
		dst[2] = math.Float32frombits(uint32(x>>32) << 16)
		dst[3] = math.Float32frombits(uint32(x>>32) & 0xffff0000)
		src, dst = src[8:], dst[4:]
	}
	for i := range dst {
		dst[i] = math.Float32frombits(uint32(src[2*i])<<16 | uint32(src[2*i+1])<<24)
	}
}

// decodeF16 fills dst from little-endian F16 bytes; len(src) == 2·len(dst).
// Normal numbers, the common case, are rebiased inline; zeros, subnormals,
// Inf and NaN go through F16ToFloat32.
func decodeF16(dst []float32, src []byte) {
	src = src[:2*len(dst)]
	for i := range dst {
		h := uint32(src[2*i]) | uint32(src[2*i+1])<<8
		if e := h & 0x7c00; e != 0 && e != 0x7c00 {
			dst[i] = math.Float32frombits((h&0x8000)<<16 | (h&0x7fff)<<13 + (127-15)<<23)
			continue
		}
		dst[i] = F16ToFloat32(uint16(h))
	}
}

// encode writes src converted to dtype d (F32, F16 or BF16) into dst, which
// holds exactly len(src)·d.Size() bytes.
func encode(dst []byte, d DType, src []float32) {
	switch d {
	case F32:
		for i, v := range src {
			binary.LittleEndian.PutUint32(dst[4*i:], math.Float32bits(v))
		}
	case F16:
		for i, v := range src {
			binary.LittleEndian.PutUint16(dst[2*i:], Float32ToF16(v))
		}
	case BF16:
		for i, v := range src {
			binary.LittleEndian.PutUint16(dst[2*i:], Float32ToBF16(v))
		}
	}
}
