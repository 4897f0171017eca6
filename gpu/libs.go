package gpu

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
)

// Library names a shared library and the file names it may be installed
// under, most preferred first.
type Library struct {
	Name       string   // human name for messages, e.g. "CUDA driver"
	Candidates []string // file names, e.g. "libnvrtc.so", "libnvrtc.so.13"
}

// The libraries the GPU backend loads.
var (
	Driver   = Library{Name: "CUDA driver", Candidates: []string{"libcuda.so.1", "libcuda.so"}}
	NVRTC    = Library{Name: "NVRTC", Candidates: []string{"libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so.11.2"}}
	CUBLAS   = Library{Name: "cuBLAS", Candidates: []string{"libcublas.so", "libcublas.so.13", "libcublas.so.12"}}
	CUBLASLt = Library{Name: "cuBLASLt", Candidates: []string{"libcublasLt.so", "libcublasLt.so.13", "libcublasLt.so.12"}}
)

// ErrNotFound is wrapped by Search's error when no candidate file exists in
// any place searched.
var ErrNotFound = errors.New("library not found")

// SearchEnv is what Search reads from the host. OSEnv returns the real one;
// tests fill the fields with fakes.
type SearchEnv struct {
	Getenv func(key string) string
	// IsFile reports whether path names an existing regular file, following
	// symbolic links.
	IsFile func(path string) bool
	// Glob expands a filepath.Match pattern, as filepath.Glob does.
	Glob func(pattern string) ([]string, error)
	// ReadFile reads the loader cache (/etc/ld.so.cache).
	ReadFile func(path string) ([]byte, error)
	// Ldconfig returns the output of `ldconfig -p`; nil means unavailable.
	Ldconfig func() ([]byte, error)
	// Arch is runtime.GOARCH; it selects loader-cache entries for this ABI.
	Arch string
}

// OSEnv is the SearchEnv of the running process.
func OSEnv() SearchEnv {
	return SearchEnv{
		Getenv: os.Getenv,
		IsFile: func(p string) bool {
			st, err := os.Stat(p)
			return err == nil && st.Mode().IsRegular()
		},
		Glob:     filepath.Glob,
		ReadFile: os.ReadFile,
		Ldconfig: func() ([]byte, error) {
			for _, bin := range []string{"/sbin/ldconfig", "/usr/sbin/ldconfig", "ldconfig"} {
				out, err := exec.Command(bin, "-p").Output()
				if err == nil {
					return out, nil
				}
			}
			return nil, fs.ErrNotExist
		},
		Arch: runtime.GOARCH,
	}
}

// LdCachePath is where glibc keeps the dynamic loader's cache.
const LdCachePath = "/etc/ld.so.cache"

// systemDirs are searched, after $GEARBOX_CUDA_PATH and the loader cache,
// in this order. Patterns are expanded with Glob and sorted by it.
var systemDirs = []string{
	"/usr/local/cuda*/targets/x86_64-linux/lib",
	"/usr/local/cuda*/lib64",
	"/usr/local/nvidia/lib64",
	"/usr/lib/x86_64-linux-gnu",
}

// wheelPrefixes are Python installation prefixes whose
// lib/python3*/{site,dist}-packages/nvidia/*/lib folders hold the CUDA
// wheels (nvidia-cublas-cu12, nvidia-cuda-nvrtc-cu12, ...).
var wheelPrefixes = []string{"/usr", "/usr/local", "/opt/conda"}

