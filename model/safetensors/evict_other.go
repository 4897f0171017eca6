//go:build !linux

package safetensors

// Evict does nothing off Linux (see the Linux version).
func (t *Tensor) Evict() {}

// adviseHuge does nothing off Linux (see the Linux version).
func adviseHuge([]byte) {}
