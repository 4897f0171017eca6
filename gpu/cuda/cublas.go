package cuda

import (
	"fmt"
	"math"
	"runtime"
	"unsafe"

	"github.com/gearboxlm/gearbox/gpu"
)

// DataType is a cudaDataType (library_types.h): an element type of a GEMM
// operand.
type DataType int32

// Element types for Gemm.
const (
	R32F  DataType = 0  // CUDA_R_32F, float32
	R16F  DataType = 2  // CUDA_R_16F, IEEE half
	R16BF DataType = 14 // CUDA_R_16BF, bfloat16
)

// String names t as cudaDataType does, e.g. "CUDA_R_16BF".
func (t DataType) String() string {
	switch t {
	case R32F:
		return "CUDA_R_32F"
	case R16F:
		return "CUDA_R_16F"
	case R16BF:
		return "CUDA_R_16BF"
	}
	return fmt.Sprintf("cudaDataType(%d)", int32(t))
}

// cuBLAS constants from cublas_api.h.
const (
	cublasOpN         = 0  // CUBLAS_OP_N
	cublasOpT         = 1  // CUBLAS_OP_T
	cublasCompute32F  = 68 // CUBLAS_COMPUTE_32F
	cublasGemmDefault = -1 // CUBLAS_GEMM_DEFAULT
)

// cublasAPI holds the cuBLAS functions. cublasHandle_t is a handle
// (uintptr); cublasStatus_t and the enums are int32.
type cublasAPI struct {
	cublasCreate       func(h *uintptr) int32
	cublasDestroy      func(h uintptr) int32
	cublasSetStream    func(h uintptr, s Stream) int32
	cublasSetWorkspace func(h uintptr, p DevicePtr, bytes uintptr) int32
	cublasGemmEx       func(h uintptr, transA, transB int32, m, n, k int32,
		alpha unsafe.Pointer, a DevicePtr, at DataType, lda int32,
		b DevicePtr, bt DataType, ldb int32,
		beta unsafe.Pointer, c DevicePtr, ct DataType, ldc int32,
		compute int32, algo int32) int32
}

func (a *cublasAPI) symbols() []symbol {
	return []symbol{
		{fn: &a.cublasCreate, name: "cublasCreate_v2"},
		{fn: &a.cublasDestroy, name: "cublasDestroy_v2"},
		{fn: &a.cublasSetStream, name: "cublasSetStream_v2"},
		{fn: &a.cublasSetWorkspace, name: "cublasSetWorkspace_v2"},
		{fn: &a.cublasGemmEx, name: "cublasGemmEx"},
	}
}

// BLAS is a cuBLAS handle bound to the Context that created it. Its
// methods, and NewBLAS, must be called inside that Context's Do.
type BLAS struct {
	c    *Context
	api  *cublasAPI
	h    uintptr // cublasHandle_t; 0 after Close
	path string
}

// NewBLAS finds cuBLAS with gpu.Search, loads it and creates a handle on
// c's device. Call inside Do.
func (c *Context) NewBLAS() (*BLAS, error) {
	path, _, err := gpu.Search(gpu.CUBLAS, gpu.OSEnv())
	if err != nil {
		return nil, err
	}
	api, err := load(gpu.CUBLAS, path, (*cublasAPI).symbols)
	if err != nil {
		return nil, err
	}
	b := &BLAS{c: c, api: api, path: path}
	if err := b.check("cublasCreate_v2", api.cublasCreate(&b.h)); err != nil {
		return nil, err
	}
	return b, nil
}

// Path is the cuBLAS library file that was loaded.
func (b *BLAS) Path() string { return b.path }

// check returns nil for CUBLAS_STATUS_SUCCESS and otherwise an error naming
// the device and wrapping the *gpu.Error for call.
func (b *BLAS) check(call string, code int32) error {
	if err := gpu.Check(gpu.LibCUBLAS, call, int(code)); err != nil {
		return fmt.Errorf("cuda: device %d: %w", b.c.ordinal, err)
	}
	return nil
}

// handle returns the cuBLAS handle, or an error after Close.
func (b *BLAS) handle() (uintptr, error) {
	if b.h == 0 {
		return 0, fmt.Errorf("cuda: device %d: cuBLAS handle closed", b.c.ordinal)
	}
	return b.h, nil
}

// SetStream makes later calls queue their work on s. Call inside Do.
func (b *BLAS) SetStream(s Stream) error {
	h, err := b.handle()
	if err != nil {
		return err
	}
	return b.check("cublasSetStream_v2", b.api.cublasSetStream(h, s))
}

// SetWorkspace gives cuBLAS bytes of device memory at p as its workspace,
// so that it allocates none while a stream is being captured into a CUDA
// graph. Call inside Do.
func (b *BLAS) SetWorkspace(p DevicePtr, bytes int64) error {
	h, err := b.handle()
	if err != nil {
		return err
	}
	if bytes < 0 {
		return fmt.Errorf("cuda: device %d: cuBLAS workspace: negative size %d", b.c.ordinal, bytes)
	}
	return b.check("cublasSetWorkspace_v2", b.api.cublasSetWorkspace(h, p, uintptr(bytes)))
}

// Gemm computes, in column-major order, C[m×n] = alpha·op(A)·op(B) + beta·C
// where op(A) is m×k and op(B) is k×n, with float32 accumulation
// (cublasGemmEx, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT). transA and
// transB select op(X) = Xᵀ (CUBLAS_OP_T); lda, ldb and ldc are the leading
// dimensions of the stored matrices. Call inside Do.
func (b *BLAS) Gemm(transA, transB bool, m, n, k int, alpha float32, a DevicePtr, at DataType, lda int, bm DevicePtr, bt DataType, ldb int, beta float32, cm DevicePtr, ct DataType, ldc int) error {
	h, err := b.handle()
	if err != nil {
		return err
	}
	var dims [6]int32
	for i, v := range [6]int{m, n, k, lda, ldb, ldc} {
		if v < 0 || v > math.MaxInt32 {
			return fmt.Errorf("cuda: device %d: gemm m=%d n=%d k=%d lda=%d ldb=%d ldc=%d: dimension out of range", b.c.ordinal, m, n, k, lda, ldb, ldc)
		}
		dims[i] = int32(v)
	}
	op := func(t bool) int32 {
		if t {
			return cublasOpT
		}
		return cublasOpN
	}
	code := b.api.cublasGemmEx(h, op(transA), op(transB), dims[0], dims[1], dims[2],
		unsafe.Pointer(&alpha), a, at, dims[3], bm, bt, dims[4],
		unsafe.Pointer(&beta), cm, ct, dims[5], cublasCompute32F, cublasGemmDefault)
	runtime.KeepAlive(&alpha)
	runtime.KeepAlive(&beta)
	if code != 0 {
		return fmt.Errorf("cuda: device %d: gemm m=%d n=%d k=%d types %v,%v,%v: %w",
			b.c.ordinal, m, n, k, at, bt, ct, gpu.Check(gpu.LibCUBLAS, "cublasGemmEx", int(code)))
	}
	return nil
}

// Close destroys the handle. It is idempotent. Call inside Do.
func (b *BLAS) Close() error {
	if b.h == 0 {
		return nil
	}
	h := b.h
	b.h = 0
	return b.check("cublasDestroy_v2", b.api.cublasDestroy(h))
}
