//go:build amd64 && !noasm && (!openblas || !cgo)

#include "textflag.h"
#include "bf16_amd64.h"

// The BF16 GEMM micro-kernel (AVX-512 BF16): a 12×32 tile of float32
// sums of products of bfloat16 pairs.

// ROW broadcasts one row's pair at mem into Zt (register number t) and
// adds its products with the two B vectors (Z24, Z25) into Z(d0), Z(d1).
#define ROW(mem, Zt, t, d0, d1) \
	VPBROADCASTD mem, Zt; \
	DPBF16(24, t, d0); \
	DPBF16(25, t, d1)

// STEP is one pair of k: B's two 16-column vectors at bo, the twelve rows'
// pairs at ao (rows 0-2 from AX, 3-5 from R10, 6-8 from R11, 9-11 from
// R12, each triple r, r+lda, r+2·lda).
#define STEP(ao, bo) \
	VMOVUPS bo(BX), Z24; \
	VMOVUPS bo(R13), Z25; \
	ROW(ao(AX), Z26, 26, 0, 1); \
	ROW(ao(AX)(R9*1), Z27, 27, 2, 3); \
	ROW(ao(AX)(R9*2), Z28, 28, 4, 5); \
	ROW(ao(R10), Z29, 29, 6, 7); \
	ROW(ao(R10)(R9*1), Z26, 26, 8, 9); \
	ROW(ao(R10)(R9*2), Z27, 27, 10, 11); \
	ROW(ao(R11), Z28, 28, 12, 13); \
	ROW(ao(R11)(R9*1), Z29, 29, 14, 15); \
	ROW(ao(R11)(R9*2), Z26, 26, 16, 17); \
	ROW(ao(R12), Z27, 27, 18, 19); \
	ROW(ao(R12)(R9*1), Z28, 28, 20, 21); \
	ROW(ao(R12)(R9*2), Z29, 29, 22, 23)

// TRIPLES points R10, R11 and R12 at rows 3, 6 and 9 of twelve rows
// from base, stride bytes apart.
#define TRIPLES(base, stride) \
	LEAQ (base)(stride*2), R10; \
	ADDQ stride, R10; \
	LEAQ (R10)(stride*2), R11; \
	ADDQ stride, R11; \
	LEAQ (R11)(stride*2), R12; \
	ADDQ stride, R12

// ADDROW adds the tile row at m0 (columns 0-15) and m1 (16-31) into z0, z1.
#define ADDROW(m0, m1, z0, z1) \
	VADDPS m0, z0, z0; \
	VADDPS m1, z1, z1

// PUTROW stores z0, z1 to the tile row at m0, m1.
#define PUTROW(m0, m1, z0, z1) \
	VMOVUPS z0, m0; \
	VMOVUPS z1, m1

// TILE applies OP (ADDROW or PUTROW) to the twelve tile rows: rows 0-2
// from DX, 3-5 from R10, 6-8 from R11, 9-11 from R12, each triple r,
// r+ldc, r+2·ldc (R8 = ldc in bytes), in Z0-Z23.
#define TILE(OP) \
	OP((DX), 64(DX), Z0, Z1); \
	OP((DX)(R8*1), 64(DX)(R8*1), Z2, Z3); \
	OP((DX)(R8*2), 64(DX)(R8*2), Z4, Z5); \
	OP((R10), 64(R10), Z6, Z7); \
	OP((R10)(R8*1), 64(R10)(R8*1), Z8, Z9); \
	OP((R10)(R8*2), 64(R10)(R8*2), Z10, Z11); \
	OP((R11), 64(R11), Z12, Z13); \
	OP((R11)(R8*1), 64(R11)(R8*1), Z14, Z15); \
	OP((R11)(R8*2), 64(R11)(R8*2), Z16, Z17); \
	OP((R12), 64(R12), Z18, Z19); \
	OP((R12)(R8*1), 64(R12)(R8*1), Z20, Z21); \
	OP((R12)(R8*2), 64(R12)(R8*2), Z22, Z23)

// func gemmBF16x12x32(kp int, a *uint32, lda int, b *uint32, c *float32, ldc int, acc bool)
TEXT ·gemmBF16x12x32(SB), NOSPLIT, $0-49
	MOVQ kp+0(FP), CX
	MOVQ a+8(FP), AX
	MOVQ lda+16(FP), R9
	SHLQ $2, R9
	MOVQ b+24(FP), BX
	MOVQ CX, R13
	SHLQ $6, R13
	ADDQ BX, R13
	TRIPLES(AX, R9)
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	VPXORD Z6, Z6, Z6
	VPXORD Z7, Z7, Z7
	VPXORD Z8, Z8, Z8
	VPXORD Z9, Z9, Z9
	VPXORD Z10, Z10, Z10
	VPXORD Z11, Z11, Z11
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
	SUBQ $4, CX
	JLT  bftail

bf4:
	STEP(0, 0)
	STEP(4, 64)
	STEP(8, 128)
	STEP(12, 192)
	ADDQ $16, AX
	ADDQ $16, R10
	ADDQ $16, R11
	ADDQ $16, R12
	ADDQ $256, BX
	ADDQ $256, R13
	SUBQ $4, CX
	JGE  bf4

bftail:
	ADDQ $4, CX
	JZ   bfstore

bf1:
	STEP(0, 0)
	ADDQ $4, AX
	ADDQ $4, R10
	ADDQ $4, R11
	ADDQ $4, R12
	ADDQ $64, BX
	ADDQ $64, R13
	DECQ CX
	JNZ  bf1

bfstore:
	MOVQ c+32(FP), DX
	MOVQ ldc+40(FP), R8
	SHLQ $2, R8
	TRIPLES(DX, R8)
	CMPB acc+48(FP), $0
	JEQ  bfput
	TILE(ADDROW)

bfput:
	TILE(PUTROW)
	VZEROUPPER
	RET

// func pairsBF16AVX512(dst *uint32, src *float32, n int)
// Rounds the 2n floats at src to bfloat16 pairs at dst; n%16 == 0, n > 0.
TEXT ·pairsBF16AVX512(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX

pairs16:
	VMOVUPS (SI), Z0
	VMOVUPS 64(SI), Z1
	CVT2BF16(0, 1, 2)
	VMOVUPS Z2, (DI)
	ADDQ $128, SI
	ADDQ $64, DI
	SUBQ $16, CX
	JNZ  pairs16
	VZEROUPPER
	RET
