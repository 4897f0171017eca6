// A fake CUDA driver (libcuda.so.1) for testing package cuda on hosts
// without a GPU. Build: cc -shared -fPIC -o libcuda.so.1 fakecuda.c
//
// "Device memory" is host memory from malloc. Like the real driver, the
// current context is per OS thread: calls that need one fail with
// CUDA_ERROR_INVALID_CONTEXT (201) on a thread where cuCtxSetCurrent was
// not called. Kernels: "fill" (float* p, float v, int n) sets p[i] = v + i;
// "dims" (unsigned* out) stores the launch's grid, block and shared size.
// Define OMIT_GRAPH_LAUNCH to leave out cuGraphLaunch.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef void *CUcontext;
typedef void *CUstream;
typedef void *CUmodule;
typedef void *CUfunction;
typedef void *CUevent;
typedef void *CUgraph;
typedef void *CUgraphExec;

#define MAXDEV 8
static int ndev = 2;
static int inited;
static char primary[MAXDEV];
static int retained[MAXDEV];
static __thread void *current;

#define NEED_CTX            \
	do {                    \
		if (!current)       \
			return 201;     \
	} while (0)
#define PTR(p) ((void *)(uintptr_t)(p))

CUresult cuInit(unsigned flags) {
	if (flags)
		return 1;
	const char *e = getenv("FAKECUDA_DEVICES");
	if (e)
		ndev = atoi(e);
	inited = 1;
	return 0;
}
CUresult cuDriverGetVersion(int *v) { *v = 13000; return 0; }
CUresult cuDeviceGetCount(int *n) {
	if (!inited)
		return 3;
	*n = ndev;
	return 0;
}
CUresult cuDeviceGet(CUdevice *d, int ordinal) {
	if (ordinal < 0 || ordinal >= ndev)
		return 101;
	*d = ordinal;
	return 0;
}
CUresult cuDeviceGetName(char *name, int len, CUdevice d) {
	snprintf(name, len, "Fake GPU %d", d);
	return 0;
}
CUresult cuDeviceGetAttribute(int *v, int attr, CUdevice d) {
	switch (attr) {
	case 75: *v = 9; return 0;
	case 76: *v = 0; return 0;
	case 16: *v = 132; return 0;
	}
	return 1;
}
CUresult cuDeviceTotalMem_v2(size_t *b, CUdevice d) { *b = (size_t)80 << 30; return 0; }
CUresult cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d) {
	retained[d]++;
	*c = &primary[d];
	return 0;
}
CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d) {
	if (retained[d] <= 0)
		return 1;
	retained[d]--;
	return 0;
}
CUresult cuCtxSetCurrent(CUcontext c) { current = c; return 0; }
CUresult cuCtxSynchronize(void) { NEED_CTX; return 0; }
CUresult cuMemGetInfo_v2(size_t *f, size_t *t) {
	NEED_CTX;
	*f = (size_t)70 << 30;
	*t = (size_t)80 << 30;
	return 0;
}
CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n) {
	NEED_CTX;
	if (n == 0)
		return 1;
	if (n > (size_t)1 << 40)
		return 2;
	void *m = malloc(n);
	if (!m)
		return 2;
	*p = (CUdeviceptr)(uintptr_t)m;
	return 0;
}
CUresult cuMemFree_v2(CUdeviceptr p) { NEED_CTX; free(PTR(p)); return 0; }
CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n) { NEED_CTX; memcpy(PTR(dst), src, n); return 0; }
CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n) { NEED_CTX; memcpy(dst, PTR(src), n); return 0; }
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, CUstream s) { NEED_CTX; memcpy(PTR(dst), src, n); return 0; }
CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, CUstream s) { NEED_CTX; memcpy(dst, PTR(src), n); return 0; }
CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) { NEED_CTX; memmove(PTR(dst), PTR(src), n); return 0; }
CUresult cuMemsetD8Async(CUdeviceptr p, unsigned char v, size_t n, CUstream s) { NEED_CTX; memset(PTR(p), v, n); return 0; }
CUresult cuMemsetD32Async(CUdeviceptr p, unsigned v, size_t n, CUstream s) {
	NEED_CTX;
	unsigned *w = PTR(p);
	for (size_t i = 0; i < n; i++)
		w[i] = v;
	return 0;
}
CUresult cuStreamCreate(CUstream *s, unsigned flags) {
	NEED_CTX;
	if (flags != 1)
		return 1;
	*s = malloc(1);
	return 0;
}
CUresult cuStreamDestroy_v2(CUstream s) { NEED_CTX; free(s); return 0; }
CUresult cuStreamSynchronize(CUstream s) { NEED_CTX; return 0; }

