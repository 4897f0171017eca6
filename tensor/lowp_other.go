//go:build !amd64 || noasm

package tensor

// Without the assembly kernels the low-precision products run the portable
// Go code.

func decodeBF16(dst []float32, src []uint16)            { decodeBF16Go(dst, src) }
func decodeF16(dst []float32, src []uint16)             { decodeF16Go(dst, src) }
func dequantQ8(dst []float32, q []uint8, scale float32) { dequantQ8Go(dst, q, scale) }
func splitX(DType, []float32, *[]float32) []float32     { return nil }

func dotRowsHalf(dt DType, x, _ []float32, w []uint16, k, ldw int, out []float32) {
	dotRowsHalfGo(dt, x, w, k, ldw, out)
}

func dotRowsQ8(a *q8Act, i, nb, nbA int, wq []uint8, out []float32) {
	dotRowsQ8Go(a, i, nb, nbA, wq, out)
}

func quantizeAct(q []int8, c []int32, d []float32, x []float32) { quantizeActGo(q, c, d, x) }

func quantizeQ8Row(row []uint8, nb int, src []float32) { quantizeQ8RowGo(row, nb, src, 0) }

func f16QuadDots() f16QuadFunc { return nil }
