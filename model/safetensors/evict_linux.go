package safetensors

import (
	"os"
	"syscall"
	"unsafe"
)

// Evict tells the kernel that the process will not read t's data again
// soon: the whole pages of a memory-mapped tensor leave the resident set
// (MADV_DONTNEED; the file's pages stay in the page cache, and a later
// read faults them back in, unchanged). A loader that has converted a
// tensor into its own memory calls it so that a load does not hold the
// file and the converted copy at once. It does nothing for a file read
// into memory.
func (t *Tensor) Evict() {
	if !t.mapped || len(t.data) == 0 {
		return
	}
	page := uintptr(os.Getpagesize())
	lo := uintptr(unsafe.Pointer(&t.data[0]))
	hi := lo + uintptr(len(t.data))
	a, b := (lo+page-1)&^(page-1), hi&^(page-1) // whole pages inside the tensor
	if b <= a {
		return
	}
	_ = syscall.Madvise(t.data[a-lo:b-lo], syscall.MADV_DONTNEED)
}

// adviseHuge asks the kernel to back the mapping with huge pages where it
// can (MADV_HUGEPAGE): pages the process faults in from disk then come in
// 2 MiB folios that map with one TLB entry each, where the readahead of a
// plain mapping brought about a quarter of a 2.5 GB checkpoint in them.
// Decode reads every weight once per token, so on a VM, whose page walks
// are nested, the difference is bandwidth. Pages already cached stay as
// they are. Errors are ignored: the advice is only a hint.
func adviseHuge(data []byte) { _ = syscall.Madvise(data, syscall.MADV_HUGEPAGE) }
