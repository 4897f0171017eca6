//go:build linux

package main

import (
	"os"
	"path/filepath"
	"testing"
)

// TestPagein: a file of 4 MiB comes back with a share of its bytes in
// 2 MiB pages between 0 and 1 (0 where the kernel or file system has no
// large folios); an empty file gives 0, a missing one an error.
func TestPagein(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "w")
	if err := os.WriteFile(path, make([]byte, 4<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	share, err := pagein(path)
	if err != nil || share < 0 || share > 1 {
		t.Fatalf("pagein: %v, %v", share, err)
	}
	t.Logf("%.1f%% in 2 MiB pages", 100*share)
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if share, err := pagein(empty); err != nil || share != 0 {
		t.Fatalf("empty file: %v, %v", share, err)
	}
	if _, err := pagein(filepath.Join(dir, "missing")); err == nil {
		t.Fatal("missing file: no error")
	}
}
