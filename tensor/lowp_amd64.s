//go:build amd64 && !noasm

#include "textflag.h"

// Kernels of the products against BF16, F16 and Q8_0 weights. Operand
// order as in simd_amd64.s (destination last). Registers R14, R15 and BP
// are left alone.

// HSUM4Y reduces the four 8-lane accumulators Y0-Y3 to one float in X0
// lane 0. Clobbers Y1, Y2.
#define HSUM4Y \
	VADDPS Y1, Y0, Y0; \
	VADDPS Y3, Y2, Y2; \
	VADDPS Y2, Y0, Y0; \
	VEXTRACTF128 $1, Y0, X1; \
	VADDPS X1, X0, X0; \
	VHADDPS X0, X0, X0; \
	VHADDPS X0, X0, X0

// BF16W widens the 8 bfloat16 at off(DI)(AX*1) into the floats of y.
#define BF16W(off, y) \
	VPMOVZXWD off(DI)(AX*1), y; \
	VPSLLD $16, y, y

// F16W widens the 8 binary16 at off(DI)(AX*1) into the floats of y.
#define F16W(off, y) \
	VCVTPH2PS off(DI)(AX*1), y

// AXLOAD4 and AXSTORE4 move the four accumulators a-d to and from the
// 32 floats of y at byte offset off from SI.
#define AXLOAD4(off, a, b, c, d) \
	VMOVUPS off(SI), a; \
	VMOVUPS off+32(SI), b; \
	VMOVUPS off+64(SI), c; \
	VMOVUPS off+96(SI), d

#define AXSTORE4(off, a, b, c, d) \
	VMOVUPS a, off(SI); \
	VMOVUPS b, off+32(SI); \
	VMOVUPS c, off+64(SI); \
	VMOVUPS d, off+96(SI)

// AXFMA4 loads 32 elements of the row at byte offset g into t0-t3 with
// W (O1-O3 the offsets of the second to fourth vectors) and adds their
// products with a[r] (Y15) into the accumulators a0-a3.
#define AXFMA4(W, g, O1, O2, O3, t0, t1, t2, t3, a0, a1, a2, a3) \
	W(g, t0); \
	W(g+O1, t1); \
	W(g+O2, t2); \
	W(g+O3, t3); \
	VFMADD231PS t0, Y15, a0; \
	VFMADD231PS t1, Y15, a1; \
	VFMADD231PS t2, Y15, a2; \
	VFMADD231PS t3, Y15, a3

// AXROWS sets DI, DX and R12 up for a walk over the rows of a group.
#define AXROWS \
	MOVQ R11, DI; \
	MOVQ R10, DX; \
	MOVQ R9, R12

// AXNEXT moves DI, DX on to the next row and counts it down in R12.
#define AXNEXT \
	ADDQ $4, DX; \
	ADDQ R8, DI; \
	DECQ R12

// AXPYROWS is the body of the axpyRows kernels (y, a *float32, w, n,
// ldw, rows): y[i] += Σ_r a[r]·w[r·ldw+i] for i < n (n%8 == 0), rows > 0,
// row by row. For each group of 64 columns (then of 32, then of 8) of y
// the group is loaded into Y0-Y7 (Y0-Y3, Y0), every row's a[r]·w is
// added with one FMA per vector, and the group is stored; with 64 columns
// eight accumulators keep a row's FMAs from waiting on the previous
// row's. W(off, y) loads 8 floats of row r at byte
// offset off (from DI, AX = 0); SH is log2 of an element's bytes, O1-O3
// the byte offsets of the group's second to fourth vectors, G32 and G8 the
// bytes of 32 and 8 elements. SI walks y, R11 the group's column in row 0
// of w, DI that column in row r, DX a.
#define AXPYROWS(W, SH, O1, O2, O3, G32, G8) \
	MOVQ y+0(FP), SI; \
	MOVQ a+8(FP), R10; \
	MOVQ w+16(FP), R11; \
	MOVQ n+24(FP), CX; \
	MOVQ ldw+32(FP), R8; \
	SHLQ $SH, R8; \
	MOVQ rows+40(FP), R9; \
	XORQ AX, AX; \
c64: \
	CMPQ CX, $64; \
	JLT  c32; \
	AXLOAD4(0, Y0, Y1, Y2, Y3); \
	AXLOAD4(128, Y4, Y5, Y6, Y7); \
	AXROWS; \
