// Command mkmodel writes a random-weight model directory (config.json,
// safetensors, tokenizer) of a real model's shape, for speed measurements
// on machines without downloads:
//
//	mkmodel -shape llama-3.2-1b -out /tmp/llama-1b
//
// Shapes: see fixture.Shapes. The weights are in the shape's dtype (BF16
// for the Llama shapes, F32 for stories110m) unless -dtype says otherwise;
// a directory that already holds a config.json is left alone.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/gearboxlm/gearbox/internal/fixture"
)

func main() {
	shape := flag.String("shape", "llama-3.2-1b", "model shape: "+strings.Join(shapeNames(), ", "))
	dtype := flag.String("dtype", "", "storage dtype: BF16, F16 or F32 (default: the shape's)")
	out := flag.String("out", "", "directory to write (created if missing)")
	flag.Parse()
	if err := run(*shape, *dtype, *out); err != nil {
		fmt.Fprintln(os.Stderr, "mkmodel:", err)
		os.Exit(1)
	}
}

func run(shape, dtype, out string) error {
	spec, ok := fixture.Shapes[shape]
	if !ok {
		return fmt.Errorf("unknown shape %q (want one of %s)", shape, strings.Join(shapeNames(), ", "))
	}
	if out == "" {
		return fmt.Errorf("-out is required")
	}
	if _, err := os.Stat(filepath.Join(out, "config.json")); err == nil {
		fmt.Printf("%s already holds a model; left alone\n", out)
		return nil
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	if dtype != "" {
		spec.DType = dtype
	}
	if err := fixture.Write(out, spec); err != nil {
		return err
	}
	fmt.Printf("wrote %s (%s, %s)\n", out, shape, spec.DType)
	return nil
}

func shapeNames() []string {
	var names []string
	for n := range fixture.Shapes {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}
