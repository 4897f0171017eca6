//go:build amd64 && !noasm && (!openblas || !cgo)

#include "textflag.h"

// AVX2 kernels of the packed GEMM: the 6x16 micro-kernel and the packing
// transposes. Operand order as in simd_amd64.s (destination last).

// GEMMSTEP is one k step of the 6x16 micro-kernel: two vectors of the
// packed B panel times six broadcast elements of the packed A panel.
#define GEMMSTEP(ao, bo) \
	VMOVUPS bo(BX), Y12; \
	VMOVUPS bo+32(BX), Y13; \
	VBROADCASTSS ao(AX), Y14; \
	VFMADD231PS Y12, Y14, Y0; \
	VFMADD231PS Y13, Y14, Y1; \
	VBROADCASTSS ao+4(AX), Y15; \
	VFMADD231PS Y12, Y15, Y2; \
	VFMADD231PS Y13, Y15, Y3; \
	VBROADCASTSS ao+8(AX), Y14; \
	VFMADD231PS Y12, Y14, Y4; \
	VFMADD231PS Y13, Y14, Y5; \
	VBROADCASTSS ao+12(AX), Y15; \
	VFMADD231PS Y12, Y15, Y6; \
	VFMADD231PS Y13, Y15, Y7; \
	VBROADCASTSS ao+16(AX), Y14; \
	VFMADD231PS Y12, Y14, Y8; \
	VFMADD231PS Y13, Y14, Y9; \
	VBROADCASTSS ao+20(AX), Y15; \
	VFMADD231PS Y12, Y15, Y10; \
	VFMADD231PS Y13, Y15, Y11

// func gemm6x16AVX2(kc int, a, b, c *float32, ldc int, acc bool)
TEXT ·gemm6x16AVX2(SB), NOSPLIT, $0-41
	MOVQ kc+0(FP), CX
	MOVQ a+8(FP), AX
	MOVQ b+16(FP), BX
	MOVQ c+24(FP), DX
	MOVQ ldc+32(FP), R8
	SHLQ $2, R8
	LEAQ (DX)(R8*2), R10
	LEAQ (R10)(R8*2), R12
	PREFETCHT0 (DX)
	PREFETCHT0 (DX)(R8*1)
	PREFETCHT0 (R10)
	PREFETCHT0 (R10)(R8*1)
	PREFETCHT0 (R12)
	PREFETCHT0 (R12)(R8*1)
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	VXORPS Y8, Y8, Y8
	VXORPS Y9, Y9, Y9
	VXORPS Y10, Y10, Y10
	VXORPS Y11, Y11, Y11
	SUBQ $4, CX
	JLT  gemmtail

gemm4:
	GEMMSTEP(0, 0)
	GEMMSTEP(24, 64)
	GEMMSTEP(48, 128)
	GEMMSTEP(72, 192)
	ADDQ $96, AX
	ADDQ $256, BX
	SUBQ $4, CX
	JGE  gemm4

gemmtail:
	ADDQ $4, CX
	JZ   gemmstore

gemm1:
	GEMMSTEP(0, 0)
	ADDQ $24, AX
	ADDQ $64, BX
	DECQ CX
	JNZ  gemm1

gemmstore:
	LEAQ (DX)(R8*1), R9
	LEAQ (DX)(R8*2), R10
	LEAQ (R10)(R8*1), R11
	LEAQ (R10)(R8*2), R12
	LEAQ (R11)(R8*2), R13
	CMPB acc+40(FP), $0
	JEQ  gemmput
	VADDPS (DX), Y0, Y0
	VADDPS 32(DX), Y1, Y1
	VADDPS (R9), Y2, Y2
	VADDPS 32(R9), Y3, Y3
	VADDPS (R10), Y4, Y4
	VADDPS 32(R10), Y5, Y5
	VADDPS (R11), Y6, Y6
	VADDPS 32(R11), Y7, Y7
	VADDPS (R12), Y8, Y8
	VADDPS 32(R12), Y9, Y9
	VADDPS (R13), Y10, Y10
	VADDPS 32(R13), Y11, Y11

gemmput:
	VMOVUPS Y0, (DX)
	VMOVUPS Y1, 32(DX)
	VMOVUPS Y2, (R9)
	VMOVUPS Y3, 32(R9)
	VMOVUPS Y4, (R10)
	VMOVUPS Y5, 32(R10)
	VMOVUPS Y6, (R11)
	VMOVUPS Y7, 32(R11)
	VMOVUPS Y8, (R12)
	VMOVUPS Y9, 32(R12)
	VMOVUPS Y10, (R13)
	VMOVUPS Y11, 32(R13)
	VZEROUPPER
	RET

