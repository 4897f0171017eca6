package gpu

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakeHost is a file tree under a temporary root that SearchEnv sees as /.
type fakeHost struct {
	t        *testing.T
	root     string
	env      map[string]string
	ldconfig []byte // nil: ldconfig unavailable
}

func newFakeHost(t *testing.T) *fakeHost {
	return &fakeHost{t: t, root: t.TempDir(), env: map[string]string{}}
}

// touch creates the file at the host path p.
func (h *fakeHost) touch(p string) {
	h.t.Helper()
	full := filepath.Join(h.root, p)
	if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
		h.t.Fatal(err)
	}
	if err := os.WriteFile(full, []byte("elf"), 0o644); err != nil {
		h.t.Fatal(err)
	}
}

func (h *fakeHost) writeCache(data []byte) {
	h.t.Helper()
	full := filepath.Join(h.root, LdCachePath)
	if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
		h.t.Fatal(err)
	}
	if err := os.WriteFile(full, data, 0o644); err != nil {
		h.t.Fatal(err)
	}
}

func (h *fakeHost) searchEnv() SearchEnv {
	real := OSEnv()
	env := SearchEnv{
		Getenv: func(k string) string { return h.env[k] },
		IsFile: func(p string) bool { return real.IsFile(filepath.Join(h.root, p)) },
		Glob: func(pat string) ([]string, error) {
			m, err := filepath.Glob(filepath.Join(h.root, pat))
			for i := range m {
				m[i] = strings.TrimPrefix(m[i], h.root)
			}
			return m, err
		},
		ReadFile: func(p string) ([]byte, error) { return os.ReadFile(filepath.Join(h.root, p)) },
		Arch:     "amd64",
	}
	if h.ldconfig != nil {
		env.Ldconfig = func() ([]byte, error) { return h.ldconfig, nil }
	}
	return env
}

func TestSearchOrder(t *testing.T) {
	tests := []struct {
		name  string
		setup func(h *fakeHost)
		lib   Library
		want  string
	}{
		{
			name: "GEARBOX_CUDA_PATH beats everything",
			setup: func(h *fakeHost) {
				h.env["GEARBOX_CUDA_PATH"] = "/missing:/opt/mycuda/lib"
				h.touch("/opt/mycuda/lib/libcuda.so.1")
				h.touch("/usr/local/nvidia/lib64/libcuda.so.1")
				h.writeCache(newLdCache([]CacheEntry{{"libcuda.so.1", "/usr/local/nvidia/lib64/libcuda.so.1", "amd64"}}))
			},
			lib:  Driver,
			want: "/opt/mycuda/lib/libcuda.so.1",
		},
		{
			name: "loader cache beats toolkit dirs",
			setup: func(h *fakeHost) {
				h.touch("/usr/local/nvidia/lib64/libcuda.so.1")
				h.touch("/usr/local/cuda/lib64/libcuda.so.1")
				h.writeCache(newLdCache([]CacheEntry{{"libcuda.so.1", "/usr/local/nvidia/lib64/libcuda.so.1", "amd64"}}))
			},
			lib:  Driver,
			want: "/usr/local/nvidia/lib64/libcuda.so.1",
		},
		{
			name: "loader cache entry for another ABI is skipped",
			setup: func(h *fakeHost) {
				h.touch("/usr/lib/i386-linux-gnu/libcuda.so.1")
				h.touch("/usr/lib/x86_64-linux-gnu/libcuda.so.1")
				h.writeCache(newLdCache([]CacheEntry{{"libcuda.so.1", "/usr/lib/i386-linux-gnu/libcuda.so.1", ""}}))
			},
			lib:  Driver,
			want: "/usr/lib/x86_64-linux-gnu/libcuda.so.1",
		},
		{
			name: "stub in loader cache and toolkit is never picked",
			setup: func(h *fakeHost) {
				h.touch("/usr/local/cuda/targets/x86_64-linux/lib/stubs/libcuda.so")
				h.touch("/usr/local/nvidia/lib64/libcuda.so.1")
				h.writeCache(newLdCache([]CacheEntry{{"libcuda.so", "/usr/local/cuda/targets/x86_64-linux/lib/stubs/libcuda.so", "amd64"}}))
			},
			lib:  Driver,
			want: "/usr/local/nvidia/lib64/libcuda.so.1",
		},
		{
			name: "ldconfig -p when the cache file is missing",
			setup: func(h *fakeHost) {
				h.touch("/somewhere/libcublas.so.12")
				h.touch("/usr/lib/x86_64-linux-gnu/libcublas.so.12")
				h.ldconfig = []byte("2 libs found in cache `/etc/ld.so.cache'\n\tlibcublas.so.12 (libc6,x86-64) => /somewhere/libcublas.so.12\n")
			},
			lib:  CUBLAS,
			want: "/somewhere/libcublas.so.12",
		},
		{
			name: "versioned toolkit dir and later candidate",
			setup: func(h *fakeHost) {
				h.touch("/usr/local/cuda-13.0/targets/x86_64-linux/lib/libnvrtc.so.13")
			},
			lib:  NVRTC,
			want: "/usr/local/cuda-13.0/targets/x86_64-linux/lib/libnvrtc.so.13",
		},
		{
			name: "first candidate wins within a dir",
			setup: func(h *fakeHost) {
				h.touch("/usr/local/cuda/lib64/libcublas.so.12")
				h.touch("/usr/local/cuda/lib64/libcublas.so")
			},
			lib:  CUBLAS,
			want: "/usr/local/cuda/lib64/libcublas.so",
		},
		{
			name: "virtualenv wheel",
			setup: func(h *fakeHost) {
				h.env["VIRTUAL_ENV"] = "/home/u/venv"
				h.touch("/home/u/venv/lib/python3.12/site-packages/nvidia/cublas/lib/libcublasLt.so.12")
			},
			lib:  CUBLASLt,
			want: "/home/u/venv/lib/python3.12/site-packages/nvidia/cublas/lib/libcublasLt.so.12",
		},
		{
			name: "system python dist-packages wheel",
			setup: func(h *fakeHost) {
				h.touch("/usr/local/lib/python3.12/dist-packages/nvidia/cuda_nvrtc/lib/libnvrtc.so.12")
			},
			lib:  NVRTC,
			want: "/usr/local/lib/python3.12/dist-packages/nvidia/cuda_nvrtc/lib/libnvrtc.so.12",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newFakeHost(t)
			tc.setup(h)
			got, tried, err := Search(tc.lib, h.searchEnv())
			if err != nil {
				t.Fatalf("Search: %v", err)
			}
			if got != tc.want {
				t.Errorf("Search = %q, want %q (tried %q)", got, tc.want, tried)
			}
		})
	}
}

