// common.cu: definitions shared by every kernel file. KernelSource puts this
// file first; the others follow in a fixed order and may use everything here.
//
// Element types. Each kernel is written once as a template over a tag type
// T, one of F32, F16 and BF16. T::S is the storage type (float, or unsigned
// short holding IEEE half or bfloat16 bits), T::tof widens one element to
// float and T::fromf rounds a float to T (round to nearest even). All
// arithmetic is in float. No CUDA header is included: the conversions are
// inline PTX or bit operations, so the source compiles the same under every
// NVRTC (11.8 and 13.0 find different headers).
//
// Entry points. Each kernel has one extern "C" __global__ wrapper per type,
// named <kernel>_f32, <kernel>_f16 and <kernel>_bf16 (GB_INSTANTIATE), so
// the names are not mangled. Defining GB_ONLY_F32, GB_ONLY_F16 or
// GB_ONLY_BF16 (LoadKernels passes -DGB_ONLY_<dtype>) instantiates one type
// only, a third of the compile time; the untyped kernels (argmax) are always
// there. Integer arrays (token ids, positions, slots,
// block tables) are int32; sizes are int and element offsets are computed
// in 64 bits.

typedef unsigned short u16;
typedef long long i64;
typedef unsigned long long u64;

#define GB_INF __int_as_float(0x7f800000)
#define GB_NEG_INF __int_as_float(0xff800000)
#define GB_FULL_MASK 0xffffffffu

struct F32 {
  typedef float S;
  static __device__ __forceinline__ float tof(float v) { return v; }
  static __device__ __forceinline__ float fromf(float v) { return v; }
};

struct F16 {
  typedef u16 S;
  static __device__ __forceinline__ float tof(u16 v) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(v));
    return f;
  }
  static __device__ __forceinline__ u16 fromf(float f) {
    u16 h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
  }
  // tof2 widens the two halves of a 32-bit word, low half first.
  static __device__ __forceinline__ void tof2(unsigned w, float& a, float& b) {
    a = tof((u16)(w & 0xffffu));
    b = tof((u16)(w >> 16));
  }
};

struct BF16 {
  typedef u16 S;
  static __device__ __forceinline__ float tof(u16 v) {
    return __uint_as_float(((unsigned)v) << 16);
  }
  static __device__ __forceinline__ u16 fromf(float f) {
    u16 h;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
  }
  static __device__ __forceinline__ void tof2(unsigned w, float& a, float& b) {
    a = __uint_as_float(w << 16);
    b = __uint_as_float(w & 0xffff0000u);
  }
};

// GB_INSTANTIATE(M) expands M(suffix, tag) once per element type built.
#if defined(GB_ONLY_F32)
#define GB_INSTANTIATE(M) M(f32, F32)
#elif defined(GB_ONLY_F16)
#define GB_INSTANTIATE(M) M(f16, F16)
#elif defined(GB_ONLY_BF16)
#define GB_INSTANTIATE(M) M(bf16, BF16)
#else
#define GB_INSTANTIATE(M) M(f32, F32) M(f16, F16) M(bf16, BF16)
#endif

// GB_INSTANTIATE_HALF(M) is GB_INSTANTIATE for the kernels that exist for
// the 16-bit types only (the tensor-core ones).
#if defined(GB_ONLY_F32)
#define GB_INSTANTIATE_HALF(M)
#elif defined(GB_ONLY_F16)
#define GB_INSTANTIATE_HALF(M) M(f16, F16)
#elif defined(GB_ONLY_BF16)
#define GB_INSTANTIATE_HALF(M) M(bf16, BF16)
#else
#define GB_INSTANTIATE_HALF(M) M(f16, F16) M(bf16, BF16)
#endif

__device__ __forceinline__ int gb_min(int a, int b) { return a < b ? a : b; }

// Dynamic shared memory of every kernel that uses it.
extern __shared__ __align__(16) float gb_smem[];

// gb_aligned reports whether p is a multiple of b bytes (b a power of two).
__device__ __forceinline__ bool gb_aligned(const void* p, unsigned b) {
  return (reinterpret_cast<u64>(p) & (u64)(b - 1)) == 0;
}

