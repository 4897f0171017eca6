// Command gguf converts a Hugging Face Llama directory (config.json,
// safetensors, tokenizer.json) into a GGUF file that llama.cpp loads, so
// that scripts/llama-cpp-compare can time llama.cpp on the same weights
// as Gearbox:
//
//	gguf -model model/builtin/stories260K -type f32 -out /tmp/stories260K.gguf
//	gguf -model /tmp/gearbox-llama-3.2-1b -type q8_0 -out /tmp/llama-1b-q8_0.gguf
//	gguf -inspect /tmp/llama-1b-q8_0.gguf
//
// -type is auto (each matrix in the checkpoint's dtype), f32, f16, bf16 or
// q8_0 (llama.cpp's quantize_row_q8_0_ref from the checkpoint's values);
// norms stay f32. See package internal/gguf.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/gearboxlm/gearbox/internal/gguf"
)

func main() {
	dir := flag.String("model", "", "Hugging Face model directory to convert")
	out := flag.String("out", "", "GGUF file to write")
	typ := flag.String("type", "auto", "matrix type: auto, f32, f16, bf16 or q8_0")
	name := flag.String("name", "", "general.name (default: the directory's name)")
	inspect := flag.String("inspect", "", "print a GGUF file's metadata and tensors instead")
	flag.Parse()
	var err error
	if *inspect != "" {
		err = inspectFile(*inspect)
	} else {
		err = convert(*dir, *out, *typ, *name)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "gguf:", err)
		os.Exit(1)
	}
}

func convert(dir, out, typ, name string) error {
	if dir == "" || out == "" {
		return fmt.Errorf("-model and -out are required")
	}
	opt, err := gguf.ParseType(typ)
	if err != nil {
		return err
	}
	opt.Name = name
	if err := gguf.ConvertFile(dir, out, opt); err != nil {
		return err
	}
	st, err := os.Stat(out)
	if err != nil {
		return err
	}
	fmt.Printf("wrote %s (%s, %.1f MB)\n", out, typ, float64(st.Size())/1e6)
	return nil
}

func inspectFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	g, err := gguf.Read(f)
	if err != nil {
		return err
	}
	fmt.Printf("GGUF v%d, %d keys, %d tensors, alignment %d, data at %d\n", g.Version, len(g.KV), len(g.Tensors), g.Alignment, g.DataOffset)
	for _, kv := range g.KV {
		if a, ok := kv.Value.(gguf.Array); ok {
			head := a.Values[:min(len(a.Values), 8)]
			fmt.Printf("  %s = array of %d: %v…\n", kv.Key, len(a.Values), head)
			continue
		}
		s := fmt.Sprint(kv.Value)
		if len(s) > 80 {
			s = s[:80] + "…"
		}
		fmt.Printf("  %s = %s\n", kv.Key, s)
	}
	for _, t := range g.Tensors {
		fmt.Printf("  %-28s %-5v %v @%d\n", t.Name, t.Type, t.Dims, t.Offset)
	}
	return nil
}
