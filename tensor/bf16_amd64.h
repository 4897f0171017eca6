// Encodings of the AVX-512 BF16 instructions, which Go's assembler does
// not know, for the kernels of bf16gemm_amd64.s and simd_amd64.s. Register
// operands are numbers 0-31 of the Z registers.

// EVEX512(pp, op, s2, s1, dst) writes the 512-bit EVEX form of the 0F38
// instruction op with prefix bits pp (W0, no masking, register operands):
// ModRM.reg = dst, EVEX.vvvv = s1, ModRM.rm = s2.
#define EVEX512(pp, op, s2, s1, dst) \
	BYTE $0x62; \
	BYTE $((((1-(((dst)>>3)&1))<<7) | ((1-(((s2)>>4)&1))<<6) | ((1-(((s2)>>3)&1))<<5) | ((1-(((dst)>>4)&1))<<4) | 2)); \
	BYTE $(((15-((s1)&15))<<3) | 4 | (pp)); \
	BYTE $(0x40 | ((1-(((s1)>>4)&1))<<3)); \
	BYTE $(op); \
	BYTE $(0xC0 | (((dst)&7)<<3) | ((s2)&7))

// DPBF16(s2, s1, dst) is VDPBF16PS Z(s2), Z(s1), Z(dst): for each of the
// 16 lanes, dst += s1.lo·s2.lo + s1.hi·s2.hi, where lo and hi are the
// lane's two bfloat16 (EVEX.512.F3.0F38.W0 52 /r).
#define DPBF16(s2, s1, dst) EVEX512(2, 0x52, s2, s1, dst)

// CVT2BF16(s2, s1, dst) is VCVTNE2PS2BF16 Z(s2), Z(s1), Z(dst): the 16
// floats of s2 rounded to bfloat16 (ties to even) into dst's words 0-15,
// s1's into words 16-31 (EVEX.512.F2.0F38.W0 72 /r).
#define CVT2BF16(s2, s1, dst) EVEX512(3, 0x72, s2, s1, dst)
