//go:build amd64 && !noasm

#include "textflag.h"
#include "bf16_amd64.h"

// AVX2+FMA kernels. Go operand order: the destination is last and a
// three-operand VEX instruction "OP c, b, a" is Intel's "op a, b, c".
// Vector loops process whole 8-float vectors; the Go callers do the tails.
// Registers R14, R15 and BP are left alone.

// HSUM4 reduces a, b, c, d (8 lanes each) to X(a) lanes 0..3 = their sums.
// It clobbers t1 and t2 (ymm) and leaves the result in the xmm named xa.
#define HSUM4(a, b, c, d, t1, t2, xa, xt) \
	VHADDPS b, a, t1; \
	VHADDPS d, c, t2; \
	VHADDPS t2, t1, a; \
	VEXTRACTF128 $1, a, xt; \
	VADDPS xt, xa, xa

// EXP sets x = exp(x) for 8 lanes (Cephes expf: x = n·ln2 + r, |r| <= ln2/2,
// degree-6 polynomial for e^r, 2^n built in the exponent bits). Inputs are
// clamped to [-88, 88], so exp(x) is 0 below -87.7 and finite above; NaN
// propagates. Needs Y5 = 88, Y6 = -88 and R11 = &expConst; clobbers t1-t3.
#define EXP(x, t1, t2, t3) \
	VMINPS x, Y5, x; \
	VMAXPS x, Y6, x; \
	VMULPS 64(R11), x, t1; \
	VROUNDPS $0, t1, t1; \
	VFNMADD231PS 96(R11), t1, x; \
	VFNMADD231PS 128(R11), t1, x; \
	VMOVUPS 160(R11), t2; \
	VFMADD213PS 192(R11), x, t2; \
	VFMADD213PS 224(R11), x, t2; \
	VFMADD213PS 256(R11), x, t2; \
	VFMADD213PS 288(R11), x, t2; \
	VFMADD213PS 320(R11), x, t2; \
	VMULPS x, x, t3; \
	VFMADD213PS x, t3, t2; \
	VADDPS 352(R11), t2, t2; \
	VCVTPS2DQ t1, t1; \
	VPADDD 384(R11), t1, t1; \
	VPSLLD $23, t1, t1; \
	VMULPS t1, t2, x

// EXPSETUP loads what EXP needs.
#define EXPSETUP \
	LEAQ ·expConst(SB), R11; \
	VMOVUPS 0(R11), Y5; \
	VMOVUPS 32(R11), Y6

// QFMA4 multiplies x row vector xz into accumulators a0-a3 with the four
// w row vectors in Z0-Z3.
#define QFMA4(xz, a0, a1, a2, a3) \
	VFMADD231PS Z0, xz, a0; \
	VFMADD231PS Z1, xz, a1; \
	VFMADD231PS Z2, xz, a2; \
	VFMADD231PS Z3, xz, a3

// QSUM reduces zmm accumulators a0-a3 (registers 16-31) to four sums in
// X0 lanes 0-3 and adds them to off(DX). Clobbers Y0-Y3, Y8-Y11.
#define QSUM(a0, a1, a2, a3, y0, y1, y2, y3, off) \
	VEXTRACTF64X4 $1, a0, Y8; \
	VADDPS y0, Y8, Y0; \
	VEXTRACTF64X4 $1, a1, Y9; \
	VADDPS y1, Y9, Y1; \
	VEXTRACTF64X4 $1, a2, Y10; \
	VADDPS y2, Y10, Y2; \
	VEXTRACTF64X4 $1, a3, Y11; \
	VADDPS y3, Y11, Y3; \
	HSUM4(Y0, Y1, Y2, Y3, Y8, Y9, X0, X8); \
	VADDPS off(DX), X0, X0; \
	VMOVUPS X0, off(DX)

// DOTQUADS is the body of the quad dot kernels: for q < quads, the x rows
// 4q..4q+3 (row stride ldx, 4-byte elements) against the four w rows (row
// stride ldw), k elements a row, 16 at a time (k%16 == 0, k > 0, quads >
// 0), each sum added to out[(4q+i)*4+j]. A w element is 1<<WSHIFT bytes
// and an x element XS times that; LW(r, z) loads the 16 w elements at
// (r)(CX*1) into z as floats. Q4(xz, xn, a0-a3, n0-n3) adds the products
// of x vector xz (register number xn) with the w vectors in Z0-Z3 into
// accumulators a0-a3 (numbers n0-n3). Accumulators: Z16+4i+j for x row
// i, w row j.
#define DOTQUADS(WSHIFT, XS, LW, Q4) \
	MOVQ k+0(FP), BX; \
	SHLQ $WSHIFT, BX; \
	MOVQ x+8(FP), SI; \
	MOVQ quads+24(FP), R13; \
	MOVQ w+32(FP), DI; \
	MOVQ ldw+40(FP), R8; \
	SHLQ $WSHIFT, R8; \
	MOVQ out+48(FP), DX; \
	LEAQ (DI)(R8*1), R9; \
	LEAQ (DI)(R8*2), R10; \
	LEAQ (R9)(R8*2), R11; \