r64: \
	VBROADCASTSS (DX), Y15; \
	AXFMA4(W, 0, O1, O2, O3, Y8, Y9, Y10, Y11, Y0, Y1, Y2, Y3); \
	AXFMA4(W, G32, O1, O2, O3, Y8, Y9, Y10, Y11, Y4, Y5, Y6, Y7); \
	AXNEXT; \
	JNZ  r64; \
	AXSTORE4(0, Y0, Y1, Y2, Y3); \
	AXSTORE4(128, Y4, Y5, Y6, Y7); \
	ADDQ $256, SI; \
	ADDQ $(2*G32), R11; \
	SUBQ $64, CX; \
	JMP  c64; \
c32: \
	CMPQ CX, $32; \
	JLT  c8; \
	AXLOAD4(0, Y0, Y1, Y2, Y3); \
	AXROWS; \
r32: \
	VBROADCASTSS (DX), Y15; \
	AXFMA4(W, 0, O1, O2, O3, Y4, Y5, Y6, Y7, Y0, Y1, Y2, Y3); \
	AXNEXT; \
	JNZ  r32; \
	AXSTORE4(0, Y0, Y1, Y2, Y3); \
	ADDQ $128, SI; \
	ADDQ $G32, R11; \
	SUBQ $32, CX; \
	JMP  c32; \
c8: \
	CMPQ CX, $8; \
	JLT  done; \
	VMOVUPS (SI), Y0; \
	AXROWS; \
r8: \
	VBROADCASTSS (DX), Y15; \
	W(0, Y4); \
	VFMADD231PS Y4, Y15, Y0; \
	AXNEXT; \
	JNZ  r8; \
	VMOVUPS Y0, (SI); \
	ADDQ $32, SI; \
	ADDQ $G8, R11; \
	SUBQ $8, CX; \
	JMP  c8; \
done: \
	VZEROUPPER; \
	RET

// F32W loads the 8 floats at off(DI)(AX*1) into y.
#define F32W(off, y) \
	VMOVUPS off(DI)(AX*1), y

// DOTROWS is the body of the dotRows kernels (x *float32, w, k, ldw,
// rows int, out *float32): out[r] = x·w[r·ldw : r·ldw+k] for r < rows
// (k%8 == 0, k, rows > 0), one row at a time, 32 elements a step into
// four accumulators, then 8 at a time into the first, summed by HSUM4Y.
// W(off, y) loads 8 elements of the row at byte offset off (from DI, AX
// its byte offset in the row) as floats; SH is log2 of an element's
// bytes, O1-O3 the byte offsets of a step's second to fourth vectors of
// w, G32 and G8 the bytes of 32 and 8 elements, XS the scale from AX to
// the byte offset into x. The labels are row, c32, tail, c8 and done.
#define DOTROWS(W, SH, O1, O2, O3, G32, G8, XS, row, c32, tail, c8, done) \
	MOVQ x+0(FP), SI; \
	MOVQ w+8(FP), DI; \
	MOVQ k+16(FP), BX; \
	MOVQ ldw+24(FP), R8; \
	SHLQ $SH, R8; \
	MOVQ rows+32(FP), R9; \
	MOVQ out+40(FP), DX; \
row: \
	VXORPS Y0, Y0, Y0; \
	VXORPS Y1, Y1, Y1; \
	VXORPS Y2, Y2, Y2; \
	VXORPS Y3, Y3, Y3; \
	XORQ AX, AX; \
	MOVQ BX, CX; \
	SUBQ $32, CX; \
	JLT  tail; \
c32: \
	W(0, Y4); \
	W(O1, Y5); \
	W(O2, Y6); \
	W(O3, Y7); \
	VFMADD231PS (SI)(AX*XS), Y4, Y0; \
	VFMADD231PS 32(SI)(AX*XS), Y5, Y1; \
	VFMADD231PS 64(SI)(AX*XS), Y6, Y2; \
	VFMADD231PS 96(SI)(AX*XS), Y7, Y3; \
	ADDQ $G32, AX; \
	SUBQ $32, CX; \
	JGE  c32; \
tail: \
	ADDQ $32, CX; \
	JZ   done; \
c8: \
	W(0, Y4); \
	VFMADD231PS (SI)(AX*XS), Y4, Y0; \
	ADDQ $G8, AX; \
	SUBQ $8, CX; \
	JNZ  c8; \
done: \
	HSUM4Y; \
	VMOVSS X0, (DX); \
	ADDQ $4, DX; \
	ADDQ R8, DI; \
	DECQ R9; \
	JNZ  row; \
	VZEROUPPER; \
	RET

// func dotRowsBF16AVX2(x *float32, w *uint16, k, ldw, rows int, out *float32)
TEXT ·dotRowsBF16AVX2(SB), NOSPLIT, $0-48
	DOTROWS(BF16W, 1, 16, 32, 48, 64, 16, 2, bfrow, bf32, bftail, bf8, bfdone)

