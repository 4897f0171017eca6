//go:build !linux

package tensor

import "unsafe"

// adviseHuge does nothing off Linux (see the Linux version).
func adviseHuge(unsafe.Pointer, int) {}