dqquad: \
	MOVQ ldx+16(FP), R12; \
	SHLQ $2, R12; \
	LEAQ (SI)(R12*1), AX; \
	LEAQ (SI)(R12*2), R8; \
	LEAQ (AX)(R12*2), R12; \
	VPXORD Z16, Z16, Z16; \
	VPXORD Z17, Z17, Z17; \
	VPXORD Z18, Z18, Z18; \
	VPXORD Z19, Z19, Z19; \
	VPXORD Z20, Z20, Z20; \
	VPXORD Z21, Z21, Z21; \
	VPXORD Z22, Z22, Z22; \
	VPXORD Z23, Z23, Z23; \
	VPXORD Z24, Z24, Z24; \
	VPXORD Z25, Z25, Z25; \
	VPXORD Z26, Z26, Z26; \
	VPXORD Z27, Z27, Z27; \
	VPXORD Z28, Z28, Z28; \
	VPXORD Z29, Z29, Z29; \
	VPXORD Z30, Z30, Z30; \
	VPXORD Z31, Z31, Z31; \
	XORQ CX, CX; \
dqloop: \
	LW(DI, Z0); \
	LW(R9, Z1); \
	LW(R10, Z2); \
	LW(R11, Z3); \
	VMOVUPS (SI)(CX*XS), Z4; \
	VMOVUPS (AX)(CX*XS), Z5; \
	VMOVUPS (R8)(CX*XS), Z6; \
	VMOVUPS (R12)(CX*XS), Z7; \
	Q4(Z4, 4, Z16, Z17, Z18, Z19, 16, 17, 18, 19); \
	Q4(Z5, 5, Z20, Z21, Z22, Z23, 20, 21, 22, 23); \
	Q4(Z6, 6, Z24, Z25, Z26, Z27, 24, 25, 26, 27); \
	Q4(Z7, 7, Z28, Z29, Z30, Z31, 28, 29, 30, 31); \
	ADDQ $(16<<WSHIFT), CX; \
	CMPQ CX, BX; \
	JLT  dqloop; \
	QSUM(Z16, Z17, Z18, Z19, Y16, Y17, Y18, Y19, 0); \
	QSUM(Z20, Z21, Z22, Z23, Y20, Y21, Y22, Y23, 16); \
	QSUM(Z24, Z25, Z26, Z27, Y24, Y25, Y26, Y27, 32); \
	QSUM(Z28, Z29, Z30, Z31, Y28, Y29, Y30, Y31, 48); \
	ADDQ $64, DX; \
	MOVQ ldx+16(FP), CX; \
	SHLQ $4, CX; \
	ADDQ CX, SI; \
	DECQ R13; \
	JNZ  dqquad; \
	VZEROUPPER; \
	RET

// LW32 loads 16 4-byte w elements (floats, or bfloat16 pairs) for DOTQUADS.
#define LW32(r, z) VMOVUPS (r)(CX*1), z

// LWF16 loads 16 binary16 w elements widened to floats for DOTQUADS.
#define LWF16(r, z) VCVTPH2PS (r)(CX*1), z

// QF32 is Q4 for float32 rows (QFMA4).
#define QF32(xz, xn, a0, a1, a2, a3, n0, n1, n2, n3) QFMA4(xz, a0, a1, a2, a3)

// QBF16 is Q4 for rows of bfloat16 pairs: each lane adds the products of
// its two pairs' halves.
#define QBF16(xz, xn, a0, a1, a2, a3, n0, n1, n2, n3) \
	DPBF16(0, xn, n0); \
	DPBF16(1, xn, n1); \
	DPBF16(2, xn, n2); \
	DPBF16(3, xn, n3)

// func axpyAVX2(alpha float32, x, y *float32, n int)
TEXT ·axpyAVX2(SB), NOSPLIT, $0-32
	VBROADCASTSS alpha+0(FP), Y15
	MOVQ x+8(FP), SI
	MOVQ y+16(FP), DI
	MOVQ n+24(FP), CX
	CMPQ CX, $32
	JLT  axpy8

