package tensor

import "fmt"

// Attention over float32 keys and values for query heads that share a KV
// head: the queries' scores against a block of keys, each key row read
// once for all of them, and a weighted sum of a block of value rows.

// Scores sets s[i·n+j] = x_i·w_j for the m rows x_i of x, k elements
// each stored back to back, and the n rows w_j of w, k elements each,
// ldw ≥ k apart (s is m×n): the products of m queries with n keys, every
// key row read once for all the queries (four keys at a time against up
// to 32 queries, by the dot tiles of the decode GEMV). Each score is the
// same bit for bit whatever m and n and its row's and key's places, so
// attention gives a query the same result alone or in a block of
// queries, over whatever tiles of keys.
func Scores(s, x, w []float32, m, n, k, ldw int) {
	switch {
	case m < 0 || n < 0 || k < 0 || ldw < k:
		panic(fmt.Sprintf("tensor.Scores: bad shape m=%d n=%d k=%d ldw=%d", m, n, k, ldw))
	case len(s) < m*n || len(x) < m*k || n > 0 && len(w) < (n-1)*ldw+k:
		panic(fmt.Sprintf("tensor.Scores: len(s)=%d len(x)=%d len(w)=%d for m=%d n=%d k=%d ldw=%d", len(s), len(x), len(w), m, n, k, ldw))
	}
	if !scoresAsm(s, x, w, m, n, k, ldw) {
		scores(s, x, w, m, n, k, ldw)
	}
}

// scores is Scores through the Go wrappers of the kernels, which round
// as scoresAsm's straight calls do. Keys go four at a time, and the last
// few in a full group too, so that a key's score does not depend on its
// place in w either: the last four keys, or with fewer than four keys
// each key four times over (key rows 0 apart).
func scores(s, x, w []float32, m, n, k, ldw int) {
	var sum [gemvMaxM * 4]float32
	for i0 := 0; i0 < m; i0 += gemvMaxM {
		mm := min(gemvMaxM, m-i0)
		xi := x[i0*k : (i0+mm)*k]
		if n < 4 {
			for j := range n {
				scoreGroup(sum[:mm*4], xi, mm, k, w[j*ldw:], 0)
				for i := range mm {
					s[(i0+i)*n+j] = sum[i*4]
				}
			}
			continue
		}
		for j := 0; j < n; j += 4 {
			j0 := min(j, n-4)
			scoreGroup(sum[:mm*4], xi, mm, k, w[j0*ldw:], ldw)
			storeGroup(s[i0*n:], sum[:mm*4], n, j, j0)
		}
	}
}

// storeGroup copies a group of four keys' scores, sum[i·4+c] for key
// j0+c of row i, into the rows of s (n scores apiece) for keys [j, j0+4):
// the whole group by 16-byte moves (not a memmove call per row), or the
// last few keys of a call scored in the group of its last four.
func storeGroup(s, sum []float32, n, j, j0 int) {
	rows := len(sum) / 4
	if j == j0 {
		for i := range rows {
			o := i*n + j
			*(*[4]float32)(s[o : o+4]) = *(*[4]float32)(sum[i*4 : i*4+4])
		}
		return
	}
	c := n - j
	for i := range rows {
		copy(s[i*n+j:i*n+j+c], sum[i*4+j-j0:i*4+j-j0+c])
	}
}

// scoreGroup sets sum[i·4+c] to x row i's product with the key row
// w[c·ldw:] (c < 4) for the m rows of x: AVX-512 quads of rows where that
// kernel runs, the rest one row at a time (the one-row tile rounds as a
// quad does, the two-row one does not).
func scoreGroup(sum, x []float32, m, k int, w []float32, ldw int) {
	clear(sum)
	quads := dotQuads(m, k, x, k, w, ldw, sum)
	kt := k // where dotQuads's kernel stops and dotGo takes over
	if quadKernel(k) {
		kt = k &^ 15
	}
	var out [8]float32
	for i := quads; i < m; i++ {
		dotTile(1, kt, x[i*k:], k, w, ldw, &out)
		copy(sum[i*4:i*4+4], out[:4])
		if kt < k {
			for c := range 4 {
				sum[i*4+c] += dotGo(x[i*k+kt:(i+1)*k], w[c*ldw+kt:c*ldw+k])
			}
		}
	}
}

// AxpyRows adds Σ_r a[r]·w[r·ldw+i] to y[i] for every i < len(y), row by
// row in order, bit for bit Axpy(a[r], row r, y) for each row in turn,
// with y kept in registers across the rows; the rows are ldw ≥ len(y)
// apart in w.
func AxpyRows(y, a, w []float32, ldw int) {
	n := len(y)
	if ldw < n || len(a) > 0 && len(w) < (len(a)-1)*ldw+n {
		panic(fmt.Sprintf("tensor.AxpyRows: len(w)=%d for %d rows of %d, %d apart", len(w), len(a), n, ldw))
	}
	if n > 0 {
		axpyRows(y, a, w, ldw)
	}
}

// axpyRowsGo is the portable axpyRows.
func axpyRowsGo(y, a, w []float32, ldw int) {
	n := len(y)
	for r, v := range a {
		axpyGo(v, w[r*ldw:r*ldw+n], y)
	}
}
