//go:build amd64 && !noasm

package tensor

// q8TileVNNI is q8TileFunc's kernel by AVX-512 VNNI (q8gemm_amd64.s), on
// raw pointers: x's first row at xq, xc, xd (rows ldx blocks apart), the
// first panel's first unit at wq and ws, nu > 0 units, np > 0 panels,
// 12 results a panel at out.
//
//go:noescape
func q8TileVNNI(xq *int8, xc *int32, xd *float32, ldx int, wq *uint8, ws *float32, nu, np int, out *float32)

// q8TileAsm is the q8TileFunc of q8TileVNNI.
func q8TileAsm(a *q8Act, xo, nbA int, s *q8Slab, nu, np int, out []float32) {
	last := xo + (q8TileR-1)*nbA + nu*q8Unit // one past the last x block read
	_ = a.q[last*Q8Block-1]
	_ = a.c[last-1]
	_ = a.d[last-1]
	_ = s.q[np*nu*q8PanelUnitSz-1]
	_ = s.s[np*nu*q8TileC*q8Unit-1]
	_ = out[np*q8TileR*q8TileC-1]
	q8TileVNNI(&a.q[xo*Q8Block], &a.c[xo], &a.d[xo], nbA, &s.q[0], &s.s[0], nu, np, &out[0])
}

// q8Tile returns the tile kernel of Q8_0 prefill at the current kernel
// switches, or nil where the float32 GEMM on dequantized panels serves it
// (see q8gemm.go).
func q8Tile() q8TileFunc {
	switch {
	case useAsm && useAVX512 && vnniAvailable:
		return q8TileAsm
	case useAsm:
		return nil
	}
	return q8TileGo
}
