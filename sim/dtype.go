package sim

import (
	"fmt"
	"strings"

	"github.com/gearboxlm/gearbox/model"
)

// DType is the element type of weights, activations or the KV cache.
type DType uint8

const (
	BF16 DType = iota // bfloat16, 2 bytes
	FP16              // IEEE half, 2 bytes
	FP8               // e4m3 (or e5m2 for the KV cache), 1 byte
	FP32              // float32, 4 bytes: the CPU engine's weights and activations
	// Q8 is the CPU engine's --quantization int8 weights (Q8_0): 8-bit
	// values in blocks of 32 that share a float16 scale, 34 bytes per 32
	// weights. Weights only.
	Q8
)

// Bytes is the size of one element, rounded down to whole bytes for Q8
// (Size has the exact figure).
func (d DType) Bytes() int {
	switch d {
	case FP8, Q8:
		return 1
	case FP32:
		return 4
	default:
		return 2
	}
}

// Size is the bytes of one element: Bytes, or 34/32 for Q8's blocks.
func (d DType) Size() float64 {
	if d == Q8 {
		return 34.0 / 32
	}
	return float64(d.Bytes())
}

// String is the short name ParseDType accepts.
func (d DType) String() string {
	switch d {
	case BF16:
		return "bf16"
	case FP16:
		return "fp16"
	case FP8:
		return "fp8"
	case FP32:
		return "fp32"
	case Q8:
		return "q8_0"
	}
	return fmt.Sprintf("dtype(%d)", uint8(d))
}

// Name is the torch_dtype spelling ParseDType also accepts: bfloat16,
// float16, float8_e4m3fn, float32.
func (d DType) Name() string {
	switch d {
	case BF16:
		return "bfloat16"
	case FP16:
		return "float16"
	case FP8:
		return "float8_e4m3fn"
	case FP32:
		return "float32"
	}
	return d.String()
}

// ParseDType reads a dtype under its short name or its torch_dtype /
// vLLM spelling: bf16, bfloat16, fp16, float16, half, fp8, fp8_e4m3,
// fp8_e5m2, fp32, float32, float; and q8_0 (the CPU engine's int8).
func ParseDType(s string) (DType, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "bf16", "bfloat16":
		return BF16, nil
	case "fp16", "float16", "half":
		return FP16, nil
	case "fp8", "fp8_e4m3", "fp8_e5m2", "float8_e4m3fn":
		return FP8, nil
	case "fp32", "float32", "float":
		return FP32, nil
	case "q8_0":
		return Q8, nil
	}
	return 0, fmt.Errorf("sim: unknown dtype %q (known: bf16, fp16, fp8, fp32, q8_0)", s)
}

// Precision is what a deployment stores and computes in.
//
// Weights applies to the decoder's linear layers (q, k, v, o, gate, up,
// down): vLLM's --quantization fp8 quantizes exactly those and keeps the
// embedding, the LM head and the norms in the activation dtype. With FP8
// weights on a GPU that has FP8 tensor cores the GEMMs run W8A8 at the FP8
// peak (activations quantized per step by a separate kernel); on one
// without (A100, A10) vLLM runs weight-only FP8 (the Marlin kernel): FP8
// weight bytes, BF16 compute. Activations is also the wire element of every
// collective (4 for the CPU engine's float32, 2 on GPUs). KV is the KV
// cache element (vLLM's --kv-cache-dtype). HeadInWeights holds the
// embedding and the LM head in Weights too, as the CPU engine keeps every
// matrix in one format.
type Precision struct {
	Weights     DType
	Activations DType
	KV          DType
	// HeadInWeights: the embedding and LM head are stored and multiplied
	// in Weights (the CPU engine); false: in Activations (vLLM).
	HeadInWeights bool
}

// CPUPrecision is the CPU engine's on a float32 checkpoint: float32
// everywhere.
var CPUPrecision = Precision{Weights: FP32, Activations: FP32, KV: FP32, HeadInWeights: true}

// head is the dtype of the embedding and the LM head.
func (p Precision) head() DType {
	if p.HeadInWeights {
		return p.Weights
	}
	return p.Activations
}

// String writes "weights=fp8 activations=bf16 kv=bf16".
func (p Precision) String() string {
	return fmt.Sprintf("weights=%s activations=%s kv=%s", p.Weights, p.Activations, p.KV)
}

