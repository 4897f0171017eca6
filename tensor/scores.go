package tensor

import "fmt"

// Attention over float32 keys and values for query heads that share a KV
// head: the queries' scores against a block of keys, each key row read
// once for all of them, and a weighted sum of a block of value rows.

// Scores sets s[i·n+j] = x_i·w_j for the m rows x_i of x, k elements
// each stored back to back, and the n rows w_j of w, k elements each,
// ldw ≥ k apart (s is m×n): the products of m queries with n keys, every
// key row read once for all the queries (four keys at a time against up
// to 32 queries, by the dot tiles of the decode GEMV).
func Scores(s, x, w []float32, m, n, k, ldw int) {
	switch {
	case m < 0 || n < 0 || k < 0 || ldw < k:
		panic(fmt.Sprintf("tensor.Scores: bad shape m=%d n=%d k=%d ldw=%d", m, n, k, ldw))
	case len(s) < m*n || len(x) < m*k || n > 0 && len(w) < (n-1)*ldw+k:
		panic(fmt.Sprintf("tensor.Scores: len(s)=%d len(x)=%d len(w)=%d for m=%d n=%d k=%d ldw=%d", len(s), len(x), len(w), m, n, k, ldw))
	}
	if !scoresAsm(s, x, w, m, n, k, ldw) {
		scoresTiles(s, x, w, m, n, k, ldw)
	}
}

// scoresTiles is Scores by dotRows, a gemvMaxM rows of x at a time.
func scoresTiles(s, x, w []float32, m, n, k, ldw int) {
	var sum [gemvMaxM * 4]float32
	for i0 := 0; i0 < m; i0 += gemvMaxM {
		mm := min(gemvMaxM, m-i0)
		xi := x[i0*k:]
		j := 0
		for ; j+4 <= n; j += 4 {
			clear(sum[:mm*4])
			dotRows(mm, k, xi, k, w[j*ldw:], ldw, sum[:mm*4])
			for i := range mm {
				copy(s[(i0+i)*n+j:(i0+i)*n+j+4], sum[i*4:i*4+4])
			}
		}
		for ; j < n; j++ {
			for i := range mm {
				s[(i0+i)*n+j] = dot(xi[i*k:(i+1)*k], w[j*ldw:j*ldw+k])
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