func TestSearchNotFound(t *testing.T) {
	h := newFakeHost(t)
	h.env["GEARBOX_CUDA_PATH"] = "/opt/a:/opt/b"
	h.env["VIRTUAL_ENV"] = "/venv"
	h.touch("/usr/local/cuda/targets/x86_64-linux/lib/stubs/libcuda.so")
	h.touch("/usr/local/cuda/targets/x86_64-linux/lib/libnvrtc.so") // not the driver
	h.writeCache(newLdCache(nil))
	got, tried, err := Search(Driver, h.searchEnv())
	if !errors.Is(err, ErrNotFound) {
		t.Fatalf("Search = %q, %v; want ErrNotFound", got, err)
	}
	msg := err.Error()
	for _, want := range []string{
		"CUDA driver", "libcuda.so.1",
		"/opt/a", "/opt/b",
		"loader cache /etc/ld.so.cache",
		"/usr/local/cuda/targets/x86_64-linux/lib",
		"/usr/local/cuda*/lib64",
		"/usr/local/nvidia/lib64",
		"/usr/lib/x86_64-linux-gnu",
		"/venv/lib/python3*/site-packages/nvidia/*/lib",
		"/usr/local/lib/python3*/dist-packages/nvidia/*/lib",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("error does not mention %q:\n%s", want, msg)
		}
	}
	if strings.Contains(msg, "stubs") {
		t.Errorf("error lists a stubs dir:\n%s", msg)
	}
	if len(tried) < 8 || tried[0] != "/opt/a" || tried[1] != "/opt/b" || tried[2] != "loader cache /etc/ld.so.cache" {
		t.Errorf("tried = %q", tried)
	}
}

func TestSearchGearboxPathStubsRejected(t *testing.T) {
	h := newFakeHost(t)
	h.env["GEARBOX_CUDA_PATH"] = "/usr/local/cuda/lib64/stubs"
	h.touch("/usr/local/cuda/lib64/stubs/libcuda.so")
	if p, _, err := Search(Driver, h.searchEnv()); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Search = %q, %v; want ErrNotFound", p, err)
	}
}

func TestSearchRealHostDoesNotFail(t *testing.T) {
	// On any host Search either finds a real file or says where it looked.
	p, tried, err := Search(Driver, OSEnv())
	if err != nil && !errors.Is(err, ErrNotFound) {
		t.Fatalf("Search: %v", err)
	}
	if err == nil && isStub(p) {
		t.Fatalf("picked stub %s", p)
	}
	if len(tried) == 0 {
		t.Fatal("tried is empty")
	}
}