// func dotRowsF16AVX2(x *float32, w *uint16, k, ldw, rows int, out *float32)
TEXT ·dotRowsF16AVX2(SB), NOSPLIT, $0-48
	DOTROWS(F16W, 1, 16, 32, 48, 64, 16, 2, hfrow, hf32, hftail, hf8, hfdone)

// func dotRowsAVX2(x, w *float32, k, ldw, rows int, out *float32)
TEXT ·dotRowsAVX2(SB), NOSPLIT, $0-48
	DOTROWS(F32W, 2, 32, 64, 96, 128, 32, 1, frow, f32s, ftail, f8, fdone)

// func decodeBF16AVX2(dst *float32, src *uint16, n int)
TEXT ·decodeBF16AVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), SI
	MOVQ src+8(FP), DI
	MOVQ n+16(FP), CX
	XORQ AX, AX

debf8:
	BF16W(0, Y0)
	VMOVUPS Y0, (SI)(AX*2)
	ADDQ $16, AX
	SUBQ $8, CX
	JNZ  debf8
	VZEROUPPER
	RET

// func decodeF16AVX2(dst *float32, src *uint16, n int)
TEXT ·decodeF16AVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), SI
	MOVQ src+8(FP), DI
	MOVQ n+16(FP), CX
	XORQ AX, AX

def16:
	F16W(0, Y0)
	VMOVUPS Y0, (SI)(AX*2)
	ADDQ $16, AX
	SUBQ $8, CX
	JNZ  def16
	VZEROUPPER
	RET

// BF16Z widens the 16 bfloat16 at off(DI)(AX*1) into the floats of z.
#define BF16Z(off, z) \
	VPMOVZXWD off(DI)(AX*1), z; \
	VPSLLD $16, z, z

// F16Z widens the 16 binary16 at off(DI)(AX*1) into the floats of z.
#define F16Z(off, z) \
	VCVTPH2PS off(DI)(AX*1), z

// WIDEN512 is the body of the AVX-512 widening kernels (dst *float32, src
// *uint16, n int; n%16 == 0, n > 0): 32 values a step by WIDEN (BF16Z or
// F16Z), then the last 16; l32, l16 and done name its labels.
#define WIDEN512(WIDEN, l32, l16, done) \
	MOVQ dst+0(FP), SI; \
	MOVQ src+8(FP), DI; \
	MOVQ n+16(FP), CX; \
	XORQ AX, AX; \
	CMPQ CX, $32; \
	JLT  l16; \
l32: \
	WIDEN(0, Z0); \
	WIDEN(32, Z1); \
	VMOVUPS Z0, (SI)(AX*2); \
	VMOVUPS Z1, 64(SI)(AX*2); \
	ADDQ $64, AX; \
	SUBQ $32, CX; \
	CMPQ CX, $32; \
	JGE  l32; \
	TESTQ CX, CX; \
	JZ   done; \
l16: \
	WIDEN(0, Z0); \
	VMOVUPS Z0, (SI)(AX*2); \
done: \
	VZEROUPPER; \
	RET

// func decodeBF16AVX512(dst *float32, src *uint16, n int)
TEXT ·decodeBF16AVX512(SB), NOSPLIT, $0-24
	WIDEN512(BF16Z, debf32z, debf16z, debfzdone)

// func decodeF16AVX512(dst *float32, src *uint16, n int)
TEXT ·decodeF16AVX512(SB), NOSPLIT, $0-24
	WIDEN512(F16Z, def32z, def16z, defzdone)

// func dequantQ8AVX2(dst *float32, q *uint8, scale float32, n int)
TEXT ·dequantQ8AVX2(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), SI
	MOVQ q+8(FP), DI
	VBROADCASTSS scale+16(FP), Y15
	MOVQ n+24(FP), CX
	MOVL $128, AX
	VMOVD AX, X14
	VPBROADCASTD X14, Y14
	XORQ AX, AX

deq8:
	VPMOVZXBD (DI)(AX*1), Y0
	VPSUBD Y14, Y0, Y0
	VCVTDQ2PS Y0, Y0
	VMULPS Y15, Y0, Y0
	VMOVUPS Y0, (SI)(AX*4)
	ADDQ $8, AX
	SUBQ $8, CX
	JNZ  deq8
	VZEROUPPER
	RET

// ---- AVX-512 kernels of the half-precision products.

// HSUM2Z reduces the 16-lane accumulators Z0 and Z1 to one float in X0
// lane 0. Clobbers Y1.
#define HSUM2Z \
	VADDPS Z1, Z0, Z0; \
	VEXTRACTF64X4 $1, Z0, Y1; \
	VADDPS Y1, Y0, Y0; \
	VEXTRACTF128 $1, Y0, X1; \
	VADDPS X1, X0, X0; \
	VHADDPS X0, X0, X0; \
	VHADDPS X0, X0, X0

