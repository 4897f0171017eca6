package gpu

import (
	"errors"
	"strings"
	"testing"
)

func TestSystemProber(t *testing.T) {
	h := newFakeHost(t)
	h.touch("/usr/local/nvidia/lib64/libcuda.so.1")
	var opened []string
	p := SystemProber{Env: h.searchEnv(), Open: func(path string) error {
		opened = append(opened, path)
		return nil
	}}
	path, err := p.ProbeDriver()
	if err != nil || path != "/usr/local/nvidia/lib64/libcuda.so.1" || len(opened) != 1 || opened[0] != path {
		t.Fatalf("ProbeDriver = %q, %v; opened %q", path, err, opened)
	}

	p.Open = func(string) error { return errors.New("wrong ELF class") }
	if _, err := p.ProbeDriver(); err == nil || !strings.Contains(err.Error(), "wrong ELF class") || !strings.Contains(err.Error(), "libcuda.so.1") {
		t.Fatalf("load failure err = %v", err)
	}

	empty := SystemProber{Env: newFakeHost(t).searchEnv(), Open: func(string) error {
		t.Fatal("Open called with nothing found")
		return nil
	}}
	if _, err := empty.ProbeDriver(); !errors.Is(err, ErrNotFound) {
		t.Fatalf("nothing installed: err = %v", err)
	}
}