// Search finds lib on the host and returns the path of the first candidate
// file found. It looks in, in order: each directory of $GEARBOX_CUDA_PATH
// (colon-separated), the dynamic loader's cache (/etc/ld.so.cache, else
// `ldconfig -p`), /usr/local/cuda*/targets/x86_64-linux/lib,
// /usr/local/cuda*/lib64, /usr/local/nvidia/lib64,
// /usr/lib/x86_64-linux-gnu, then the nvidia/*/lib folders of Python wheels
// under $VIRTUAL_ENV, $CONDA_PREFIX, ~/.local, /usr, /usr/local and
// /opt/conda. Within a place, candidates are tried in lib.Candidates order.
// A path with a "stubs" element is never returned.
//
// tried lists every place looked in, in order. When nothing is found the
// error wraps ErrNotFound and names the library, its candidates and tried.
func Search(lib Library, env SearchEnv) (path string, tried []string, err error) {
	seen := map[string]bool{}
	lookDir := func(dir string) string {
		dir = filepath.Clean(dir)
		if seen[dir] {
			return ""
		}
		seen[dir] = true
		tried = append(tried, dir)
		if isStub(dir) {
			return ""
		}
		for _, c := range lib.Candidates {
			p := filepath.Join(dir, c)
			if env.IsFile(p) {
				return p
			}
		}
		return ""
	}

	for _, dir := range filepath.SplitList(env.Getenv("GEARBOX_CUDA_PATH")) {
		if dir == "" {
			continue
		}
		if p := lookDir(dir); p != "" {
			return p, tried, nil
		}
	}

	if p, where := searchLoaderCache(lib, env); where != "" {
		tried = append(tried, where)
		if p != "" {
			return p, tried, nil
		}
	}

	for _, dir := range expand(env, systemDirs) {
		if p := lookDir(dir); p != "" {
			return p, tried, nil
		}
	}

	for _, dir := range expand(env, wheelDirs(env)) {
		if p := lookDir(dir); p != "" {
			return p, tried, nil
		}
	}

	return "", tried, fmt.Errorf("gpu: %s (%s) %w; looked in: %s",
		lib.Name, strings.Join(lib.Candidates, ", "), ErrNotFound, strings.Join(tried, ", "))
}

// searchLoaderCache returns the first candidate in the loader cache that
// exists and is not a stub, and a description of the cache it read ("" when
// neither the cache file nor ldconfig could be read).
func searchLoaderCache(lib Library, env SearchEnv) (path, where string) {
	var entries []CacheEntry
	if data, err := env.ReadFile(LdCachePath); err == nil {
		if e, err := ParseLdCache(data); err == nil {
			entries, where = e, "loader cache "+LdCachePath
		}
	}
	if where == "" && env.Ldconfig != nil {
		if out, err := env.Ldconfig(); err == nil {
			entries, where = ParseLdconfig(out), "loader cache (ldconfig -p)"
		}
	}
	for _, c := range lib.Candidates {
		for _, e := range entries {
			if e.Name == c && e.matchesArch(env.Arch) && !isStub(e.Path) && env.IsFile(e.Path) {
				return e.Path, where
			}
		}
	}
	return "", where
}

// wheelDirs are the Python wheel library patterns, virtual environment
// first.
func wheelDirs(env SearchEnv) []string {
	var prefixes []string
	for _, key := range []string{"VIRTUAL_ENV", "CONDA_PREFIX"} {
		if v := env.Getenv(key); v != "" {
			prefixes = append(prefixes, v)
		}
	}
	if home := env.Getenv("HOME"); home != "" {
		prefixes = append(prefixes, filepath.Join(home, ".local"))
	}
	prefixes = append(prefixes, wheelPrefixes...)
	var pats []string
	for _, p := range prefixes {
		for _, pkgs := range []string{"site-packages", "dist-packages"} {
			pats = append(pats, filepath.Join(p, "lib", "python3*", pkgs, "nvidia", "*", "lib"))
		}
	}
	return pats
}

// expand globs each pattern, keeping pattern order. A literal directory,
// or a pattern that matches nothing, is kept as it is so that tried names
// it; looking for files in it finds none.
func expand(env SearchEnv, patterns []string) []string {
	var dirs []string
	for _, pat := range patterns {
		if !strings.ContainsAny(pat, "*?[") {
			dirs = append(dirs, pat)
			continue
		}
		m, err := env.Glob(pat)
		if err != nil || len(m) == 0 {
			dirs = append(dirs, pat)
			continue
		}
		dirs = append(dirs, m...)
	}
	return dirs
}

// isStub reports whether path has a "stubs" element: CUDA's link-time stub
// libraries live there and fail every call when loaded.
func isStub(path string) bool {
	for _, el := range strings.Split(filepath.ToSlash(path), "/") {
		if el == "stubs" {
			return true
		}
	}
	return false
}
