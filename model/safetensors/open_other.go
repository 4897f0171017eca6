//go:build !unix

package safetensors

import (
	"fmt"
	"os"
)

// Open reads the whole file at path into memory and validates it. (On Unix
// the file is memory-mapped instead.)
func Open(path string) (*File, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("safetensors: %s: not a regular file", path)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	return Parse(path, data)
}