// TRANSPOSE8 transposes the 8x8 block in Y0-Y7 (row i in Yi) into Y8-Y15
// (column j in Y(8+j)); it clobbers Y0-Y7.
#define TRANSPOSE8 \
	VUNPCKLPS Y1, Y0, Y8; \
	VUNPCKHPS Y1, Y0, Y9; \
	VUNPCKLPS Y3, Y2, Y10; \
	VUNPCKHPS Y3, Y2, Y11; \
	VUNPCKLPS Y5, Y4, Y12; \
	VUNPCKHPS Y5, Y4, Y13; \
	VUNPCKLPS Y7, Y6, Y14; \
	VUNPCKHPS Y7, Y6, Y15; \
	VSHUFPS $0x44, Y10, Y8, Y0; \
	VSHUFPS $0xee, Y10, Y8, Y1; \
	VSHUFPS $0x44, Y11, Y9, Y2; \
	VSHUFPS $0xee, Y11, Y9, Y3; \
	VSHUFPS $0x44, Y14, Y12, Y4; \
	VSHUFPS $0xee, Y14, Y12, Y5; \
	VSHUFPS $0x44, Y15, Y13, Y6; \
	VSHUFPS $0xee, Y15, Y13, Y7; \
	VPERM2F128 $0x20, Y4, Y0, Y8; \
	VPERM2F128 $0x20, Y5, Y1, Y9; \
	VPERM2F128 $0x20, Y6, Y2, Y10; \
	VPERM2F128 $0x20, Y7, Y3, Y11; \
	VPERM2F128 $0x31, Y4, Y0, Y12; \
	VPERM2F128 $0x31, Y5, Y1, Y13; \
	VPERM2F128 $0x31, Y6, Y2, Y14; \
	VPERM2F128 $0x31, Y7, Y3, Y15

// func pack16AVX2(dst, src *float32, lds, kc int)
// Two passes of eight rows; each step transposes an 8x8 block.
TEXT ·pack16AVX2(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ lds+16(FP), R8
	SHLQ $2, R8
	LEAQ (R8)(R8*2), R12
	MOVQ $2, DX

packhalf:
	MOVQ kc+24(FP), CX
	MOVQ DI, BX
	MOVQ SI, AX
	LEAQ (SI)(R8*4), R9

pack8:
	VMOVUPS (AX), Y0
	VMOVUPS (AX)(R8*1), Y1
	VMOVUPS (AX)(R8*2), Y2
	VMOVUPS (AX)(R12*1), Y3
	VMOVUPS (R9), Y4
	VMOVUPS (R9)(R8*1), Y5
	VMOVUPS (R9)(R8*2), Y6
	VMOVUPS (R9)(R12*1), Y7
	TRANSPOSE8
	VMOVUPS Y8, (BX)
	VMOVUPS Y9, 64(BX)
	VMOVUPS Y10, 128(BX)
	VMOVUPS Y11, 192(BX)
	VMOVUPS Y12, 256(BX)
	VMOVUPS Y13, 320(BX)
	VMOVUPS Y14, 384(BX)
	VMOVUPS Y15, 448(BX)
	ADDQ $32, AX
	ADDQ $32, R9
	ADDQ $512, BX
	SUBQ $8, CX
	JNZ  pack8

	ADDQ $32, DI
	LEAQ (SI)(R8*8), SI
	DECQ DX
	JNZ  packhalf
	VZEROUPPER
	RET

// PUT6 stores lanes 0-5 of y (xmm alias x) at off(DI); clobbers X0.
#define PUT6(y, x, off) \
	VMOVUPS x, off(DI); \
	VEXTRACTF128 $1, y, X0; \
	VMOVLPS X0, off+16(DI)

// func pack6AVX2(dst, src *float32, lds, kc int)
// Rows 6 and 7 of each 8x8 block repeat row 5 and are not stored.
TEXT ·pack6AVX2(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ lds+16(FP), R8
	SHLQ $2, R8
	MOVQ kc+24(FP), CX
	LEAQ (R8)(R8*2), R12
	LEAQ (SI)(R8*4), R9

pack6loop:
	VMOVUPS (SI), Y0
	VMOVUPS (SI)(R8*1), Y1
	VMOVUPS (SI)(R8*2), Y2
	VMOVUPS (SI)(R12*1), Y3
	VMOVUPS (R9), Y4
	VMOVUPS (R9)(R8*1), Y5
	VMOVUPS Y5, Y6
	VMOVUPS Y5, Y7
	TRANSPOSE8
	PUT6(Y8, X8, 0)
	PUT6(Y9, X9, 24)
	PUT6(Y10, X10, 48)
	PUT6(Y11, X11, 72)
	PUT6(Y12, X12, 96)
	PUT6(Y13, X13, 120)
	PUT6(Y14, X14, 144)
	PUT6(Y15, X15, 168)
	ADDQ $32, SI
	ADDQ $32, R9
	ADDQ $192, DI
	SUBQ $8, CX
	JNZ  pack6loop
	VZEROUPPER
	RET
