//go:build !linux

package gpu

import (
	"errors"
	"fmt"
	"runtime"
)

// dlopen reports that the CUDA backend runs only on Linux.
func dlopen(string) error {
	return fmt.Errorf("CUDA libraries are loaded only on linux, not %s: %w", runtime.GOOS, errors.ErrUnsupported)
}
