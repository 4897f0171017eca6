package gpu

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func baseKey() KernelKey {
	return KernelKey{
		Source:        "extern \"C\" __global__ void k(float *x) { x[threadIdx.x] = 1; }",
		Options:       []string{"--gpu-architecture=sm_90", "-default-device"},
		Capability:    ComputeCapability{9, 0},
		DriverVersion: 13000,
		NVRTCVersion:  [2]int{13, 0},
	}
}

func TestKernelKeyStable(t *testing.T) {
	a, b := baseKey(), baseKey()
	if a.Hash() != b.Hash() {
		t.Fatal("equal keys hash differently")
	}
	if len(a.Hash()) != 64 {
		t.Fatalf("hash %q is not hex SHA-256", a.Hash())
	}
	// Pin the encoding (recomputed independently: SHA-256 over each field
	// as a little-endian uint64 length and its bytes). A change here
	// invalidates every cache on disk and must be deliberate: bump
	// "gearbox-kernel-v1".
	const want = "6f636c969618a0a39180a667141a395f278b54471b2ffbaab6c127dbe186c686"
	if got := a.Hash(); got != want {
		t.Fatalf("Hash = %s, want %s", got, want)
	}
}

func TestKernelKeySensitive(t *testing.T) {
	base := baseKey().Hash()
	mods := map[string]func(k *KernelKey){
		"source":          func(k *KernelKey) { k.Source += " " },
		"option value":    func(k *KernelKey) { k.Options[1] = "--use_fast_math" },
		"option added":    func(k *KernelKey) { k.Options = append(k.Options, "-lineinfo") },
		"option order":    func(k *KernelKey) { k.Options[0], k.Options[1] = k.Options[1], k.Options[0] },
		"option split":    func(k *KernelKey) { k.Options = []string{"--gpu-architecture=sm_90-default-device"} },
		"capability":      func(k *KernelKey) { k.Capability = ComputeCapability{8, 0} },
		"capability swap": func(k *KernelKey) { k.Capability = ComputeCapability{0, 9} },
		"driver":          func(k *KernelKey) { k.DriverVersion = 12080 },
		"nvrtc":           func(k *KernelKey) { k.NVRTCVersion = [2]int{13, 1} },
	}
	seen := map[string]string{base: "base"}
	for name, mod := range mods {
		k := baseKey()
		mod(&k)
		h := k.Hash()
		if prev, dup := seen[h]; dup {
			t.Errorf("%s: hash equals %s's", name, prev)
		}
		seen[h] = name
	}
}

func TestKernelCacheRoundTrip(t *testing.T) {
	c := KernelCache{Dir: filepath.Join(t.TempDir(), "kernels")}
	key := baseKey()
	if data, ok, err := c.Get(key); ok || err != nil || data != nil {
		t.Fatalf("empty cache Get = %v, %v, %v", data, ok, err)
	}
	cubin := []byte("\x7fELF fake cubin bytes")
	if err := c.Put(key, cubin); err != nil {
		t.Fatal(err)
	}
	got, ok, err := c.Get(key)
	if err != nil || !ok || !bytes.Equal(got, cubin) {
		t.Fatalf("Get = %q, %v, %v", got, ok, err)
	}
	other := key
	other.DriverVersion++
	if _, ok, err := c.Get(other); ok || err != nil {
		t.Fatalf("other key Get = %v, %v", ok, err)
	}
	// Overwrite, and no temporary files are left behind.
	if err := c.Put(key, []byte("v2")); err != nil {
		t.Fatal(err)
	}
	if got, _, _ := c.Get(key); string(got) != "v2" {
		t.Fatalf("after overwrite Get = %q", got)
	}
	ents, err := os.ReadDir(c.Dir)
	if err != nil || len(ents) != 1 {
		t.Fatalf("dir holds %v, %v; want one file", ents, err)
	}
	if err := c.Put(key, nil); err != nil {
		t.Fatal(err)
	}
	if got, ok, err := c.Get(key); err != nil || !ok || len(got) != 0 {
		t.Fatalf("empty kernel Get = %q, %v, %v", got, ok, err)
	}
}

func TestKernelCacheRejectsCorrupt(t *testing.T) {
	key := baseKey()
	payload := []byte("0123456789abcdef")
	tests := map[string]func(b []byte) []byte{
		"flipped payload byte": func(b []byte) []byte { b[len(b)-1] ^= 1; return b },
		"truncated payload":    func(b []byte) []byte { return b[:len(b)-3] },
		"extra bytes":          func(b []byte) []byte { return append(b, 'x') },
		"truncated header":     func(b []byte) []byte { return b[:10] },
		"bad magic":            func(b []byte) []byte { b[0] = 'X'; return b },
		"flipped checksum":     func(b []byte) []byte { b[len(kernelMagic)+32+8] ^= 1; return b },
		"other key's file":     func(b []byte) []byte { b[len(kernelMagic)] ^= 1; return b },
		"empty file":           func(b []byte) []byte { return nil },
	}
	for name, corrupt := range tests {
		t.Run(name, func(t *testing.T) {
			c := KernelCache{Dir: t.TempDir()}
			if err := c.Put(key, payload); err != nil {
				t.Fatal(err)
			}
			data, err := os.ReadFile(c.Path(key))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(c.Path(key), corrupt(data), 0o644); err != nil {
				t.Fatal(err)
			}
			got, ok, err := c.Get(key)
			if !errors.Is(err, ErrCorrupt) || ok || got != nil {
				t.Fatalf("Get = %q, %v, %v; want ErrCorrupt", got, ok, err)
			}
			// Recompiling and storing again heals the entry.
			if err := c.Put(key, payload); err != nil {
				t.Fatal(err)
			}
			if got, ok, err := c.Get(key); err != nil || !ok || !bytes.Equal(got, payload) {
				t.Fatalf("after Put Get = %q, %v, %v", got, ok, err)
			}
		})
	}
}

func TestKernelCachePutFailsOnUnwritableDir(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	c := KernelCache{Dir: filepath.Join(file, "kernels")}
	if err := c.Put(baseKey(), []byte("x")); err == nil {
		t.Fatal("Put under a regular file succeeded")
	}
}

func TestDefaultKernelCacheDir(t *testing.T) {
	env := map[string]string{"GEARBOX_CACHE_DIR": "/data/cache"}
	if d, err := DefaultKernelCacheDir(func(k string) string { return env[k] }); err != nil || d != "/data/cache" {
		t.Errorf("with GEARBOX_CACHE_DIR = %q, %v", d, err)
	}
	t.Setenv("XDG_CACHE_HOME", "/xdg")
	t.Setenv("HOME", "/home/u")
	d, err := DefaultKernelCacheDir(func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	base, _ := os.UserCacheDir()
	if want := filepath.Join(base, "gearbox", "kernels"); d != want {
		t.Errorf("default = %q, want %q", d, want)
	}
}

func TestComputeCapabilityArch(t *testing.T) {
	if got := (ComputeCapability{9, 0}).Arch(); got != "sm_90" {
		t.Errorf("Arch = %q", got)
	}
	if got := (ComputeCapability{12, 0}).Arch(); got != "sm_120" {
		t.Errorf("Arch = %q", got)
	}
}
