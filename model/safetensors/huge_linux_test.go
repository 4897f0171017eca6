package safetensors

import (
	"path/filepath"
	"testing"
	"unsafe"

	"github.com/gearboxlm/gearbox/internal/procmaps"
)

// TestOpenAdvisesHugePages checks that Open maps a file with
// MADV_HUGEPAGE: the mapping's VmFlags in /proc/self/smaps carry "hg".
func TestOpenAdvisesHugePages(t *testing.T) {
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
	procmaps.CheckAdvised(t, unsafe.Pointer(&w.Bytes()[0]), "the mapping")
}