// VLLMPrecision resolves vLLM's flags for a model:
//
//   - dtype ("auto", or a dtype name): "auto" is BF16 for a BF16 checkpoint
//     and FP16 for FP16 and FP32 ones (vLLM's documented rule for --dtype
//     auto); an absent torch_dtype counts as BF16.
//   - quantization ("", "none" or "fp8"): --quantization fp8.
//   - kvCacheDType ("auto", or a dtype name: "fp8", "fp8_e4m3",
//     "fp8_e5m2", "bfloat16", "float16", "float32"): --kv-cache-dtype;
//     "auto" is the activation dtype.
func VLLMPrecision(cfg *model.Config, dtype, quantization, kvCacheDType string) (Precision, error) {
	var p Precision
	switch d := strings.ToLower(strings.TrimSpace(dtype)); d {
	case "", "auto":
		switch strings.ToLower(cfg.TorchDtype) {
		case "float16", "float32", "fp16", "fp32":
			p.Activations = FP16
		default:
			p.Activations = BF16
		}
	default:
		a, err := ParseDType(d)
		if err != nil {
			return p, err
		}
		if a == FP8 || a == Q8 {
			return p, fmt.Errorf("sim: --dtype %s: activations must be bf16, fp16 or fp32 (use --quantization fp8 for FP8 weights)", dtype)
		}
		p.Activations = a
	}
	switch q := strings.ToLower(strings.TrimSpace(quantization)); q {
	case "", "none":
		p.Weights = p.Activations
	case "fp8":
		p.Weights = FP8
	default:
		return p, fmt.Errorf("sim: unsupported --quantization %q (supported: fp8)", quantization)
	}
	switch k := strings.ToLower(strings.TrimSpace(kvCacheDType)); k {
	case "", "auto":
		p.KV = p.Activations
	default:
		d, err := ParseDType(k)
		if err != nil || d == Q8 {
			return p, fmt.Errorf("sim: unsupported --kv-cache-dtype %q (supported: auto, bfloat16, float16, float32, fp8, fp8_e4m3, fp8_e5m2)", kvCacheDType)
		}
		p.KV = d
	}
	return p, nil
}

// CPUEnginePrecision is the CPU engine's precision for a model under
// gearbox serve's flags:
//
//   - dtype ("auto", or bfloat16, float16, float32): the format every
//     matrix is held and multiplied in; "auto" keeps the checkpoint's
//     torch_dtype (float32 when it names none), as the CPU engine does.
//     Activations are float32 whatever it says, and the inputs of bfloat16
//     products are rounded to bfloat16 (the GEMM curve the profile
//     measured for that format);
//   - quantization ("", "none" or "int8"): int8 holds every matrix in
//     Q8_0 instead (serve's --quantization int8, which needs dtype auto or
//     float32, the values it quantizes);
//   - kvCacheDType ("auto" or float32, bfloat16, float16): the KV cache;
//     "auto" is float32. FP8 is refused: the CPU engine does not store it.
func CPUEnginePrecision(cfg *model.Config, dtype, quantization, kvCacheDType string) (Precision, error) {
	p := CPUPrecision
	d := strings.ToLower(strings.TrimSpace(dtype))
	from := fmt.Sprintf("--dtype %q on the CPU", dtype)
	switch q := strings.ToLower(strings.TrimSpace(quantization)); q {
	case "", "none":
		if d == "" || d == "auto" {
			if d = cfg.TorchDtype; d == "" {
				d = "float32"
			}
			from = fmt.Sprintf("the checkpoint's torch_dtype %q (set --dtype)", d)
		}
		w, err := ParseDType(d)
		if err != nil || w == FP8 || w == Q8 {
			return p, fmt.Errorf("sim: %s: the CPU engine holds matrices in float32, bfloat16 or float16 (Q8_0 under --quantization int8)", from)
		}
		p.Weights = w
	case "int8":
		if d != "" && d != "auto" && d != "float32" && d != "fp32" {
			return p, fmt.Errorf("sim: --quantization int8 with --dtype %s: the CPU engine quantizes float32 values; use --dtype auto or float32", dtype)
		}
		p.Weights = Q8
	default:
		return p, fmt.Errorf("sim: unsupported --quantization %q on the CPU (supported: int8)", quantization)
	}
	k := strings.ToLower(strings.TrimSpace(kvCacheDType))
	if k == "" || k == "auto" {
		return p, nil
	}
	kv, err := ParseDType(k)
	if err != nil {
		return p, fmt.Errorf("sim: unsupported --kv-cache-dtype %q on the CPU (supported: auto, float32, bfloat16, float16)", kvCacheDType)
	}
	if kv == FP8 || kv == Q8 {
		return p, fmt.Errorf("sim: --kv-cache-dtype %s on the CPU: the CPU engine stores its KV cache in float32, bfloat16 or float16, not %s", kvCacheDType, kv)
	}
	p.KV = kv
	return p, nil
}