axpy32:
	VMOVUPS (DI), Y0
	VMOVUPS 32(DI), Y1
	VMOVUPS 64(DI), Y2
	VMOVUPS 96(DI), Y3
	VFMADD231PS (SI), Y15, Y0
	VFMADD231PS 32(SI), Y15, Y1
	VFMADD231PS 64(SI), Y15, Y2
	VFMADD231PS 96(SI), Y15, Y3
	VMOVUPS Y0, (DI)
	VMOVUPS Y1, 32(DI)
	VMOVUPS Y2, 64(DI)
	VMOVUPS Y3, 96(DI)
	ADDQ $128, SI
	ADDQ $128, DI
	SUBQ $32, CX
	CMPQ CX, $32
	JGE  axpy32

axpy8:
	CMPQ CX, $8
	JLT  axpydone
	VMOVUPS (DI), Y0
	VFMADD231PS (SI), Y15, Y0
	VMOVUPS Y0, (DI)
	ADDQ $32, SI
	ADDQ $32, DI
	SUBQ $8, CX
	JMP  axpy8

axpydone:
	VZEROUPPER
	RET

// func scaleAVX2(alpha float32, x *float32, n int)
TEXT ·scaleAVX2(SB), NOSPLIT, $0-24
	VBROADCASTSS alpha+0(FP), Y15
	MOVQ x+8(FP), SI
	MOVQ n+16(FP), CX
	CMPQ CX, $32
	JLT  scale8

scale32:
	VMULPS (SI), Y15, Y0
	VMULPS 32(SI), Y15, Y1
	VMULPS 64(SI), Y15, Y2
	VMULPS 96(SI), Y15, Y3
	VMOVUPS Y0, (SI)
	VMOVUPS Y1, 32(SI)
	VMOVUPS Y2, 64(SI)
	VMOVUPS Y3, 96(SI)
	ADDQ $128, SI
	SUBQ $32, CX
	CMPQ CX, $32
	JGE  scale32

scale8:
	CMPQ CX, $8
	JLT  scaledone
	VMULPS (SI), Y15, Y0
	VMOVUPS Y0, (SI)
	ADDQ $32, SI
	SUBQ $8, CX
	JMP  scale8

scaledone:
	VZEROUPPER
	RET

// func addAVX2(dst, x *float32, n int)
TEXT ·addAVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ n+16(FP), CX
	CMPQ CX, $32
	JLT  add8

add32:
	VMOVUPS (DI), Y0
	VMOVUPS 32(DI), Y1
	VMOVUPS 64(DI), Y2
	VMOVUPS 96(DI), Y3
	VADDPS (SI), Y0, Y0
	VADDPS 32(SI), Y1, Y1
	VADDPS 64(SI), Y2, Y2
	VADDPS 96(SI), Y3, Y3
	VMOVUPS Y0, (DI)
	VMOVUPS Y1, 32(DI)
	VMOVUPS Y2, 64(DI)
	VMOVUPS Y3, 96(DI)
	ADDQ $128, SI
	ADDQ $128, DI
	SUBQ $32, CX
	CMPQ CX, $32
	JGE  add32

add8:
	CMPQ CX, $8
	JLT  adddone
	VMOVUPS (DI), Y0
	VADDPS (SI), Y0, Y0
	VMOVUPS Y0, (DI)
	ADDQ $32, SI
	ADDQ $32, DI
	SUBQ $8, CX
	JMP  add8

adddone:
	VZEROUPPER
	RET

// func mulScaleAVX2(out, x, w *float32, s float32, n int)
TEXT ·mulScaleAVX2(SB), NOSPLIT, $0-40
	MOVQ out+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ w+16(FP), DX
	VBROADCASTSS s+24(FP), Y15
	MOVQ n+32(FP), CX

mulscale8:
	VMULPS (SI), Y15, Y0
	VMULPS (DX), Y0, Y0
	VMOVUPS Y0, (DI)
	ADDQ $32, SI
	ADDQ $32, DX
	ADDQ $32, DI
	SUBQ $8, CX
	JNZ  mulscale8
	VZEROUPPER
	RET

// func siluMulAVX2(out, gate, up *float32, n int)
TEXT ·siluMulAVX2(SB), NOSPLIT, $0-32
	MOVQ out+0(FP), DI
	MOVQ gate+8(FP), SI
	MOVQ up+16(FP), DX
	MOVQ n+24(FP), CX
	EXPSETUP
	VXORPS Y7, Y7, Y7

