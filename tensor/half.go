package tensor

import (
	"fmt"
	"math"
)

// Half-precision scalars. BF16 is the upper half of a float32 (8 exponent
// bits, 7 mantissa bits); F16 is IEEE 754 binary16 (5 exponent bits, 10
// mantissa bits, subnormals). Narrowing rounds to nearest, ties to even,
// as PyTorch's .to(torch.bfloat16) and .half() do; widening is exact.

// ToBF16 returns the bfloat16 nearest to f (ties to even). Values beyond
// the largest finite bfloat16 round to ±Inf; a NaN stays a (quiet) NaN of
// the same sign.
func ToBF16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 {
		return uint16(b>>16) | 0x40
	}
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}

// FromBF16 returns the float32 whose value is the bfloat16 h (exact).
func FromBF16(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// ToF16 returns the IEEE binary16 nearest to f (ties to even), subnormal
// results included. Values of magnitude 65520 and above round to ±Inf; a
// NaN stays a (quiet) NaN of the same sign.
func ToF16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int(b>>23) & 0xff
	man := b & 0x7fffff
	if exp == 0xff {
		if man == 0 {
			return sign | 0x7c00
		}
		return sign | 0x7e00 | uint16(man>>13)
	}
	e := exp - 127 + 15 // biased binary16 exponent
	switch {
	case e >= 0x1f:
		return sign | 0x7c00
	case e <= 0:
		// Subnormal (or zero) result: the value in units of 2^-24 is
		// man·2^(exp-150+24), shifted right by 14-e.
		if e < -10 {
			return sign
		}
		man |= 0x800000
		shift := uint(14 - e)
		h := man >> shift
		rem := man & (1<<shift - 1)
		half := uint32(1) << (shift - 1)
		if rem > half || rem == half && h&1 == 1 {
			h++ // may carry into the smallest normal, which is correct
		}
		return sign | uint16(h)
	}
	h := uint32(e)<<10 | man>>13
	rem := man & 0x1fff
	if rem > 0x1000 || rem == 0x1000 && h&1 == 1 {
		h++ // may carry into the exponent, up to Inf, which is correct
	}
	return sign | uint16(h)
}

// FromF16 returns the float32 whose value is the binary16 h (exact).
func FromF16(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	man := uint32(h & 0x3ff)
	switch exp {
	case 0x1f:
		return math.Float32frombits(sign | 0x7f800000 | man<<13)
	case 0:
		f := float32(man) * (1.0 / (1 << 24)) // subnormal or zero: exact
		if sign != 0 {
			f = -f
		}
		return f
	}
	return math.Float32frombits(sign | (exp+112)<<23 | man<<13)
}

// EncodeBF16 sets dst[i] = ToBF16(src[i]). The lengths must match.
func EncodeBF16(dst []uint16, src []float32) {
	checkConvert("tensor.EncodeBF16", len(dst), len(src))
	for i, v := range src {
		dst[i] = ToBF16(v)
	}
}

// EncodeF16 sets dst[i] = ToF16(src[i]). The lengths must match.
func EncodeF16(dst []uint16, src []float32) {
	checkConvert("tensor.EncodeF16", len(dst), len(src))
	for i, v := range src {
		dst[i] = ToF16(v)
	}
}

// DecodeBF16 sets dst[i] = FromBF16(src[i]). The lengths must match.
func DecodeBF16(dst []float32, src []uint16) {
	checkConvert("tensor.DecodeBF16", len(dst), len(src))
	decodeBF16(dst, src)
}

// DecodeF16 sets dst[i] = FromF16(src[i]). The lengths must match.
func DecodeF16(dst []float32, src []uint16) {
	checkConvert("tensor.DecodeF16", len(dst), len(src))
	decodeF16(dst, src)
}

func checkConvert(name string, dst, src int) {
	if dst != src {
		panic(fmt.Sprintf("%s: len(dst)=%d != len(src)=%d", name, dst, src))
	}
}

func decodeBF16Go(dst []float32, src []uint16) {
	src = src[:len(dst)]
	for i := range dst {
		dst[i] = math.Float32frombits(uint32(src[i]) << 16)
	}
}

func decodeF16Go(dst []float32, src []uint16) {
	src = src[:len(dst)]
	for i := range dst {
		dst[i] = FromF16(src[i])
	}
}
