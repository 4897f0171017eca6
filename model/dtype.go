package model

import (
	"fmt"
	"strings"

	"github.com/gearboxlm/gearbox/model/safetensors"
	"github.com/gearboxlm/gearbox/tensor"
)

// DType is the element type a backend keeps weights and activations in,
// chosen with vLLM's --dtype flag.
type DType int

// The dtypes; DTypeAuto resolves per model and device (ResolveDType).
const (
	DTypeAuto DType = iota
	Float32
	Float16
	BFloat16
)

// ParseDType reads a --dtype value: auto, float32 (float), float16 (half)
// or bfloat16, as vLLM spells them.
func ParseDType(s string) (DType, error) {
	switch strings.ToLower(s) {
	case "", "auto":
		return DTypeAuto, nil
	case "float32", "float":
		return Float32, nil
	case "float16", "half":
		return Float16, nil
	case "bfloat16":
		return BFloat16, nil
	}
	return 0, fmt.Errorf("model: dtype %q: want auto, bfloat16, float16 or float32", s)
}

// String is the vLLM spelling.
func (d DType) String() string {
	switch d {
	case Float32:
		return "float32"
	case Float16:
		return "float16"
	case BFloat16:
		return "bfloat16"
	}
	return "auto"
}

// Tensor is the tensor format that stores d's elements: tensor.F32, F16
// or BF16. DTypeAuto names no format and gives tensor.F32, the CPU's
// float32.
func (d DType) Tensor() tensor.DType {
	switch d {
	case Float16:
		return tensor.F16
	case BFloat16:
		return tensor.BF16
	}
	return tensor.F32
}

// Size is the bytes per element; 0 for DTypeAuto.
func (d DType) Size() int {
	switch d {
	case Float32:
		return 4
	case Float16, BFloat16:
		return 2
	}
	return 0
}

// ResolveDType turns auto into a concrete dtype the way vLLM documents it
// for GPUs: BF16 for BF16 checkpoints and FP16 for FP32 and FP16 ones
// (and for checkpoints that declare no dtype). A concrete d is returned
// unchanged.
func (c *Config) ResolveDType(d DType) DType {
	if d != DTypeAuto {
		return d
	}
	if strings.EqualFold(c.TorchDtype, "bfloat16") {
		return BFloat16
	}
	return Float16
}

// Round rounds v in place to d's precision (nearest, ties to even), the
// values a backend holding d would see. Float32 and DTypeAuto leave v
// unchanged.
func (d DType) Round(v []float32) {
	switch d {
	case BFloat16:
		for i, f := range v {
			v[i] = safetensors.BF16ToFloat32(safetensors.Float32ToBF16(f))
		}
	case Float16:
		for i, f := range v {
			v[i] = safetensors.F16ToFloat32(safetensors.Float32ToF16(f))
		}
	}
}

// Quantization is a weight quantization applied at load (vLLM's
// --quantization).
type Quantization int

const (
	// NoQuantization keeps matrices in a floating-point format (DType).
	NoQuantization Quantization = iota
	// Int8 quantizes every matrix to 8-bit integers in blocks of 32 with
	// one binary16 scale each, llama.cpp's Q8_0 (tensor.Q8_0).
	Int8
)

// ParseQuantization reads a --quantization value: none (or empty) or int8,
// also spelled q8_0.
func ParseQuantization(s string) (Quantization, error) {
	switch strings.ToLower(s) {
	case "", "none":
		return NoQuantization, nil
	case "int8", "q8_0":
		return Int8, nil
	}
	return 0, fmt.Errorf("model: quantization %q: want int8 (alias q8_0) or none", s)
}

// String is the --quantization spelling.
func (q Quantization) String() string {
	if q == Int8 {
		return "int8"
	}
	return "none"
}

// Storage is the format a matrix stored as src in the checkpoint is held
// in: Q8_0 under Int8; else src itself under DTypeAuto (the checkpoint's
// dtype is kept), else the one DType names.
func (o Options) Storage(src tensor.DType) tensor.DType {
	if o.Quantization == Int8 {
		return tensor.Q8_0
	}
	switch o.DType {
	case Float32:
		return tensor.F32
	case BFloat16:
		return tensor.BF16
	case Float16:
		return tensor.F16
	}
	return src
}

// Check refuses option combinations loading does not support: Int8 with a
// half-precision DType (the quantized matrices multiply float32
// activations, and norms and biases stay float32, so DType has nothing
// left to choose; auto and float32 are accepted).
func (o Options) Check() error {
	if o.Quantization == Int8 && (o.DType == BFloat16 || o.DType == Float16) {
		return fmt.Errorf("model: quantization int8 with dtype %s: int8 matrices multiply float32 activations and every other tensor stays float32; use dtype auto or float32", o.DType)
	}
	return nil
}
