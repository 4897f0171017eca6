package safetensors

import (
	"math/rand/v2"
	"testing"
)

// benchmarkRead measures ReadFloat32 on a 4M-element tensor of dtype d and
// reports throughput in GB/s of encoded input.
func benchmarkRead(b *testing.B, d DType) {
	const n = 4 << 20
	rng := rand.New(rand.NewPCG(3, 4))
	vals := make([]float32, n)
	for i := range vals {
		vals[i] = float32(rng.NormFloat64())
	}
	f, err := Parse("bench", encodeFile(b, []WriteTensor{{Name: "w", DType: d, Shape: []int{n}, Data: vals}}, nil))
	if err != nil {
		b.Fatal(err)
	}
	tensor, _ := f.Tensor("w")
	dst := make([]float32, n)
	in := int64(n * d.Size())
	b.SetBytes(in)
	for b.Loop() {
		if err := tensor.ReadFloat32(dst); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(in)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
}

func BenchmarkReadFloat32BF16(b *testing.B) { benchmarkRead(b, BF16) }
func BenchmarkReadFloat32F16(b *testing.B)  { benchmarkRead(b, F16) }
func BenchmarkReadFloat32F32(b *testing.B)  { benchmarkRead(b, F32) }
