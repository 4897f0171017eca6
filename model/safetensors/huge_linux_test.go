package safetensors

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unsafe"
)

// TestOpenAdvisesHugePages checks that Open maps a file with
// MADV_HUGEPAGE: the mapping's VmFlags in /proc/self/smaps carry "hg".
func TestOpenAdvisesHugePages(t *testing.T) {
	if _, err := os.Stat("/sys/kernel/mm/transparent_hugepage"); err != nil {
		t.Skip("kernel without transparent huge pages")
	}
	path := filepath.Join(t.TempDir(), "model.safetensors")
	if err := WriteFile(path, []WriteTensor{{Name: "w", DType: F32, Shape: []int{1 << 16}, Data: make([]float32, 1<<16)}}, nil); err != nil {
		t.Fatal(err)
	}
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w, _ := f.Tensor("w")
	flags, err := vmFlags(uintptr(unsafe.Pointer(&w.Bytes()[0])))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(" "+flags+" ", " hg ") {
		t.Fatalf("mapping's VmFlags %q lack hg (MADV_HUGEPAGE)", flags)
	}
}

// vmFlags returns the VmFlags line of the mapping in /proc/self/smaps that
// holds address a.
func vmFlags(a uintptr) (string, error) {
	fd, err := os.Open("/proc/self/smaps")
	if err != nil {
		return "", err
	}
	defer fd.Close()
	in := false
	sc := bufio.NewScanner(fd)
	for sc.Scan() {
		line := sc.Text()
		var lo, hi uintptr
		if n, _ := fmt.Sscanf(line, "%x-%x", &lo, &hi); n == 2 && !strings.Contains(line[:strings.IndexByte(line, ' ')], ":") {
			in = lo <= a && a < hi
			continue
		}
		if in && strings.HasPrefix(line, "VmFlags:") {
			return strings.TrimSpace(strings.TrimPrefix(line, "VmFlags:")), nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	return "", fmt.Errorf("no mapping holds %#x", a)
}
