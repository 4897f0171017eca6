package gguf

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/gearboxlm/gearbox/model/safetensors"
)

// QuantizeQ8_0 encodes src (a multiple of 32 values) as llama.cpp's Q8_0
// blocks into dst (len(src)/32·34 bytes), the way ggml's
// quantize_row_q8_0_ref does: per block of 32, d = max|x|/127 in float32,
// q = roundf(x·(1/d)) (ties away from zero; 0 when d = 0), and d stored as
// the nearest fp16 (ties to even). Each block is d (2 bytes, little-endian)
// followed by the 32 quants.
func QuantizeQ8_0(dst []byte, src []float32) error {
	if len(src)%QK8_0 != 0 {
		return fmt.Errorf("gguf: Q8_0: %d values are not a multiple of %d", len(src), QK8_0)
	}
	if len(dst) != len(src)/QK8_0*BlockQ8_0Len {
		return fmt.Errorf("gguf: Q8_0: %d bytes for %d values", len(dst), len(src))
	}
	for b := 0; b < len(src)/QK8_0; b++ {
		x := src[b*QK8_0 : (b+1)*QK8_0]
		out := dst[b*BlockQ8_0Len : (b+1)*BlockQ8_0Len]
		var amax float32
		for _, v := range x {
			amax = max(amax, float32(math.Abs(float64(v))))
		}
		d := amax / 127
		var id float32
		if d != 0 {
			id = 1 / d
		}
		binary.LittleEndian.PutUint16(out, safetensors.Float32ToF16(d))
		for j, v := range x {
			out[2+j] = byte(int8(math.Round(float64(v * id))))
		}
	}
	return nil
}

// DequantizeQ8_0 decodes Q8_0 blocks into dst.
func DequantizeQ8_0(dst []float32, src []byte) {
	for b := range len(dst) / QK8_0 {
		blk := src[b*BlockQ8_0Len:]
		d := safetensors.F16ToFloat32(binary.LittleEndian.Uint16(blk))
		for j := range QK8_0 {
			dst[b*QK8_0+j] = d * float32(int8(blk[2+j]))
		}
	}
}

// PermuteRoPE reorders the rows of a q or k projection (rows = heads ·
// headDim, row-major, cols values per row) from Hugging Face's rotate-half
// RoPE layout, where a head's dimension j pairs with j + headDim/2, to the
// interleaved layout llama.cpp's llama architecture expects, where 2i pairs
// with 2i+1. It is convert_hf_to_gguf's LlamaModel.permute: view the rows
// as (heads, 2, headDim/2), swap the last two axes; so row h·headDim +
// 2i + s of the result is row h·headDim + s·headDim/2 + i of w. For k,
// heads is the number of KV heads.
func PermuteRoPE[T any](w []T, heads, cols int) ([]T, error) {
	if heads <= 0 || cols <= 0 || len(w)%(heads*cols) != 0 {
		return nil, fmt.Errorf("gguf: permute: %d values are not %d heads of %d-wide rows", len(w), heads, cols)
	}
	headDim := len(w) / cols / heads
	if headDim%2 != 0 {
		return nil, fmt.Errorf("gguf: permute: odd head dimension %d", headDim)
	}
	half := headDim / 2
	out := make([]T, len(w))
	for h := range heads {
		for i := range half {
			for s := range 2 {
				dst := (h*headDim + 2*i + s) * cols
				src := (h*headDim + s*half + i) * cols
				copy(out[dst:dst+cols], w[src:src+cols])
			}
		}
	}
	return out, nil
}
