// Package model loads Llama-family models (llama, mistral, qwen2, qwen3)
// from Hugging Face directories: config.json, generation_config.json,
// safetensors weights and the tokenizer.
//
// Every tensor the architecture needs is named once, in the binding table
// of Bindings, together with its shape and how tensor parallelism splits
// it. Loading fails on a missing, misshaped or unused tensor (a
// rotary_emb.inv_freq buffer, which holds no weights, is let through), so
// a model that loads has exactly the weights its config describes.
//
// Checkpoint tensors may be F32, F16 or BF16; LoadWeights converts every
// one to float32, and Weights holds them row-major, matrices in the
// PyTorch nn.Linear layout [out, in]. That float32 copy is what this
// package hands on: the element type a backend keeps weights and
// activations in is a separate choice, DType (vLLM's --dtype), and
// DType.Round rounds float32 values to its precision.
package model
