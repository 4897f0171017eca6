// Package builtin embeds Gearbox's default model: stories260K, a real
// 260K-parameter Llama (GQA, 8 query / 4 KV heads) trained on TinyStories by
// Andrej Karpathy for llama2.c (MIT license, see stories260K/LICENSE and
// stories260K/README.md). It lets a new user generate text and serve
// requests with no download, and it is the real-model end-to-end test.
package builtin

import (
	"embed"
	"io/fs"
)

//go:embed stories260K/config.json stories260K/model.safetensors stories260K/tokenizer.json stories260K/tokenizer_config.json stories260K/LICENSE stories260K/README.md
var files embed.FS

// Name is the default model's name, as served and reported.
const Name = "stories260K"

// FS returns the model directory (config.json, model.safetensors,
// tokenizer.json, tokenizer_config.json) as a file system rooted at it.
func FS() fs.FS {
	sub, err := fs.Sub(files, "stories260K")
	if err != nil {
		panic(err) // the embedded path is a compile-time constant
	}
	return sub
}
