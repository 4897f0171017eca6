package comm_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/gearboxlm/gearbox/comm"
)

// BenchmarkMPIAllReduce is BenchmarkAllReduce and a one-float all-reduce
// (the latency) on the MPI transport. It runs only under mpirun, with a
// fixed iteration count so that every process runs the same operations:
//
//	go test -c -o /tmp/comm.test ./comm
//	mpirun --allow-run-as-root --oversubscribe --bind-to none -n 2 /tmp/comm.test \
//	    -test.run '^$' -test.bench BenchmarkMPIAllReduce -test.benchtime 200x
func BenchmarkMPIAllReduce(b *testing.B) {
	if os.Getenv("OMPI_COMM_WORLD_SIZE") == "" {
		b.Skip("runs under mpirun with -test.benchtime Nx (see the doc comment)")
	}
	m, err := comm.OpenMPI(comm.MPIOptions{})
	if err != nil {
		b.Fatal(err)
	}
	w, err := m.NewWorld(0)
	if err != nil {
		b.Fatal(err)
	}
	c := w.Comm(m.Rank())
	p := m.Size()
	for _, size := range []int{4, 4 << 10, 8 << 20} {
		b.Run(fmt.Sprintf("P=%d/%dB", p, size), func(b *testing.B) {
			buf := input(1, m.Rank(), size/4)
			b.SetBytes(int64(size))
			b.ReportAllocs()
			if err := c.Barrier(bg); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for range b.N {
				if err := c.AllReduce(bg, buf); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			algbw := float64(size) * float64(b.N) / b.Elapsed().Seconds() / 1e9
			b.ReportMetric(algbw, "algGB/s")
			b.ReportMetric(algbw*2*float64(p-1)/float64(p), "busGB/s")
		})
	}
}