silu8:
	VMOVUPS (SI), Y4
	VSUBPS Y4, Y7, Y0
	EXP(Y0, Y1, Y2, Y3)
	VADDPS 352(R11), Y0, Y0
	VDIVPS Y0, Y4, Y4
	VMULPS (DX), Y4, Y4
	VMOVUPS Y4, (DI)
	ADDQ $32, SI
	ADDQ $32, DX
	ADDQ $32, DI
	SUBQ $8, CX
	JNZ  silu8
	VZEROUPPER
	RET

// func expSubSumAVX2(x *float32, m float32, n int) float32
TEXT ·expSubSumAVX2(SB), NOSPLIT, $0-28
	MOVQ x+0(FP), SI
	VBROADCASTSS m+8(FP), Y7
	MOVQ n+16(FP), CX
	EXPSETUP
	VXORPS Y4, Y4, Y4

expsub8:
	VMOVUPS (SI), Y0
	VSUBPS Y7, Y0, Y0
	EXP(Y0, Y1, Y2, Y3)
	VADDPS Y0, Y4, Y4
	VMOVUPS Y0, (SI)
	ADDQ $32, SI
	SUBQ $8, CX
	JNZ  expsub8
	VEXTRACTF128 $1, Y4, X1
	VADDPS X1, X4, X4
	VHADDPS X4, X4, X4
	VHADDPS X4, X4, X4
	VZEROUPPER
	MOVSS X4, ret+24(FP)
	RET

// func maxAVX2(x *float32, n int) float32
// Each VMAXPS keeps the accumulator (second source) when x is NaN.
TEXT ·maxAVX2(SB), NOSPLIT, $0-20
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	LEAQ ·expConst(SB), R11
	VMOVUPS 416(R11), Y0
	VMOVUPS Y0, Y1
	VMOVUPS Y0, Y2
	VMOVUPS Y0, Y3
	CMPQ CX, $32
	JLT  max8

max32:
	VMOVUPS (SI), Y4
	VMOVUPS 32(SI), Y5
	VMOVUPS 64(SI), Y6
	VMOVUPS 96(SI), Y7
	VMAXPS Y0, Y4, Y0
	VMAXPS Y1, Y5, Y1
	VMAXPS Y2, Y6, Y2
	VMAXPS Y3, Y7, Y3
	ADDQ $128, SI
	SUBQ $32, CX
	CMPQ CX, $32
	JGE  max32

max8:
	CMPQ CX, $8
	JLT  maxdone
	VMOVUPS (SI), Y4
	VMAXPS Y0, Y4, Y0
	ADDQ $32, SI
	SUBQ $8, CX
	JMP  max8

maxdone:
	VMAXPS Y1, Y0, Y0
	VMAXPS Y3, Y2, Y2
	VMAXPS Y2, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VMAXPS X1, X0, X0
	VPERMILPS $0x4e, X0, X1
	VMAXPS X1, X0, X0
	VPERMILPS $0xb1, X0, X1
	VMAXPS X1, X0, X0
	VZEROUPPER
	MOVSS X0, ret+16(FP)
	RET

// func indexAVX2(x *float32, n int, v float32) int
TEXT ·indexAVX2(SB), NOSPLIT, $0-32
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	VBROADCASTSS v+16(FP), Y15
	XORQ AX, AX

index8:
	CMPQ AX, CX
	JGE  indexnone
	VCMPPS $0, (SI)(AX*4), Y15, Y0
	VMOVMSKPS Y0, BX
	TESTL BX, BX
	JNZ  indexfound
	ADDQ $8, AX
	JMP  index8

indexfound:
	BSFL BX, BX
	ADDQ BX, AX
	MOVQ AX, ret+24(FP)
	VZEROUPPER
	RET

indexnone:
	MOVQ CX, ret+24(FP)
	VZEROUPPER
	RET

// func dot1x4AVX2(k int, x, w *float32, ldw int, out *float32)
TEXT ·dot1x4AVX2(SB), NOSPLIT, $0-40
	MOVQ k+0(FP), CX
	MOVQ x+8(FP), SI
	MOVQ w+16(FP), DI
	MOVQ ldw+24(FP), R8
	SHLQ $2, R8
	MOVQ out+32(FP), DX
	LEAQ (DI)(R8*1), R9
	LEAQ (DI)(R8*2), R10
	LEAQ (R9)(R8*2), R11
	XORQ AX, AX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	SUBQ $16, CX
	JLT  d14tail

