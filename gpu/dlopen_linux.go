//go:build linux

package gpu

import "github.com/ebitengine/purego"

// dlopen loads path into the process. The handle is deliberately kept: the
// backend resolves its symbols by path later, and dlopen of an already
// loaded library returns the same handle.
func dlopen(path string) error {
	_, err := purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_GLOBAL)
	return err
}
