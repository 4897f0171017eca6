package tensor

// The gemv path serves small m (decode): no packing, w read once.
const (
	// gemvMaxM is the largest m served by gemv. Up to it, streaming w once
	// with dot-product tiles beats packing it for the GEMM micro-kernel
	// (measured on Zen 4 with 2 threads: gemv wins up to m=32, ties at 48).
	gemvMaxM = 32
	// gemvKB is the k block of gemv for m > 2: four w rows of gemvKB
	// floats (8 KiB) stay in L1 while every row of x passes over them.
	gemvKB = 512
)

// gemvWork is a product of decode-sized m laid out for a pool job: units
// units of work (rows of w, or groups of four rows), run(lo, hi) computes
// units [lo, hi) of y, and free releases the work's scratch once every
// unit is done. Products of the same x fuse into one job (MatMulWs).
type gemvWork struct {
	units int
	run   func(lo, hi int)
	free  func()
}

// do runs the work on p.
func (wk gemvWork) do(p *Pool) {
	p.Run(wk.units, wk.run)
	if wk.free != nil {
		wk.free()
	}
}

// gemv serves small m: each worker streams its share of w's rows, one row
// at a time for m == 1 and four at a time otherwise, and takes the dot
// products with every row of x, so w is read from memory once. For m > 2
// the four rows are walked in gemvKB-long pieces that stay in L1 while
// the rows of x pass over them.
func gemv(y, x, w []float32, m, k, n int, acc bool) gemvWork {
	if m == 1 {
		// One row of w at a time keeps a single sequential stream per
		// worker, which reads w about 25% faster than four rows at once.
		return gemvWork{units: n, run: func(lo, hi int) {
			if !acc {
				dotRowsF32(y[lo:hi], x, w[lo*k:hi*k], k)
				return
			}
			var sum [64]float32
			for j := lo; j < hi; j += len(sum) {
				s := sum[:min(len(sum), hi-j)]
				dotRowsF32(s, x, w[j*k:(j+len(s))*k], k)
				for i, v := range s {
					y[j+i] += v
				}
			}
		}}
	}
	kb := k
	if m > 2 {
		kb = gemvKB
	}
	return gemvWork{units: (n + 3) / 4, run: func(lo, hi int) {
		var sum [gemvMaxM * 4]float32
		for j := lo * 4; j < min(hi*4, n); j += 4 {
			if j+4 > n {
				for ; j < n; j++ {
					wj := w[j*k : (j+1)*k]
					for i := range m {
						put(y, i*n+j, dot(x[i*k:(i+1)*k], wj), acc)
					}
				}
				return
			}
			clear(sum[:m*4])
			for k0 := 0; k0 < k; k0 += kb {
				kc := min(kb, k-k0)
				dotRows(m, kc, x[k0:], k, w[j*k+k0:], k, sum[:m*4])
			}
			for i := range m {
				for c := range 4 {
					put(y, i*n+j+c, sum[i*4+c], acc)
				}
			}
		}
	}}
}

// quadGEMV is the worker of the quad GEMVs (gemvPairs, gemvF16Quads) over
// the groups of four rows of w [lo, hi): for each, dots(j0, s) adds the
// products of the quads of x rows with rows j0..j0+3 into s (row i's four
// sums at s[4i:]), tail(i, j0, s) adds row i's columns past the kernel's,
// and the sums are stored into y (or added, with acc). The last group of
// an n not a multiple of four is the last four rows, of which only the
// new ones are stored. m ≤ mq ≤ gemvMaxM rows; mq is m padded to quads.
func quadGEMV(y []float32, n, m, mq int, acc bool, lo, hi int, dots func(j0 int, s []float32), tail func(i, j0 int, s []float32)) {
	var sum [gemvMaxM * 4]float32
	s := sum[:mq*4]
	for j := lo * 4; j < min(hi*4, n); j += 4 {
		j0 := min(j, n-4)
		clear(s)
		dots(j0, s)
		for i := range m {
			tail(i, j0, s)
			for c := j - j0; c < 4; c++ {
				put(y, i*n+j0+c, s[i*4+c], acc)
			}
		}
	}
}

// dotRows adds to sum[i*4+j] the dot product of x row i < m (row stride
// ldx) with w row j < 4 (row stride ldw) over k elements: in quads of x
// rows where the AVX-512 kernel runs, in pairs otherwise.
func dotRows(m, k int, x []float32, ldx int, w []float32, ldw int, sum []float32) {
	var out [8]float32
	for i := dotQuads(m, k, x, ldx, w, ldw, sum); i < m; i += 2 {
		rows := min(2, m-i)
		dotTile(rows, k, x[i*ldx:], ldx, w, ldw, &out)
		for t, v := range out[:rows*4] {
			sum[i*4+t] += v
		}
	}
}

// dotRowsF32Go is the portable dotRowsF32.
func dotRowsF32Go(out, x, w []float32, k int) {
	for r := range out {
		out[r] = dot(x, w[r*k:(r+1)*k])
	}
}

func put(y []float32, i int, v float32, acc bool) {
	if acc {
		y[i] += v
	} else {
		y[i] = v
	}
}

// storeTile stores (or with add adds) the rows×cols corner of tile t (row
// stride ldt) into c (row stride ldc): an edge tile's results (the
// float32 GEMM's edgeKernel, gemmBF16). It builds under every tag.
func storeTile(c []float32, ldc int, t []float32, ldt, rows, cols int, add bool) {
	for r := range rows {
		row := c[r*ldc : r*ldc+cols]
		if add {
			for j := range row {
				row[j] += t[r*ldt+j]
			}
		} else {
			copy(row, t[r*ldt:r*ldt+cols])
		}
	}
}