static char module;
CUresult cuModuleLoadData(CUmodule *m, const void *image) {
	NEED_CTX;
	if (strcmp(image, "fake module") != 0)
		return 218; // CUDA_ERROR_INVALID_PTX
	*m = &module;
	return 0;
}
CUresult cuModuleGetFunction(CUfunction *f, CUmodule m, const char *name) {
	NEED_CTX;
	if (m != &module)
		return 400;
	if (strcmp(name, "fill") == 0) {
		*f = PTR(1);
		return 0;
	}
	if (strcmp(name, "dims") == 0) {
		*f = PTR(2);
		return 0;
	}
	return 500; // CUDA_ERROR_NOT_FOUND
}
CUresult cuModuleUnload(CUmodule m) { NEED_CTX; return m == &module ? 0 : 400; }
CUresult cuFuncSetAttribute(CUfunction f, int attr, int v) {
	NEED_CTX;
	if (v == 12345)
		return 12345; // a code only cuGetErrorName knows
	return attr == 8 && v >= 0 ? 0 : 1;
}
CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                        unsigned bz, unsigned shared, CUstream s, void **params, void **extra) {
	NEED_CTX;
	if (extra)
		return 1;
	if (f == PTR(1)) {
		float *p = PTR(*(CUdeviceptr *)params[0]);
		float v = *(float *)params[1];
		int n = *(int *)params[2];
		if ((long long)gx * bx < n)
			return 1;
		for (int i = 0; i < n; i++)
			p[i] = v + (float)i;
		return 0;
	}
	if (f == PTR(2)) {
		unsigned *out = PTR(*(CUdeviceptr *)params[0]);
		unsigned d[7] = {gx, gy, gz, bx, by, bz, shared};
		memcpy(out, d, sizeof d);
		return 0;
	}
	return 400; // CUDA_ERROR_INVALID_HANDLE
}
CUresult cuEventCreate(CUevent *e, unsigned flags) { NEED_CTX; *e = calloc(1, 1); return 0; }
// A recorded event is pending for one cuEventQuery, then done.
CUresult cuEventRecord(CUevent e, CUstream s) { NEED_CTX; *(char *)e = 1; return 0; }
CUresult cuEventSynchronize(CUevent e) { NEED_CTX; *(char *)e = 0; return 0; }
CUresult cuEventQuery(CUevent e) {
	NEED_CTX;
	if (*(char *)e) {
		*(char *)e = 0;
		return 600; // CUDA_ERROR_NOT_READY
	}
	return 0;
}
CUresult cuEventElapsedTime(float *ms, CUevent start, CUevent end) { NEED_CTX; *ms = 1.5f; return 0; }
CUresult cuEventDestroy_v2(CUevent e) { NEED_CTX; free(e); return 0; }
CUresult cuStreamBeginCapture_v2(CUstream s, int mode) { NEED_CTX; return s && mode == 1 ? 0 : 1; }
CUresult cuStreamEndCapture(CUstream s, CUgraph *g) { NEED_CTX; *g = PTR(0x20); return 0; }
CUresult cuGraphInstantiateWithFlags(CUgraphExec *e, CUgraph g, unsigned long long flags) {
	NEED_CTX;
	if (g != PTR(0x20) || flags)
		return 1;
	*e = PTR(0x30);
	return 0;
}
#ifndef OMIT_GRAPH_LAUNCH
CUresult cuGraphLaunch(CUgraphExec e, CUstream s) { NEED_CTX; return e == PTR(0x30) ? 0 : 400; }
#endif
CUresult cuGraphDestroy(CUgraph g) { NEED_CTX; return 0; }
CUresult cuGraphExecDestroy(CUgraphExec e) { NEED_CTX; return 0; }
CUresult cuGetErrorName(CUresult code, const char **s) {
	if (code == 12345) {
		*s = "CUDA_ERROR_FAKE_12345";
		return 0;
	}
	return 1;
}
