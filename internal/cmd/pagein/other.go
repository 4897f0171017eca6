//go:build !linux

// Command pagein is Linux-only (it advises mappings for transparent huge
// pages); elsewhere it says so.
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "pagein: Linux only")
	os.Exit(1)
}
