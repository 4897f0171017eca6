// Package procmaps reads the kernel's account of this process's memory
// mappings (/proc/self/smaps on Linux), for tests that check how memory
// is mapped.
package procmaps

import (
	"bufio"
	"fmt"
	"os"
	"strings"
	"testing"
	"unsafe"
)

// VmFlags returns the VmFlags field of the mapping that holds address a,
// for example "rd mr mw me sd hg" ("hg": advised MADV_HUGEPAGE).
func VmFlags(a uintptr) (string, error) { return Field(a, "VmFlags") }

// Field returns the value of the smaps field name (such as "VmFlags" or
// "FilePmdMapped", whose value reads like "2048 kB") of the mapping that
// holds address a.
func Field(a uintptr, name string) (string, error) {
	fd, err := os.Open("/proc/self/smaps")
	if err != nil {
		return "", fmt.Errorf("procmaps: %w", err)
	}
	defer fd.Close()
	in := false
	sc := bufio.NewScanner(fd)
	for sc.Scan() {
		line := sc.Text()
		var lo, hi uintptr
		if first, _, _ := strings.Cut(line, " "); !strings.HasSuffix(first, ":") {
			if n, _ := fmt.Sscanf(first, "%x-%x", &lo, &hi); n == 2 {
				in = lo <= a && a < hi
			}
			continue
		}
		if in && strings.HasPrefix(line, name+":") {
			return strings.TrimSpace(strings.TrimPrefix(line, name+":")), nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", fmt.Errorf("procmaps: %w", err)
	}
	return "", fmt.Errorf("procmaps: no %s field for a mapping that holds %#x", name, a)
}

// Advised reports whether the mapping that holds a is advised
// MADV_HUGEPAGE.
func Advised(a uintptr) (bool, error) {
	flags, err := VmFlags(a)
	return strings.Contains(" "+flags+" ", " hg "), err
}

// CheckAdvised fails t unless the memory at p, which holds what, is
// advised MADV_HUGEPAGE; it skips t on kernels without transparent huge
// pages, where no mapping carries the flag.
func CheckAdvised(t testing.TB, p unsafe.Pointer, what string) {
	t.Helper()
	if _, err := os.Stat("/sys/kernel/mm/transparent_hugepage"); err != nil {
		t.Skip("kernel without transparent huge pages")
	}
	advised, err := Advised(uintptr(p))
	if err != nil {
		t.Fatal(err)
	}
	if !advised {
		t.Errorf("%s: its memory is not advised MADV_HUGEPAGE (no hg in its VmFlags)", what)
	}
}
