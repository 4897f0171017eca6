//go:build !(linux && (amd64 || arm64))

package comm

import (
	"errors"
	"fmt"
	"runtime"
)

var errMPIUnsupported = fmt.Errorf("the MPI transport loads Open MPI only on linux/amd64 and linux/arm64, not %s/%s: %w",
	runtime.GOOS, runtime.GOARCH, errors.ErrUnsupported)

func mpiDlopen(string) (uintptr, error) { return 0, errMPIUnsupported }

// mpiDlsym and mpiRegister are never reached: mpiDlopen fails first.
func mpiDlsym(uintptr, string) (uintptr, error) { return 0, errMPIUnsupported }

func mpiRegister(any, uintptr) {}

// osYield is never reached: no MPI operation runs here.
func osYield() { runtime.Gosched() }
