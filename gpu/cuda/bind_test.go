//go:build linux && (amd64 || arm64)

package cuda

import (
	"fmt"
	"testing"

	"github.com/ebitengine/purego"
)

// Every bound function type must be one purego can call: RegisterFunc
// checks argument kinds and counts when it builds the function, and panics
// on a bad one. The address is never called.
func TestSymbolTypes(t *testing.T) {
	tables := map[string][]symbol{
		"driver": new(driverAPI).symbols(),
		"nvrtc":  new(nvrtcAPI).symbols(),
		"cublas": new(cublasAPI).symbols(),
	}
	for lib, syms := range tables {
		seen := map[string]bool{}
		for _, s := range syms {
			if seen[s.name] {
				t.Errorf("%s: %s listed twice", lib, s.name)
			}
			seen[s.name] = true
			if err := register(s); err != nil {
				t.Errorf("%s: %s: %v", lib, s.name, err)
			}
		}
	}
}

func register(s symbol) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%v", r)
		}
	}()
	purego.RegisterFunc(s.fn, 1)
	return nil
}
