//go:build amd64 && !noasm

#include "textflag.h"

// The Q8_0 prefill tile (see q8gemm.go). Registers: Z0-Z11 the int32
// block sums of x row i (0-3) with w row j (0-2) in Z(3i+j), Z12-Z23 the
// float32 accumulators in the same order, Z24-Z26 the units' t-th vectors
// of the three w rows, Z27 the x row's, Z28 a w row's scales.

// Q8STEP adds the unit's t-th 64 bytes (at off) of every x row times
// every w row into the block sums.
#define Q8STEP(off) \
	VMOVDQU32 off(DI), Z24; \
	VMOVDQU32 (off+512)(DI), Z25; \
	VMOVDQU32 (off+1024)(DI), Z26; \
	VMOVDQU32 off(SI), Z27; \
	VPDPBUSD Z27, Z24, Z0; \
	VPDPBUSD Z27, Z25, Z1; \
	VPDPBUSD Z27, Z26, Z2; \
	VMOVDQU32 off(SI)(BX*1), Z27; \
	VPDPBUSD Z27, Z24, Z3; \
	VPDPBUSD Z27, Z25, Z4; \
	VPDPBUSD Z27, Z26, Z5; \
	VMOVDQU32 off(SI)(BX*2), Z27; \
	VPDPBUSD Z27, Z24, Z6; \
	VPDPBUSD Z27, Z25, Z7; \
	VPDPBUSD Z27, Z26, Z8; \
	VMOVDQU32 off(SI)(R12*1), Z27; \
	VPDPBUSD Z27, Z24, Z9; \
	VPDPBUSD Z27, Z25, Z10; \
	VPDPBUSD Z27, Z26, Z11

// Q8SCALE converts the block sums s0-s3 (of w row j, whose scales are at
// off(R11)) to float32, multiplies them by d_w then d_x (rows 0-3 at R9,
// stride R10) and adds them to a0-a3.
#define Q8SCALE(off, s0, s1, s2, s3, a0, a1, a2, a3) \
	VMOVUPS off(R11), Z28; \
	VCVTDQ2PS s0, s0; \
	VCVTDQ2PS s1, s1; \
	VCVTDQ2PS s2, s2; \
	VCVTDQ2PS s3, s3; \
	VMULPS Z28, s0, s0; \
	VMULPS Z28, s1, s1; \
	VMULPS Z28, s2, s2; \
	VMULPS Z28, s3, s3; \
	VFMADD231PS (R9), s0, a0; \
	VFMADD231PS (R9)(R10*1), s1, a1; \
	VFMADD231PS (R9)(R10*2), s2, a2; \
	VFMADD231PS (R9)(R13*1), s3, a3

// Q8HSUM stores the sum of acc's 16 lanes at off(DX). Clobbers Z0, Z1.
#define Q8HSUM(acc, yacc, off) \
	VEXTRACTF64X4 $1, acc, Y0; \
	VADDPS yacc, Y0, Y0; \
	VEXTRACTF128 $1, Y0, X1; \
	VADDPS X1, X0, X0; \
	VHADDPS X0, X0, X0; \
	VHADDPS X0, X0, X0; \
	VMOVSS X0, off(DX)

// func q8TileVNNI(xq *int8, xc *int32, xd *float32, ldx int, wq *uint8, ws *float32, nu, np int, out *float32)
// xq, xc, xd: the first x row's quants, corrections and scales at the
// chunk's first block, rows ldx blocks apart; wq, ws: the first panel's
// first unit (three rows of q8UnitBytes quants, then the next unit), and
// its scales (three rows of 16 float32), the np > 0 panels following
// each other; nu > 0 units; out: 12 float32 a panel. R14 counts the
// panels; the x pointers restart from the stack for each.
TEXT ·q8TileVNNI(SB), NOSPLIT, $0-72
	MOVQ ldx+24(FP), R10
	MOVQ wq+32(FP), DI
	MOVQ ws+40(FP), R11
	MOVQ np+56(FP), R14
	MOVQ out+64(FP), DX
	MOVQ R10, BX
	SHLQ $5, BX             // x quants row stride: 32 bytes a block
	SHLQ $2, R10            // x corrections and scales row stride
	LEAQ (BX)(BX*2), R12
	LEAQ (R10)(R10*2), R13

q8panel:
	MOVQ xq+0(FP), SI
	MOVQ xc+8(FP), R8
	MOVQ xd+16(FP), R9
	MOVQ nu+48(FP), CX
	VPXORD Z12, Z12, Z12
	VPXORD Z13, Z13, Z13
	VPXORD Z14, Z14, Z14
	VPXORD Z15, Z15, Z15
	VPXORD Z16, Z16, Z16
	VPXORD Z17, Z17, Z17
	VPXORD Z18, Z18, Z18
	VPXORD Z19, Z19, Z19
	VPXORD Z20, Z20, Z20
	VPXORD Z21, Z21, Z21
	VPXORD Z22, Z22, Z22
	VPXORD Z23, Z23, Z23

q8unit:
	VMOVDQU32 (R8), Z0
	VMOVDQA32 Z0, Z1
	VMOVDQA32 Z0, Z2
	VMOVDQU32 (R8)(R10*1), Z3
	VMOVDQA32 Z3, Z4
	VMOVDQA32 Z3, Z5
	VMOVDQU32 (R8)(R10*2), Z6
	VMOVDQA32 Z6, Z7
	VMOVDQA32 Z6, Z8
	VMOVDQU32 (R8)(R13*1), Z9
	VMOVDQA32 Z9, Z10
	VMOVDQA32 Z9, Z11
	Q8STEP(0)
	Q8STEP(64)
	Q8STEP(128)
	Q8STEP(192)
	Q8STEP(256)
	Q8STEP(320)
	Q8STEP(384)
	Q8STEP(448)
	Q8SCALE(0, Z0, Z3, Z6, Z9, Z12, Z15, Z18, Z21)
	Q8SCALE(64, Z1, Z4, Z7, Z10, Z13, Z16, Z19, Z22)
	Q8SCALE(128, Z2, Z5, Z8, Z11, Z14, Z17, Z20, Z23)
	ADDQ $512, SI
	ADDQ $64, R8
	ADDQ $64, R9
	ADDQ $1536, DI
	ADDQ $192, R11
	DECQ CX
	JNZ  q8unit

	Q8HSUM(Z12, Y12, 0)
	Q8HSUM(Z13, Y13, 4)
	Q8HSUM(Z14, Y14, 8)
	Q8HSUM(Z15, Y15, 12)
	Q8HSUM(Z16, Y16, 16)
	Q8HSUM(Z17, Y17, 20)
	Q8HSUM(Z18, Y18, 24)
	Q8HSUM(Z19, Y19, 28)
	Q8HSUM(Z20, Y20, 32)
	Q8HSUM(Z21, Y21, 36)
	Q8HSUM(Z22, Y22, 40)
	Q8HSUM(Z23, Y23, 44)
	ADDQ $48, DX
	DECQ R14
	JNZ  q8panel
	VZEROUPPER
	RET
