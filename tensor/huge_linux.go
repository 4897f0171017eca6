package tensor

import (
	"syscall"
	"unsafe"
)

// adviseHuge advises the whole 2 MiB pages inside [p, p+size) as
// MADV_HUGEPAGE, before anything is written there, so that the kernel
// backs them with huge pages as they are first touched. The advice is a
// hint: errors are ignored.
func adviseHuge(p unsafe.Pointer, size int) {
	lo := (uintptr(p) + hugePage - 1) &^ (hugePage - 1)
	hi := (uintptr(p) + uintptr(size)) &^ (hugePage - 1)
	if hi <= lo {
		return
	}
	_ = syscall.Madvise(unsafe.Slice((*byte)(unsafe.Add(p, lo-uintptr(p))), hi-lo), syscall.MADV_HUGEPAGE)
}
