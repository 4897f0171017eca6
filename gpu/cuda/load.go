package cuda

import (
	"fmt"
	"strings"
	"sync"
	"unsafe"

	"github.com/gearboxlm/gearbox/gpu"
)

// symbol is one C function to resolve: fn points at a func variable whose
// type mirrors the C signature.
type symbol struct {
	fn       any
	name     string
	optional bool // left nil when the library lacks it
}

// loaded caches each bound library by kind and path, so that a library is
// opened and its symbols resolved once per process.
var loaded struct {
	sync.Mutex
	m map[loadKey]any
}

type loadKey struct{ lib, path string }

// load opens path and binds the symbols listed by syms into a new T, or
// returns the T bound earlier for the same library and path. A failed load
// is not cached.
func load[T any](lib gpu.Library, path string, syms func(*T) []symbol) (*T, error) {
	loaded.Lock()
	defer loaded.Unlock()
	key := loadKey{lib.Name, path}
	if v, ok := loaded.m[key]; ok {
		return v.(*T), nil
	}
	h, err := dlopen(path)
	if err != nil {
		return nil, fmt.Errorf("cuda: load %s %s: %w", lib.Name, path, err)
	}
	t := new(T)
	if err := bind(h, syms(t)); err != nil {
		return nil, fmt.Errorf("cuda: load %s %s: %w", lib.Name, path, err)
	}
	if loaded.m == nil {
		loaded.m = map[loadKey]any{}
	}
	loaded.m[key] = t
	return t, nil
}

// missingSymbols is bind's error when required symbols are absent.
func missingSymbols(names []string) error {
	return fmt.Errorf("missing symbols %s (library too old?)", strings.Join(names, ", "))
}

// goString copies the NUL-terminated C string at p.
func goString(p *byte) string {
	if p == nil {
		return ""
	}
	n := 0
	for *(*byte)(unsafe.Add(unsafe.Pointer(p), n)) != 0 {
		n++
	}
	return string(unsafe.Slice(p, n))
}

// cString returns s as a NUL-terminated byte slice, or an error naming what
// when s holds a NUL byte (C would see it truncated).
func cString(what, s string) ([]byte, error) {
	if strings.IndexByte(s, 0) >= 0 {
		return nil, fmt.Errorf("%s %q contains a NUL byte", what, s)
	}
	b := make([]byte, len(s)+1)
	copy(b, s)
	return b, nil
}
