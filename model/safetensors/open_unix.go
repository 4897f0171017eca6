//go:build unix

package safetensors

import (
	"fmt"
	"io"
	"math"
	"os"
	"syscall"
)

// Open memory-maps the file at path read-only and validates it. The
// mapping is released by Close. Truncating the file while it is mapped
// makes later reads of its tensors fault (SIGBUS); model files are expected
// to be immutable while served.
func Open(path string) (*File, error) {
	fd, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	defer fd.Close()
	st, err := fd.Stat()
	if err != nil {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("safetensors: %s: not a regular file", path)
	}
	size := st.Size()
	if size < 8 { // too short to map usefully; Parse reports it
		small, err := io.ReadAll(io.LimitReader(fd, 8))
		if err != nil {
			return nil, fmt.Errorf("safetensors: %w", err)
		}
		return Parse(path, small)
	}
	if size > math.MaxInt {
		return nil, fmt.Errorf("safetensors: %s: %d bytes do not fit in the address space", path, size)
	}
	data, err := syscall.Mmap(int(fd.Fd()), 0, int(size), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("safetensors: mmap %s: %w", path, err)
	}
	adviseHuge(data)
	f, err := Parse(path, data)
	if err != nil {
		syscall.Munmap(data)
		return nil, err
	}
	f.release = func() error { return syscall.Munmap(data) }
	for _, t := range f.tensors {
		t.mapped = true
	}
	return f, nil
}
