// Package tensor holds the fp32 CPU math kernels of the forward pass:
// matrix multiplication against nn.Linear weights, the vector operations
// around it (RMSNorm, SiLU gating, softmax's exponentials, residual adds)
// and the worker Pool that runs them data-parallel.
//
// Invariant: every kernel is a pure function of its slice arguments and
// keeps no state between calls; the only globals it reads are the
// CPU-feature switches fixed at start-up. Callers may therefore run kernels
// concurrently on disjoint outputs, sharing one Pool. Vector kernels do not
// allocate; MatMul allocates one small closure per call and recycles its
// packing buffers through a sync.Pool.
//
// Layout: matrices are dense row-major []float32. A weight w of shape
// [n×k] is stored as PyTorch's nn.Linear stores it, [out, in], and MatMul
// computes y = x·wᵀ. Shape and length mismatches are programmer errors and
// panic with a message naming the function and the offending length.
//
// Low-precision weights: a Weights matrix holds w as float32, bfloat16,
// binary16 or Q8_0 (8-bit quants in blocks of 32 with one scale), and
// MatMulW multiplies by it in that format, accumulating in float32
// (against BF16 with x rounded to bfloat16): decode (m <= 32) streams the
// stored bytes once, which is what bounds its speed; prefill multiplies
// BF16 in bfloat16 pairs where the CPU has AVX-512 BF16 (bf16gemm.go),
// widens F16 (and elsewhere BF16) panels of w into the float32 GEMM and
// multiplies Q8_0 in 8-bit integers, tiles of rows of x by rows of w
// (q8gemm.go; on amd64 CPUs without AVX-512 VNNI it dequantizes panels
// into the float32 GEMM instead). Rows (a view), Cols (a copy in the
// same format) and Convert cut and re-type matrices for loaders and
// tensor-parallel shards. Read weights.go and lowp.go, then lowp_amd64.s;
// bf16gemm.go for BF16 prefill, q8gemm.go for Q8_0's; reshape.go for the
// cuts.
//
// Implementations: on amd64 with AVX2 and FMA the hot loops run in Go
// assembly, picked at run time (AVX-512 only for the decode GEMV tiles,
// where it measured faster on Zen 4, and the BF16 and Q8_0 prefill
// tiles, which need its BF16 and VNNI dot products); other CPUs, and builds with the noasm
// tag, run the portable Go kernels. MatMul serves m <= 32 (decode) with the
// unpacked dot-product path in gemv.go and larger m with the packed,
// cache-blocked GEMM in gemm.go, or with OpenBLAS's cblas_sgemm when built
// with the openblas tag and cgo. Read matmul.go first, then gemv.go and
// gemm.go, then simd_amd64.s and gemm_amd64.s for the kernels.
package tensor
