package tensor

import (
	"encoding/binary"
	"sync"
	"unsafe"
)

// Q8_0 prefill with int8 products (gemmQ8). The rows of x are quantized
// once per call as for the decode GEMV (quantizeAct: blocks of 32, one
// float32 scale each), and tiles of q8TileR rows of x by q8TileC rows of
// w are multiplied in 8-bit integers, each block's dot product exact in
// int32 and scaled by d_w·d_x in float32.
//
// Both operands are interleaved into units of q8Unit blocks (512 bytes):
// dword t·16+l of a unit holds bytes 4t..4t+3 of block l. One 16-lane
// VPDPBUSD of a unit's t-th 64 bytes of x with those of w thus adds four
// products of every block to its own lane, and eight of them leave lane l
// with block l's whole dot product (plus 128·Σ x_q from the +128 in the
// stored weights, cancelled by starting the lane from -128·Σ x_q): the
// int32 to float32 conversion and the scaling run once per 16 blocks per
// row pair rather than once per block pair, as in the GEMV. x is
// interleaved in place after quantization; each worker repacks its slab
// of w (q8SlabPanels panels of q8TileC rows, q8ChunkUnits units deep)
// into an L2-sized buffer, with the scales widened to float32, and runs
// every quad of x rows over it.
//
// Choices the issue left open: the tile is 4×3 (12 int32 and 12 float32
// accumulators, three w vectors, one x vector: 28 of the 32 vector
// registers); the kernel needs AVX-512 VNNI. Without it, on amd64 with
// AVX2, Q8_0 prefill keeps the float32 GEMM on dequantized panels (gemmW),
// faster there than a kernel without 8-bit dot products; without the
// assembly kernels at all (other CPUs, noasm) the portable q8TileGo runs,
// so that Q8_0 products quantize x at every m, as llama.cpp does.
const (
	q8TileR       = 4           // rows of x per tile
	q8TileC       = 3           // rows of w per tile (a panel)
	q8Unit        = 16          // blocks per interleaved unit
	q8UnitBytes   = q8Unit * 32 // bytes of one row's unit
	q8ChunkUnits  = 8           // units per k chunk: 4096 columns, 16 KiB of x per quad
	q8SlabPanels  = 16          // panels per slab: 48 rows, 192 KiB of w per chunk
	q8PanelUnitSz = q8TileC * q8UnitBytes
)

// q8Slab is a worker's repacked slab of w: quants, panel by panel, unit
// by unit, row by row (q8UnitBytes each), and scales in the same order
// (q8Unit float32 each).
type q8Slab struct {
	q []uint8
	s []float32
}

var q8SlabPool = sync.Pool{New: func() any {
	return &q8Slab{
		q: make([]uint8, q8SlabPanels*q8ChunkUnits*q8PanelUnitSz),
		s: make([]float32, q8SlabPanels*q8ChunkUnits*q8TileC*q8Unit),
	}
}}

// interleaveQ8 writes the unit src (512 bytes in block order: block l's
// bytes at 32l) to dst interleaved: dword t·16+l = dword t of block l.
// dst and src must not overlap.
func interleaveQ8(dst, src []uint8) {
	d, s := (*[q8UnitBytes]uint8)(dst), (*[q8UnitBytes]uint8)(src)
	for l := range q8Unit {
		for c := range 8 {
			o, i := (c*q8Unit+l)*4, l*32+c*4
			binary.LittleEndian.PutUint32(d[o:o+4], binary.LittleEndian.Uint32(s[i:i+4]))
		}
	}
}

// gemmQ8 computes y = x·wᵀ (acc: y += x·wᵀ) for Q8_0 w by int8 products,
// with the tile kernel tile (q8TileGo or the VNNI one). Its q8Act holds
// x's rows padded to whole tiles with zeros, the quants interleaved, and
// c = -128·Σ q per block (one lane a block, not the GEMV's eight).
func gemmQ8(p *Pool, y, x []float32, w *Weights, m int, acc bool, tile q8TileFunc) {
	n, k, nb := w.n, w.k, w.nb
	nbA := q8ActBlocks(nb)              // a multiple of q8Group, so of q8Unit
	units := (nb + q8Unit - 1) / q8Unit // that nbA holds
	mPad := (m + q8TileR - 1) / q8TileR * q8TileR
	a := getQ8Act(mPad, nbA)
	p.Run(mPad, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			q, c, d := a.q[i*nbA*Q8Block:(i+1)*nbA*Q8Block], a.c[i*nbA:(i+1)*nbA], a.d[i*nbA:(i+1)*nbA]
			if i < m {
				quantizeAct(q, c, d, x[i*k:(i+1)*k])
			} else {
				clear(q)
				clear(c)
				clear(d)
			}
			for b := range c {
				c[b] *= 8 // quantizeAct's -16·Σ q for 8 lanes a block; here one lane
			}
			var t [q8UnitBytes]uint8
			for u := 0; u < units*q8Unit; u += q8Unit {
				qu := int8Bytes(q[u*Q8Block : (u+q8Unit)*Q8Block])
				copy(t[:], qu)
				interleaveQ8(qu, t[:])
			}
		}
	})
	panels := (n + q8TileC - 1) / q8TileC
	p.Run(panels, func(lo, hi int) {
		slab := q8SlabPool.Get().(*q8Slab)
		var out [q8SlabPanels * q8TileR * q8TileC]float32
		for p0 := lo; p0 < hi; p0 += q8SlabPanels {
			np := min(q8SlabPanels, hi-p0)
			for u0 := 0; u0 < units; u0 += q8ChunkUnits {
				nu := min(q8ChunkUnits, units-u0)
				packQ8Slab(slab, w, p0*q8TileC, np, u0, nu)
				add := acc || u0 > 0
				for i0 := 0; i0 < mPad; i0 += q8TileR {
					xo := i0*nbA + u0*q8Unit // block offset of the quad's chunk
					tile(a, xo, nbA, slab, nu, np, out[:])
					for pp := range np {
						t := out[pp*q8TileR*q8TileC:]
						j0 := (p0 + pp) * q8TileC
						for r := range min(q8TileR, m-i0) {
							row := y[(i0+r)*n:]
							for c := range min(q8TileC, n-j0) {
								put(row, j0+c, t[r*q8TileC+c], add)
							}
						}
					}
				}
			}
		}
		q8SlabPool.Put(slab)
	})
	q8ActPool.Put(a)
}

