// Encodings of the AVX-512 BF16 instructions, which Go's assembler does
// not know, for the kernels of bf16gemm_amd64.s and simd_amd64.s. Register
// operands are numbers 0-31 of the Z registers.

// DPBF16(s2, s1, dst) is VDPBF16PS Z(s2), Z(s1), Z(dst): for each of the
// 16 lanes, dst += s1.lo·s2.lo + s1.hi·s2.hi, where lo and hi are the
// lane's two bfloat16 (register numbers 0-31, 512-bit form: EVEX.512.F3.
// 0F38.W0 52 /r with ModRM.reg = dst, EVEX.vvvv = s1, ModRM.rm = s2).
#define DPBF16(s2, s1, dst) \
	BYTE $0x62; \
	BYTE $((((1-(((dst)>>3)&1))<<7) | ((1-(((s2)>>4)&1))<<6) | ((1-(((s2)>>3)&1))<<5) | ((1-(((dst)>>4)&1))<<4) | 2)); \
	BYTE $(((15-((s1)&15))<<3) | 6); \
	BYTE $(0x40 | ((1-(((s1)>>4)&1))<<3)); \
	BYTE $0x52; \
	BYTE $(0xC0 | (((dst)&7)<<3) | ((s2)&7))

// CVT2BF16(s2, s1, dst) is VCVTNE2PS2BF16 Z(s2), Z(s1), Z(dst): the 16
// floats of s2 rounded to bfloat16 (ties to even) into dst's words 0-15,
// s1's into words 16-31 (EVEX.512.F2.0F38.W0 72 /r, operands as DPBF16).
#define CVT2BF16(s2, s1, dst) \
	BYTE $0x62; \
	BYTE $((((1-(((dst)>>3)&1))<<7) | ((1-(((s2)>>4)&1))<<6) | ((1-(((s2)>>3)&1))<<5) | ((1-(((dst)>>4)&1))<<4) | 2)); \
	BYTE $(((15-((s1)&15))<<3) | 7); \
	BYTE $(0x40 | ((1-(((s1)>>4)&1))<<3)); \
	BYTE $0x72; \
	BYTE $(0xC0 | (((dst)&7)<<3) | ((s2)&7))