// ldv widens N consecutive elements at p into v using the widest loads
// that N allows: p must be aligned to N elements' bytes, up to 16.
template <class T, int N>
__device__ __forceinline__ void ldv(const typename T::S* p, float* v) {
  if constexpr (sizeof(typename T::S) == 4) {
    if constexpr (N % 4 == 0) {
#pragma unroll
      for (int i = 0; i < N; i += 4) {
        float4 a = reinterpret_cast<const float4*>(p)[i / 4];
        v[i] = a.x; v[i + 1] = a.y; v[i + 2] = a.z; v[i + 3] = a.w;
      }
    } else if constexpr (N % 2 == 0) {
#pragma unroll
      for (int i = 0; i < N; i += 2) {
        float2 a = reinterpret_cast<const float2*>(p)[i / 2];
        v[i] = a.x; v[i + 1] = a.y;
      }
    } else {
#pragma unroll
      for (int i = 0; i < N; i++) v[i] = p[i];
    }
  } else {
    if constexpr (N % 8 == 0) {
#pragma unroll
      for (int i = 0; i < N; i += 8) {
        uint4 a = reinterpret_cast<const uint4*>(p)[i / 8];
        T::tof2(a.x, v[i], v[i + 1]);
        T::tof2(a.y, v[i + 2], v[i + 3]);
        T::tof2(a.z, v[i + 4], v[i + 5]);
        T::tof2(a.w, v[i + 6], v[i + 7]);
      }
    } else if constexpr (N % 4 == 0) {
#pragma unroll
      for (int i = 0; i < N; i += 4) {
        uint2 a = reinterpret_cast<const uint2*>(p)[i / 4];
        T::tof2(a.x, v[i], v[i + 1]);
        T::tof2(a.y, v[i + 2], v[i + 3]);
      }
    } else if constexpr (N % 2 == 0) {
#pragma unroll
      for (int i = 0; i < N; i += 2) {
        unsigned a = reinterpret_cast<const unsigned*>(p)[i / 2];
        T::tof2(a, v[i], v[i + 1]);
      }
    } else {
#pragma unroll
      for (int i = 0; i < N; i++) v[i] = T::tof(p[i]);
    }
  }
}

// pack2 rounds two floats to a 16-bit type and packs them, a in the low
// half.
template <class T>
__device__ __forceinline__ unsigned pack2(float a, float b) {
  return (unsigned)T::fromf(a) | ((unsigned)T::fromf(b) << 16);
}

// stv rounds N floats to T and stores them at p with the widest stores N
// allows; p must be aligned as for ldv.
template <class T, int N>
__device__ __forceinline__ void stv(typename T::S* p, const float* v) {
  if constexpr (sizeof(typename T::S) == 4) {
    if constexpr (N % 4 == 0) {
#pragma unroll
      for (int i = 0; i < N; i += 4)
        reinterpret_cast<float4*>(p)[i / 4] = make_float4(v[i], v[i + 1], v[i + 2], v[i + 3]);
    } else if constexpr (N % 2 == 0) {
#pragma unroll
      for (int i = 0; i < N; i += 2)
        reinterpret_cast<float2*>(p)[i / 2] = make_float2(v[i], v[i + 1]);
    } else {
#pragma unroll
      for (int i = 0; i < N; i++) p[i] = v[i];
    }
  } else {
    if constexpr (N % 8 == 0) {
#pragma unroll
      for (int i = 0; i < N; i += 8)
        reinterpret_cast<uint4*>(p)[i / 8] =
            make_uint4(pack2<T>(v[i], v[i + 1]), pack2<T>(v[i + 2], v[i + 3]),
                       pack2<T>(v[i + 4], v[i + 5]), pack2<T>(v[i + 6], v[i + 7]));
    } else if constexpr (N % 4 == 0) {
#pragma unroll
      for (int i = 0; i < N; i += 4)
        reinterpret_cast<uint2*>(p)[i / 4] =
            make_uint2(pack2<T>(v[i], v[i + 1]), pack2<T>(v[i + 2], v[i + 3]));
    } else if constexpr (N % 2 == 0) {
#pragma unroll
      for (int i = 0; i < N; i += 2)
        reinterpret_cast<unsigned*>(p)[i / 2] = pack2<T>(v[i], v[i + 1]);
    } else {
#pragma unroll
      for (int i = 0; i < N; i++) p[i] = T::fromf(v[i]);
    }
  }
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(GB_FULL_MASK, v, o);
  return v;
}

// block_sum returns the sum of v over the block to every thread. blockDim.x
// must be a multiple of 32 (blockDim.y = blockDim.z = 1); red holds 32
// floats. It synchronises the block, so every thread must call it.
__device__ __forceinline__ float block_sum(float v, float* red) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = warp_sum(v);
  __syncthreads();  // red may still be read by an earlier call
  if (lane == 0) red[warp] = v;
  __syncthreads();
  v = lane < (int)(blockDim.x >> 5) ? red[lane] : 0.f;
  return warp_sum(v);
}
