//go:build linux

// Command pagein brings files into the page cache the way Gearbox's own
// mappings do: it maps each one read-only, advises the mapping
// MADV_HUGEPAGE and touches every 4 KiB page, so that, on kernels and
// file systems with large folios, the faults read the file in 2 MiB
// folios that any later mapping of it can map with one TLB entry each.
// Reading a file (cat) leaves smaller folios: 93% of a 438 MB checkpoint
// mapped in 2 MiB pages after cat here, 99.6% after pagein
// (docs/performance.md). For each file it prints the share of its bytes
// so mapped. The comparison scripts run it, after evicting the files,
// for every system's weights alike.
//
//	pagein FILE...
package main

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/gearboxlm/gearbox/internal/procmaps"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: pagein FILE...")
		os.Exit(2)
	}
	for _, path := range os.Args[1:] {
		share, err := pagein(path)
		if err != nil {
			fmt.Fprintln(os.Stderr, "pagein:", err)
			os.Exit(1)
		}
		fmt.Printf("%s: %.1f%% in 2 MiB pages\n", path, 100*share)
	}
}

// pagein faults path in through an advised mapping and returns the share
// of its bytes mapped in PMD-sized pages.
func pagein(path string) (float64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return 0, err
	}
	if st.Size() == 0 {
		return 0, nil
	}
	b, err := unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return 0, fmt.Errorf("mmap %s: %w", path, err)
	}
	defer unix.Munmap(b)
	_ = unix.Madvise(b, unix.MADV_HUGEPAGE) // kernels without THP refuse; the pages come in anyway
	var sum byte
	for i := 0; i < len(b); i += 4096 {
		sum += b[i]
	}
	runtime.KeepAlive(sum) // the touches are the point
	v, err := procmaps.Field(uintptr(unsafe.Pointer(&b[0])), "FilePmdMapped")
	if err != nil {
		return 0, nil // no THP accounting on this kernel
	}
	kb, err := strconv.ParseFloat(strings.TrimSuffix(v, " kB"), 64)
	if err != nil {
		return 0, fmt.Errorf("FilePmdMapped %q: %w", v, err)
	}
	return kb * 1024 / float64(len(b)), nil
}
