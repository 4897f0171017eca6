package tensor

import (
	"sync"
	"unsafe"
)

// hugePage is the size of a transparent huge page on amd64 and arm64
// Linux (a PMD's reach).
const hugePage = 2 << 20

// residentChunk is the size of the chunks that resident weight copies
// below residentChunk/4 bytes share, so that a model's small matrices
// (a 1B model's k and v projections are about 1 MB in Q8_0) sit in whole
// huge pages too.
const residentChunk = 64 << 20

// resident hands out the shared chunks' memory, 64-byte aligned.
var resident struct {
	mu   sync.Mutex
	free []byte // the current chunk's unused tail
}

// makeResident returns a new zeroed slice of n elements for a weight
// matrix the process keeps (a converted or quantized copy), in memory
// advised MADV_HUGEPAGE where the system offers huge pages (adviseHuge):
// the Go runtime asks for none, and kernels that give them only on
// request (transparent_hugepage=madvise, a common default) back its heap
// with 4 KiB pages. Decode reads every weight once per token; on a VM,
// whose page walks are nested, a 1B model's Q8_0 decode ran 18–21%
// faster with its memory in 2 MiB pages (docs/performance.md). Small
// copies share chunks of residentChunk bytes, which stay allocated while
// any copy in them is referenced.
func makeResident[T any](n int) []T {
	var zero T
	size := n * int(unsafe.Sizeof(zero))
	if size == 0 {
		return make([]T, n)
	}
	if size >= residentChunk/4 {
		s := make([]T, n)
		adviseHuge(unsafe.Pointer(unsafe.SliceData(s)), size)
		return s
	}
	resident.mu.Lock()
	defer resident.mu.Unlock()
	skip := int(-uintptr(unsafe.Pointer(unsafe.SliceData(resident.free))) & 63)
	if skip+size > len(resident.free) {
		resident.free = make([]byte, residentChunk)
		adviseHuge(unsafe.Pointer(unsafe.SliceData(resident.free)), residentChunk)
		skip = int(-uintptr(unsafe.Pointer(unsafe.SliceData(resident.free))) & 63)
	}
	b := resident.free[skip : skip+size : skip+size]
	resident.free = resident.free[skip+size:]
	return unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(b))), n)
}
