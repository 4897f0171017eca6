package tensor

import (
	"testing"
	"unsafe"

	"github.com/gearboxlm/gearbox/internal/procmaps"
)

// TestResidentWeightsAdvised checks that converted and quantized copies
// of a matrix sit in memory advised MADV_HUGEPAGE (their mappings'
// VmFlags carry "hg"): the BF16 and float32 copies in allocations of
// their own, the Q8_0 copy (under residentChunk/4) in a shared chunk.
func TestResidentWeightsAdvised(t *testing.T) {
	const n, k = 4096, 2048 // 32 MiB of float32, 8.5 MiB of Q8_0
	w := NewWeightsF32(make([]float32, n*k), n, k)
	for _, dt := range []DType{BF16, Q8_0} {
		c := Convert(nil, w, dt)
		var p unsafe.Pointer
		if dt == Q8_0 {
			p = unsafe.Pointer(&c.q[len(c.q)/2])
		} else {
			p = unsafe.Pointer(&c.half[len(c.half)/2])
		}
		procmaps.CheckAdvised(t, p, dt.String()+" copy")
		back := Convert(nil, c, F32)
		procmaps.CheckAdvised(t, unsafe.Pointer(&back.f32[len(back.f32)/2]), "float32 copy of "+dt.String())
	}
}
