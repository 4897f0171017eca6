//go:build linux && (amd64 || arm64)

package comm

import (
	"syscall"

	"github.com/ebitengine/purego"
)

// mpiDlopen loads the library with RTLD_GLOBAL: Open MPI's components are
// plugins that resolve libmpi's symbols from the global namespace.
func mpiDlopen(path string) (uintptr, error) {
	return purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_GLOBAL)
}

func mpiDlsym(h uintptr, name string) (uintptr, error) { return purego.Dlsym(h, name) }

func mpiRegister(fn any, addr uintptr) { purego.RegisterFunc(fn, addr) }

// osYield gives the OS thread's CPU to another runnable thread, of this
// process or another (sched_yield).
func osYield() { syscall.Syscall(syscall.SYS_SCHED_YIELD, 0, 0, 0) }
