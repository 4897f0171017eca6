//go:build linux && (amd64 || arm64)

package cuda

import (
	"syscall"

	"github.com/ebitengine/purego"
)

// dlopen loads path into the process with RTLD_NOW|RTLD_GLOBAL. The handle
// is never closed: bound functions point into the library.
func dlopen(path string) (uintptr, error) {
	return purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_GLOBAL)
}

// bind resolves every symbol in the library h and points its func variable
// at it. This is purego.RegisterLibFunc split in two so that a missing
// symbol is an error listing all missing names instead of a panic.
func bind(h uintptr, syms []symbol) error {
	var missing []string
	for _, s := range syms {
		addr, err := purego.Dlsym(h, s.name)
		if err != nil || addr == 0 {
			if !s.optional {
				missing = append(missing, s.name)
			}
			continue
		}
		purego.RegisterFunc(s.fn, addr)
	}
	if len(missing) > 0 {
		return missingSymbols(missing)
	}
	return nil
}

// threadID is the calling OS thread's id.
func threadID() int { return syscall.Gettid() }