// q8TileFunc sets out[(p·q8TileR+r)·q8TileC+c], for the first np panels
// p of the slab (nu units each), to the product of x rows r < q8TileR
// (a's rows of nbA blocks, from block xo of the first) with panel row c.
type q8TileFunc func(a *q8Act, xo, nbA int, s *q8Slab, nu, np int, out []float32)

// packQ8Slab repacks rows [j0, j0+np·q8TileC) of w, units [u0, u0+nu),
// into s (panel-major, nu units a panel). Rows past n and blocks past
// w.nb get scale 0.
func packQ8Slab(s *q8Slab, w *Weights, j0, np, u0, nu int) {
	rb := q8RowBytes(w.nb)
	for pp := range np {
		for u := range nu {
			for c := range q8TileC {
				o := (pp*nu+u)*q8TileC + c
				dq := s.q[o*q8UnitBytes : (o+1)*q8UnitBytes]
				ds := s.s[o*q8Unit : (o+1)*q8Unit]
				j := j0 + pp*q8TileC + c
				b0 := (u0 + u) * q8Unit
				if j >= w.n || b0 >= w.nb {
					clear(ds)
					continue
				}
				row := w.q[j*rb : (j+1)*rb]
				nbu := min(q8Unit, w.nb-b0) // w.nb is even, b0 a multiple of 16
				so, qo := q8Pos(b0)         // a unit never crosses a group
				var h [q8Unit]uint16
				for l := range nbu {
					h[l] = binary.LittleEndian.Uint16(row[so+2*l:])
				}
				decodeF16(ds[:nbu], h[:nbu])
				clear(ds[nbu:])
				if nbu == q8Unit {
					interleaveQ8(dq, row[qo:])
				} else {
					var t [q8UnitBytes]uint8
					copy(t[:], row[qo:qo+nbu*Q8Block])
					interleaveQ8(dq, t[:])
				}
			}
		}
	}
}

// q8TileGo is the portable q8TileFunc: each block's dot product is summed
// exactly in int32 (from the correction and the stored quants, as the
// VNNI kernel does), then scaled by d_w·d_x.
func q8TileGo(a *q8Act, xo, nbA int, s *q8Slab, nu, np int, out []float32) {
	for pp := range np {
		q8PanelGo(a, xo, nbA, s, pp*nu, nu, out[pp*q8TileR*q8TileC:(pp+1)*q8TileR*q8TileC])
	}
}

// q8PanelGo is q8TileGo for the panel whose first unit is unit pu.
func q8PanelGo(a *q8Act, xo, nbA int, s *q8Slab, pu, nu int, out []float32) {
	for r := range q8TileR {
		for c := range q8TileC {
			var sum float32
			for u := range nu {
				xb := xo + r*nbA + u*q8Unit
				xq := (*[q8UnitBytes]int8)(a.q[xb*Q8Block:])
				xc := (*[q8Unit]int32)(a.c[xb:])
				xd := (*[q8Unit]float32)(a.d[xb:])
				o := (pu+u)*q8TileC + c
				wq := (*[q8UnitBytes]uint8)(s.q[o*q8UnitBytes:])
				ws := (*[q8Unit]float32)(s.s[o*q8Unit:])
				for l := range q8Unit {
					t := xc[l] // -128·Σ x_q cancels the +128 of the stored quants
					for i := l * 4; i < q8UnitBytes; i += q8Unit * 4 {
						t += int32(xq[i])*int32(wq[i]) + int32(xq[i+1])*int32(wq[i+1]) +
							int32(xq[i+2])*int32(wq[i+2]) + int32(xq[i+3])*int32(wq[i+3])
					}
					sum += float32(t) * ws[l] * xd[l]
				}
			}
			out[r*q8TileC+c] = sum
		}
	}
}

// int8Bytes returns q's memory as bytes (the same length; no copy).
func int8Bytes(q []int8) []uint8 {
	if len(q) == 0 {
		return nil
	}
	return unsafe.Slice((*uint8)(unsafe.Pointer(&q[0])), len(q))
}