// QUADSUM reduces the 16-lane accumulator z (y its lower half) to one
// float stored at off(DX). Clobbers Y0, Y1.
#define QUADSUM(z, y, off) \
	VEXTRACTF64X4 $1, z, Y1; \
	VADDPS Y1, y, Y0; \
	VEXTRACTF128 $1, Y0, X1; \
	VADDPS X1, X0, X0; \
	VHADDPS X0, X0, X0; \
	VHADDPS X0, X0, X0; \
	VMOVSS X0, off(DX)

// F16L widens the 32 binary16 at (r)(AX*1), taken in one 64-byte load,
// into the floats of za (the first 16) and zb (the last 16); yb is zb's
// lower half.
#define F16L(r, za, zb, yb) \
	VMOVDQU32 (r)(AX*1), zb; \
	VCVTPH2PS yb, za; \
	VEXTRACTI64X4 $1, zb, yb; \
	VCVTPH2PS yb, zb

// func dotRowsF16AVX512(x *float32, w *uint16, k, ldw, rows int, out *float32)
// One row at a time, 32 weights (one cache line) a step; k%32 == 0.
TEXT ·dotRowsF16AVX512(SB), NOSPLIT, $0-48
	MOVQ x+0(FP), SI
	MOVQ w+8(FP), DI
	MOVQ k+16(FP), BX
	MOVQ ldw+24(FP), R8
	SHLQ $1, R8
	MOVQ rows+32(FP), R9
	MOVQ out+40(FP), DX

zhrow:
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	XORQ AX, AX
	MOVQ BX, CX

zh32:
	F16L(DI, Z4, Z5, Y5)
	VFMADD231PS (SI)(AX*2), Z4, Z0
	VFMADD231PS 64(SI)(AX*2), Z5, Z1
	ADDQ $64, AX
	SUBQ $32, CX
	JNZ  zh32

	HSUM2Z
	VMOVSS X0, (DX)
	ADDQ $4, DX
	ADDQ R8, DI
	DECQ R9
	JNZ  zhrow
	VZEROUPPER
	RET

// func dot4RowsF16AVX512(x *float32, w *uint16, k, ldw, quads int, out *float32)
// Four rows at a time (DI, R10, R11, R12), each x vector loaded once for
// the four, accumulators Z16-Z19; k%32 == 0.
TEXT ·dot4RowsF16AVX512(SB), NOSPLIT, $0-48
	MOVQ x+0(FP), SI
	MOVQ w+8(FP), DI
	MOVQ k+16(FP), BX
	MOVQ ldw+24(FP), R8
	SHLQ $1, R8
	MOVQ quads+32(FP), R9
	MOVQ out+40(FP), DX

zhquad:
	LEAQ (DI)(R8*1), R10
	LEAQ (DI)(R8*2), R11
	LEAQ (R10)(R8*2), R12
	VPXORD Z16, Z16, Z16
	VPXORD Z17, Z17, Z17
	VPXORD Z18, Z18, Z18
	VPXORD Z19, Z19, Z19
	XORQ AX, AX
	MOVQ BX, CX

zhquad32:
	VMOVUPS (SI)(AX*2), Z8
	VMOVUPS 64(SI)(AX*2), Z9
	F16L(DI, Z0, Z1, Y1)
	F16L(R10, Z2, Z3, Y3)
	F16L(R11, Z4, Z5, Y5)
	F16L(R12, Z6, Z7, Y7)
	VFMADD231PS Z8, Z0, Z16
	VFMADD231PS Z8, Z2, Z17
	VFMADD231PS Z8, Z4, Z18
	VFMADD231PS Z8, Z6, Z19
	VFMADD231PS Z9, Z1, Z16
	VFMADD231PS Z9, Z3, Z17
	VFMADD231PS Z9, Z5, Z18
	VFMADD231PS Z9, Z7, Z19
	ADDQ $64, AX
	SUBQ $32, CX
	JNZ  zhquad32

	QUADSUM(Z16, Y16, 0)
	QUADSUM(Z17, Y17, 4)
	QUADSUM(Z18, Y18, 8)
	QUADSUM(Z19, Y19, 12)
	ADDQ $16, DX
	LEAQ (DI)(R8*4), DI
	DECQ R9
	JNZ  zhquad
	VZEROUPPER
	RET