d14loop:
	VMOVUPS (SI)(AX*1), Y8
	VMOVUPS 32(SI)(AX*1), Y9
	VFMADD231PS (DI)(AX*1), Y8, Y0
	VFMADD231PS (R9)(AX*1), Y8, Y1
	VFMADD231PS (R10)(AX*1), Y8, Y2
	VFMADD231PS (R11)(AX*1), Y8, Y3
	VFMADD231PS 32(DI)(AX*1), Y9, Y4
	VFMADD231PS 32(R9)(AX*1), Y9, Y5
	VFMADD231PS 32(R10)(AX*1), Y9, Y6
	VFMADD231PS 32(R11)(AX*1), Y9, Y7
	ADDQ $64, AX
	SUBQ $16, CX
	JGE  d14loop

d14tail:
	ADDQ $16, CX
	JZ   d14done
	VMOVUPS (SI)(AX*1), Y8
	VFMADD231PS (DI)(AX*1), Y8, Y0
	VFMADD231PS (R9)(AX*1), Y8, Y1
	VFMADD231PS (R10)(AX*1), Y8, Y2
	VFMADD231PS (R11)(AX*1), Y8, Y3

d14done:
	VADDPS Y4, Y0, Y0
	VADDPS Y5, Y1, Y1
	VADDPS Y6, Y2, Y2
	VADDPS Y7, Y3, Y3
	HSUM4(Y0, Y1, Y2, Y3, Y8, Y9, X0, X8)
	VMOVUPS X0, (DX)
	VZEROUPPER
	RET

// func dot2x4AVX2(k int, x *float32, ldx int, w *float32, ldw int, out *float32)
TEXT ·dot2x4AVX2(SB), NOSPLIT, $0-48
	MOVQ k+0(FP), CX
	MOVQ x+8(FP), SI
	MOVQ ldx+16(FP), R12
	SHLQ $2, R12
	ADDQ SI, R12
	MOVQ w+24(FP), DI
	MOVQ ldw+32(FP), R8
	SHLQ $2, R8
	MOVQ out+40(FP), DX
	LEAQ (DI)(R8*1), R9
	LEAQ (DI)(R8*2), R10
	LEAQ (R9)(R8*2), R11
	XORQ AX, AX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7

d24loop:
	VMOVUPS (SI)(AX*1), Y12
	VMOVUPS (R12)(AX*1), Y13
	VMOVUPS (DI)(AX*1), Y8
	VMOVUPS (R9)(AX*1), Y9
	VMOVUPS (R10)(AX*1), Y10
	VMOVUPS (R11)(AX*1), Y11
	VFMADD231PS Y8, Y12, Y0
	VFMADD231PS Y9, Y12, Y1
	VFMADD231PS Y10, Y12, Y2
	VFMADD231PS Y11, Y12, Y3
	VFMADD231PS Y8, Y13, Y4
	VFMADD231PS Y9, Y13, Y5
	VFMADD231PS Y10, Y13, Y6
	VFMADD231PS Y11, Y13, Y7
	ADDQ $32, AX
	SUBQ $8, CX
	JNZ  d24loop

	HSUM4(Y0, Y1, Y2, Y3, Y8, Y9, X0, X8)
	HSUM4(Y4, Y5, Y6, Y7, Y8, Y9, X4, X8)
	VMOVUPS X0, (DX)
	VMOVUPS X4, 16(DX)
	VZEROUPPER
	RET

// func dotQuadsAVX512(k int, x *float32, ldx int, quads int, w *float32, ldw int, out *float32)
TEXT ·dotQuadsAVX512(SB), NOSPLIT, $0-56
	DOTQUADS(2, 1, LW32, QF32)

// func dotQuadsF16AVX512(k int, x *float32, ldx int, quads int, w *uint16, ldw int, out *float32)
// DOTQUADS over binary16 w rows, widened as they load.
TEXT ·dotQuadsF16AVX512(SB), NOSPLIT, $0-56
	DOTQUADS(1, 2, LWF16, QF32)

// func dotPairQuadsBF16(k int, x *uint32, ldx int, quads int, w *uint16, ldw int, out *float32)
// DOTQUADS over bfloat16 pairs: k pairs a row, ldx and ldw in pairs.
TEXT ·dotPairQuadsBF16(SB), NOSPLIT, $0-56
	DOTQUADS(2, 1, LW32, QBF16)
