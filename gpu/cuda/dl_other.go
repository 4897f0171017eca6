//go:build !(linux && (amd64 || arm64))

package cuda

import (
	"errors"
	"fmt"
	"runtime"
)

// errUnsupported says why no CUDA library loads on this platform.
var errUnsupported = fmt.Errorf("CUDA libraries are loaded only on linux/amd64 and linux/arm64, not %s/%s: %w",
	runtime.GOOS, runtime.GOARCH, errors.ErrUnsupported)

// dlopen reports that the CUDA backend does not run on this platform.
func dlopen(string) (uintptr, error) { return 0, errUnsupported }

// bind is never reached: dlopen fails first.
func bind(uintptr, []symbol) error { return errUnsupported }

// threadID is never compared: no Context can be opened here.
func threadID() int { return -1 }