// func splitEvenOddAVX512(dst, src *float32, chunks int)
// For each chunk of 32 floats: dst[0:16] = src[0,2,…,30], dst[16:32] =
// src[1,3,…,31].
TEXT ·splitEvenOddAVX512(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ chunks+16(FP), CX
	LEAQ ·evenOddIdx(SB), AX
	VMOVDQU32 (AX), Z14
	VMOVDQU32 64(AX), Z15

seo:
	VMOVUPS (SI), Z0
	VMOVUPS 64(SI), Z1
	VMOVDQA32 Z14, Z2
	VMOVDQA32 Z15, Z3
	VPERMI2PS Z1, Z0, Z2
	VPERMI2PS Z1, Z0, Z3
	VMOVUPS Z2, (DI)
	VMOVUPS Z3, 64(DI)
	ADDQ $128, SI
	ADDQ $128, DI
	DECQ CX
	JNZ  seo
	VZEROUPPER
	RET

// BF16EO widens the 32 bfloat16 at (r)(AX*1) into ze (the even-indexed,
// from the low halves of the 32-bit lanes) and zo (the odd-indexed, the
// high halves, kept by the mask in Z31).
#define BF16EO(r, ze, zo) \
	VMOVDQU32 (r)(AX*1), zo; \
	VPSLLD $16, zo, ze; \
	VPANDD Z31, zo, zo

// func dotRowsBF16EOAVX512(xeo *float32, w *uint16, k, ldw, rows int, out *float32)
// dotRowsBF16AVX512 with x split by splitEvenOddAVX512; k%32 == 0.
TEXT ·dotRowsBF16EOAVX512(SB), NOSPLIT, $0-48
	MOVQ xeo+0(FP), SI
	MOVQ w+8(FP), DI
	MOVQ k+16(FP), BX
	MOVQ ldw+24(FP), R8
	SHLQ $1, R8
	MOVQ rows+32(FP), R9
	MOVQ out+40(FP), DX
	MOVL $0xffff0000, AX
	VPBROADCASTD AX, Z31

eorow:
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	XORQ AX, AX
	MOVQ BX, CX

eo32:
	BF16EO(DI, Z4, Z5)
	VFMADD231PS (SI)(AX*2), Z4, Z0
	VFMADD231PS 64(SI)(AX*2), Z5, Z1
	ADDQ $64, AX
	SUBQ $32, CX
	JNZ  eo32

	HSUM2Z
	VMOVSS X0, (DX)
	ADDQ $4, DX
	ADDQ R8, DI
	DECQ R9
	JNZ  eorow
	VZEROUPPER
	RET

// func dot4RowsBF16EOAVX512(xeo *float32, w *uint16, k, ldw, quads int, out *float32)
// dot4RowsBF16AVX512 with x split by splitEvenOddAVX512; k%32 == 0.
TEXT ·dot4RowsBF16EOAVX512(SB), NOSPLIT, $0-48
	MOVQ xeo+0(FP), SI
	MOVQ w+8(FP), DI
	MOVQ k+16(FP), BX
	MOVQ ldw+24(FP), R8
	SHLQ $1, R8
	MOVQ quads+32(FP), R9
	MOVQ out+40(FP), DX
	MOVL $0xffff0000, AX
	VPBROADCASTD AX, Z31

eoquad:
	LEAQ (DI)(R8*1), R10
	LEAQ (DI)(R8*2), R11
	LEAQ (R10)(R8*2), R12
	VPXORD Z16, Z16, Z16
	VPXORD Z17, Z17, Z17
	VPXORD Z18, Z18, Z18
	VPXORD Z19, Z19, Z19
	XORQ AX, AX
	MOVQ BX, CX

eoquad32:
	VMOVUPS (SI)(AX*2), Z8
	VMOVUPS 64(SI)(AX*2), Z9
	BF16EO(DI, Z0, Z1)
	BF16EO(R10, Z2, Z3)
	BF16EO(R11, Z4, Z5)
	BF16EO(R12, Z6, Z7)
	VFMADD231PS Z8, Z0, Z16
	VFMADD231PS Z8, Z2, Z17
	VFMADD231PS Z8, Z4, Z18
	VFMADD231PS Z8, Z6, Z19
	VFMADD231PS Z9, Z1, Z16
	VFMADD231PS Z9, Z3, Z17
	VFMADD231PS Z9, Z5, Z18
	VFMADD231PS Z9, Z7, Z19
	ADDQ $64, AX
	SUBQ $32, CX
	JNZ  eoquad32

	QUADSUM(Z16, Y16, 0)
	QUADSUM(Z17, Y17, 4)
	QUADSUM(Z18, Y18, 8)
	QUADSUM(Z19, Y19, 12)
	ADDQ $16, DX
	LEAQ (DI)(R8*4), DI
	DECQ R9
	JNZ  eoquad
	VZEROUPPER
	RET

// ---- Q8_0 kernels. A row of w is groups of up to 32 blocks, each a
// 64-byte header of 32 binary16 scales then the group's quants (32 bytes a
// block, stored +128); see Weights. The x rows (xq, xc, xd) are padded to
// whole groups.

// func dotRowsQ8AVX2(xq *int8, xd *float32, w *uint8, nb, rows int, out *float32)
// Per block of 32: w = stored^0x80 (the signed quants), VPMADDUBSW of |x|
// (unsigned) with w·sign(x) gives 16 pair sums of at most 2·127·127 (no
// saturation), VPMADDWD with ones widens them to 8 int32, and the block's
// scale d_w·d_x multiplies them into the float accumulator Y0. DI walks
// the quants, R13 the header's scales; R11 counts the row's blocks left,
// CX the group's.
TEXT ·dotRowsQ8AVX2(SB), NOSPLIT, $0-48
	MOVQ xq+0(FP), SI
	MOVQ xd+8(FP), R10
	MOVQ w+16(FP), DI
	MOVQ nb+24(FP), BX
	MOVQ rows+32(FP), R9
	MOVQ out+40(FP), DX
	MOVL $0x80808080, AX
	VMOVD AX, X15
	VPBROADCASTD X15, Y15
	MOVL $0x00010001, AX
	VMOVD AX, X14
	VPBROADCASTD X14, Y14

q2row:
	VXORPS Y0, Y0, Y0
	MOVQ SI, R12
	MOVQ R10, R8
	MOVQ BX, R11

q2group:
	MOVQ DI, R13
	ADDQ $64, DI
	MOVQ $32, CX
	CMPQ R11, CX
	CMOVQLT R11, CX
	SUBQ CX, R11

q2blk:
	VMOVDQU (DI), Y4
	VPXOR Y15, Y4, Y4
	VMOVDQU (R12), Y5
	VPSIGNB Y5, Y4, Y4
	VPABSB Y5, Y5
	VPMADDUBSW Y4, Y5, Y6
	VPMADDWD Y14, Y6, Y6
	VCVTDQ2PS Y6, Y6
	MOVWLZX (R13), AX
	VMOVD AX, X7
	VCVTPH2PS X7, X7
	VMULSS (R8), X7, X7
	VBROADCASTSS X7, Y7
	VFMADD231PS Y7, Y6, Y0
	ADDQ $32, DI
	ADDQ $32, R12
	ADDQ $2, R13
	ADDQ $4, R8
	DECQ CX
	JNZ  q2blk
	TESTQ R11, R11
	JNZ  q2group

	VEXTRACTF128 $1, Y0, X1
	VADDPS X1, X0, X0
	VHADDPS X0, X0, X0
	VHADDPS X0, X0, X0
	VMOVSS X0, (DX)
	ADDQ $4, DX
	DECQ R9
	JNZ  q2row
	VZEROUPPER
	RET

// Q8PAIR takes the block pair whose quants are at off(DI): Z5 starts from
// the pair's corrections, spread from cv by the index idx, so that after
// VPDPBUSD of the stored weights with xq each block's 8 lanes sum to its
// exact dot product; the pair's scales, spread from sv likewise, multiply
// it into acc.
#define Q8PAIR(off, idx, sv, cv, acc) \
	VMOVDQU32 off(DI), Z4; \
	VPERMD cv, idx, Z5; \
	VPDPBUSD off(R12), Z4, Z5; \
	VCVTDQ2PS Z5, Z5; \
	VPERMPS sv, idx, Z6; \
	VFMADD231PS Z6, Z5, acc

// Q8HEAD reads a group header at DI and the x values of its 32 blocks
// (AX: xd, R8: xc): Z2, Z3 = d_w·d_x of blocks 0-15, 16-31; Z10, Z11 = xc
// of blocks 0-15, 16-31. DI moves on to the quants.
#define Q8HEAD \
	VCVTPH2PS (DI), Z2; \
	VCVTPH2PS 32(DI), Z3; \
	VMULPS (AX), Z2, Z2; \
	VMULPS 64(AX), Z3, Z3; \
	VMOVDQU32 (R8), Z10; \
	VMOVDQU32 64(R8), Z11; \
	ADDQ $64, DI

// func dotRowsQ8VNNI(xq *int8, xc *int32, xd *float32, w *uint8, nb, rows int, out *float32)
// Whole groups: the header, then 16 block pairs (64 bytes each) unrolled.
// The last group's nb%32 blocks (an even number) are taken a pair at a
// time, the scale and correction vectors shifted down two lanes after
// each. R12, R8 and AX walk xq, xc and xd per row; DI runs on through all
// rows; CX counts the row's blocks.
TEXT ·dotRowsQ8VNNI(SB), NOSPLIT, $0-56
	MOVQ xq+0(FP), SI
	MOVQ xc+8(FP), R13
	MOVQ xd+16(FP), R10
	MOVQ w+24(FP), DI
	MOVQ nb+32(FP), BX
	MOVQ rows+40(FP), R9
	MOVQ out+48(FP), DX
	LEAQ ·q8Perm(SB), AX
	VMOVDQU32 0(AX), Z24
	VMOVDQU32 64(AX), Z25
	VMOVDQU32 128(AX), Z26
	VMOVDQU32 192(AX), Z27
	VMOVDQU32 256(AX), Z28
	VMOVDQU32 320(AX), Z29
	VMOVDQU32 384(AX), Z30
	VMOVDQU32 448(AX), Z31

vrow:
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	MOVQ SI, R12
	MOVQ R13, R8
	MOVQ R10, AX
	MOVQ BX, CX
	SUBQ $32, CX
	JLT  vtail

vgroup:
	Q8HEAD
	Q8PAIR(0, Z24, Z2, Z10, Z0)
	Q8PAIR(64, Z25, Z2, Z10, Z1)
	Q8PAIR(128, Z26, Z2, Z10, Z0)
	Q8PAIR(192, Z27, Z2, Z10, Z1)
	Q8PAIR(256, Z28, Z2, Z10, Z0)
	Q8PAIR(320, Z29, Z2, Z10, Z1)
	Q8PAIR(384, Z30, Z2, Z10, Z0)
	Q8PAIR(448, Z31, Z2, Z10, Z1)
	Q8PAIR(512, Z24, Z3, Z11, Z0)
	Q8PAIR(576, Z25, Z3, Z11, Z1)
	Q8PAIR(640, Z26, Z3, Z11, Z0)
	Q8PAIR(704, Z27, Z3, Z11, Z1)
	Q8PAIR(768, Z28, Z3, Z11, Z0)
	Q8PAIR(832, Z29, Z3, Z11, Z1)
	Q8PAIR(896, Z30, Z3, Z11, Z0)
	Q8PAIR(960, Z31, Z3, Z11, Z1)
	ADDQ $1024, DI
	ADDQ $1024, R12
	ADDQ $128, R8
	ADDQ $128, AX
	SUBQ $32, CX
	JGE  vgroup

vtail:
	ADDQ $32, CX
	JZ   vdone
	Q8HEAD

vpair:
	Q8PAIR(0, Z24, Z2, Z10, Z0)
	VALIGND $2, Z2, Z3, Z2
	VALIGND $2, Z3, Z3, Z3
	VALIGND $2, Z10, Z11, Z10
	VALIGND $2, Z11, Z11, Z11
	ADDQ $64, DI
	ADDQ $64, R12
	SUBQ $2, CX
	JNZ  vpair

vdone:
	HSUM2Z
	VMOVSS X0, (DX)
	ADDQ $4, DX
	DECQ R9
	JNZ  vrow
	VZEROUPPER
	RET

// func quantizeActAVX512(q *int8, c *int32, d *float32, x *float32, nb int)
// quantizeAct for nb whole blocks of x, by the same float32 operations:
// d = max|x|/127, quants round(x·(127/max|x|)) to nearest even (the
// default MXCSR rounding of VCVTPS2DQ), c = -16·Σ quants.
TEXT ·quantizeActAVX512(SB), NOSPLIT, $0-40
	MOVQ q+0(FP), DI
	MOVQ c+8(FP), R8
	MOVQ d+16(FP), R10
	MOVQ x+24(FP), SI
	MOVQ nb+32(FP), CX
	MOVL $0x7fffffff, AX
	VPBROADCASTD AX, Z15
	MOVL $0x42fe0000, AX // 127.0
	VMOVD AX, X14
	VXORPS X13, X13, X13

qablk:
	VMOVUPS (SI), Z0
	VMOVUPS 64(SI), Z1
	VPANDD Z15, Z0, Z2
	VPANDD Z15, Z1, Z3
	VMAXPS Z3, Z2, Z2
	VEXTRACTF64X4 $1, Z2, Y3
	VMAXPS Y3, Y2, Y2
	VEXTRACTF128 $1, Y2, X3
	VMAXPS X3, X2, X2
	VPERMILPS $0x4e, X2, X3
	VMAXPS X3, X2, X2
	VPERMILPS $0xb1, X2, X3
	VMAXPS X3, X2, X2
	VUCOMISS X13, X2
	JEQ  qazero
	VDIVSS X14, X2, X4
	VMOVSS X4, (R10)
	VDIVSS X2, X14, X4
	VBROADCASTSS X4, Z4
	VMULPS Z4, Z0, Z0
	VMULPS Z4, Z1, Z1
	VCVTPS2DQ Z0, Z0
	VCVTPS2DQ Z1, Z1
	VPMOVSDB Z0, X5
	VPMOVSDB Z1, X6
	VMOVDQU X5, (DI)
	VMOVDQU X6, 16(DI)
	VPADDD Z1, Z0, Z0
	VEXTRACTI64X4 $1, Z0, Y1
	VPADDD Y1, Y0, Y0
	VEXTRACTI128 $1, Y0, X1
	VPADDD X1, X0, X0
	VPSHUFD $0x4e, X0, X1
	VPADDD X1, X0, X0
	VPSHUFD $0xb1, X0, X1
	VPADDD X1, X0, X0
	VMOVD X0, AX
	IMULL $-16, AX
	MOVL AX, (R8)
	JMP  qanext

qazero:
	VMOVSS X13, (R10)
	VMOVDQU X13, (DI)
	VMOVDQU X13, 16(DI)
	MOVL $0, (R8)

qanext:
	ADDQ $128, SI
	ADDQ $32, DI
	ADDQ $4, R8
	ADDQ $4, R10
	DECQ CX
	JNZ  qablk
	VZEROUPPER
	RET

// func quantizeQ8AVX512(head, quants *uint8, src *float32, nb int)
// quantizeQ8Row for nb > 0 whole blocks of src, by the same float32
// operations: the scale max|x|/127 rounded up to binary16 by VCVTPS2PH's
// round-up mode (saturated to the largest finite one), written to head;
// quants round(clamp(x·(1/scale), ±127)) to nearest even, +128, to quants.
TEXT ·quantizeQ8AVX512(SB), NOSPLIT, $0-32
	MOVQ head+0(FP), R8
	MOVQ quants+8(FP), DI
	MOVQ src+16(FP), SI
	MOVQ nb+24(FP), CX
	MOVL $0x7fffffff, AX
	VPBROADCASTD AX, Z15
	MOVL $0x42fe0000, AX // 127.0
	VMOVD AX, X14
	VPBROADCASTD AX, Z12
	MOVL $0xc2fe0000, AX // -127.0
	VPBROADCASTD AX, Z11
	MOVL $0x3f800000, AX // 1.0
	VMOVD AX, X13
	MOVL $0x80808080, AX
	VPBROADCASTD AX, X10

q8wblk:
	VMOVUPS (SI), Z0
	VMOVUPS 64(SI), Z1
	VPANDD Z15, Z0, Z2
	VPANDD Z15, Z1, Z3
	VMAXPS Z3, Z2, Z2
	VEXTRACTF64X4 $1, Z2, Y3
	VMAXPS Y3, Y2, Y2
	VEXTRACTF128 $1, Y2, X3
	VMAXPS X3, X2, X2
	VPERMILPS $0x4e, X2, X3
	VMAXPS X3, X2, X2
	VPERMILPS $0xb1, X2, X3
	VMAXPS X3, X2, X2
	VDIVSS X14, X2, X3
	VCVTPS2PH $2, X3, X4
	VMOVD X4, AX
	ANDL $0xffff, AX
	CMPL AX, $0x7c00
	JLT  q8wfinite
	MOVL $0x7bff, AX
	VMOVD AX, X4

q8wfinite:
	MOVW AX, (R8)
	TESTL AX, AX
	JZ   q8wzero
	VCVTPH2PS X4, X5
	VDIVSS X5, X13, X6
	VBROADCASTSS X6, Z6
	VMULPS Z6, Z0, Z0
	VMULPS Z6, Z1, Z1
	VMINPS Z12, Z0, Z0
	VMINPS Z12, Z1, Z1
	VMAXPS Z11, Z0, Z0
	VMAXPS Z11, Z1, Z1
	VCVTPS2DQ Z0, Z0
	VCVTPS2DQ Z1, Z1
	VPMOVSDB Z0, X5
	VPMOVSDB Z1, X6
	VPXOR X10, X5, X5
	VPXOR X10, X6, X6
	VMOVDQU X5, (DI)
	VMOVDQU X6, 16(DI)
	JMP  q8wnext

q8wzero:
	VMOVDQU X10, (DI)
	VMOVDQU X10, 16(DI)

q8wnext:
	ADDQ $128, SI
	ADDQ $32, DI
	ADDQ $2, R8
	DECQ CX
	JNZ  q8wblk
	VZEROUPPER
	RET

// func axpyRowsAVX2(y, a, w *float32, n, ldw, rows int)
TEXT ·axpyRowsAVX2(SB), NOSPLIT, $0-48
	AXPYROWS(F32W, 2, 32, 64, 96, 128, 32)
