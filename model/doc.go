// Package model loads Llama-family models (llama, mistral, qwen2, qwen3)
// from Hugging Face directories: config.json, generation_config.json,
// safetensors weights and the tokenizer.
//
// Every tensor the architecture needs is named once, in the binding table
// of Bindings, together with its shape and how tensor parallelism splits
// it. Loading fails on a missing, misshaped or unused tensor, so a model
// that loads has exactly the weights its config describes. Weights are held
// in float32 row-major, in the PyTorch nn.Linear layout [out, in].
package model
