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
// Checkpoint tensors may be F32, F16 or BF16. Vectors (norms, biases) are
// converted to float32; matrices are tensor.Weights in the PyTorch
// nn.Linear layout [out, in], held as Options says: by default in the
// checkpoint's dtype, as views of the memory-mapped safetensors files (no
// copy; Model.Close releases them), or converted at load (DType, vLLM's
// --dtype) or quantized to Q8_0 (Quantization Int8, --quantization int8).
// The float32 oracle tests load with DType Float32. On the GPU, DType is
// also the device's compute type (ResolveDType); DType.Round rounds
// float32 values to its precision.
package model
