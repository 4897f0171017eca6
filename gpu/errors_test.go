package gpu

import (
	"errors"
	"fmt"
	"testing"
)

func TestCheckAndFormat(t *testing.T) {
	tests := []struct {
		lib  Lib
		call string
		code int
		want string
	}{
		{LibCUDA, "cuMemAlloc", 2, "cuMemAlloc: CUDA_ERROR_OUT_OF_MEMORY (2)"},
		{LibCUDA, "cuInit", 100, "cuInit: CUDA_ERROR_NO_DEVICE (100)"},
		{LibCUDA, "cuMemAlloc", 201, "cuMemAlloc: CUDA_ERROR_INVALID_CONTEXT (201)"},
		{LibCUDA, "cuCtxSynchronize", 700, "cuCtxSynchronize: CUDA_ERROR_ILLEGAL_ADDRESS (700)"},
		{LibCUDA, "cuCtxSynchronize", 719, "cuCtxSynchronize: CUDA_ERROR_LAUNCH_FAILED (719)"},
		{LibCUDA, "cuInit", 34, "cuInit: CUDA_ERROR_STUB_LIBRARY (34)"},
		{LibCUDA, "cuX", 12345, "cuX: CUDA_ERROR_UNRECOGNIZED_12345 (12345)"},
		{LibNVRTC, "nvrtcCompileProgram", 5, "nvrtcCompileProgram: NVRTC_ERROR_INVALID_OPTION (5)"},
		{LibNVRTC, "nvrtcCompileProgram", 6, "nvrtcCompileProgram: NVRTC_ERROR_COMPILATION (6)"},
		{LibCUBLAS, "cublasGemmEx", 15, "cublasGemmEx: CUBLAS_STATUS_NOT_SUPPORTED (15)"},
		{LibCUBLAS, "cublasCreate_v2", 1, "cublasCreate_v2: CUBLAS_STATUS_NOT_INITIALIZED (1)"},
		{Lib("cudnn"), "cudnnCreate", 3, "cudnnCreate: cudnn_UNRECOGNIZED_3 (3)"},
	}
	for _, tc := range tests {
		err := Check(tc.lib, tc.call, tc.code)
		if err == nil {
			t.Errorf("Check(%s, %d) = nil", tc.lib, tc.code)
			continue
		}
		if err.Error() != tc.want {
			t.Errorf("Check(%s, %d) = %q, want %q", tc.lib, tc.code, err, tc.want)
		}
	}
	for _, lib := range []Lib{LibCUDA, LibNVRTC, LibCUBLAS} {
		if err := Check(lib, "f", 0); err != nil {
			t.Errorf("Check(%s, 0) = %v, want nil", lib, err)
		}
	}
}

func TestErrorIsAndMessage(t *testing.T) {
	err := fmt.Errorf("alloc kv: %w", Check(LibCUDA, "cuMemAlloc", 2))
	if !errors.Is(err, &Error{Lib: LibCUDA, Code: 2}) {
		t.Error("errors.Is out-of-memory = false")
	}
	if errors.Is(err, &Error{Lib: LibNVRTC, Code: 2}) {
		t.Error("matched another library's code 2")
	}
	var e *Error
	if !errors.As(err, &e) || e.Call != "cuMemAlloc" || e.Message() == "" {
		t.Errorf("errors.As = %+v", e)
	}
	if (&Error{Lib: LibCUDA, Code: 4242}).Message() != "" {
		t.Error("unknown code has a message")
	}
}

func TestCodeTablesConsistent(t *testing.T) {
	prefixes := map[Lib]string{LibCUDA: "CUDA_", LibNVRTC: "NVRTC_", LibCUBLAS: "CUBLAS_STATUS_"}
	tables := map[Lib]map[int]codeInfo{LibCUDA: cudaCodes, LibNVRTC: nvrtcCodes, LibCUBLAS: cublasCodes}
	for lib, table := range tables {
		names := map[string]int{}
		for code, info := range table {
			if prev, dup := names[info.name]; dup {
				t.Errorf("%s: %s used for %d and %d", lib, info.name, prev, code)
			}
			names[info.name] = code
			if len(info.name) < len(prefixes[lib]) || info.name[:len(prefixes[lib])] != prefixes[lib] {
				t.Errorf("%s: code %d name %q lacks prefix %q", lib, code, info.name, prefixes[lib])
			}
			if info.msg == "" {
				t.Errorf("%s: code %d has no message", lib, code)
			}
		}
		if _, ok := table[0]; !ok {
			t.Errorf("%s: no success code", lib)
		}
	}
}
