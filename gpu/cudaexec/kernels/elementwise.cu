// elementwise.cu: embedding lookup, row gather, strided 2-D copy, SwiGLU, in-place add, dtype
// conversion and greedy argmax. All shapes are row-major.
//
// embed_T(x, table, ids, n, hidden, vocabLo, vocabHi)
//   x float [n, hidden]; table T [vocabHi-vocabLo, hidden]; ids int32 [n].
//   x[i,:] = table[ids[i]-vocabLo, :] when vocabLo <= ids[i] < vocabHi, else 0
//   (a tensor-parallel member holds one slice of the vocabulary).
//   grid (ceil(hidden/256), min(n, 65535)), block 256: x is the column, the
//   blocks of y stride over the rows.
//
// gather_rows_T(out, in, rows, m, width)
//   out T [m, width] = in[rows[i], :]; rows int32 [m]. Same grid as embed.
//
// copy2d_T(dst, dstPitch, src, srcPitch, rows, cols)
//   dst[r*dstPitch + c] = src[r*srcPitch + c] for r < rows, c < cols (T
//   elements; pitches in elements). Same grid as embed, over cols.
//
// silu_mul_T(out, gateUp, bias, n, inter, vec)
//   gateUp T [n, 2*inter] holds [gate | up]; bias T [2*inter] or NULL.
//   out T [n, inter] = silu(gate + bias[:inter]) * (up + bias[inter:]),
//   silu(g) = g / (1 + exp(-g)). grid (ceil(inter/(256*V)), min(n, 65535)),
//   block 256, V = 4 columns per thread when vec != 0 (the caller checks that
//   inter % 4 == 0 and that out, gateUp and bias are 4-element aligned),
//   else V = 1.
//
// add_T(dst, src, n)          dst[i] = dst[i] + src[i], i < n (64-bit n).
// convert_T(out, in, n)       out T[i] = in float[i].
// to_f32_T(out, in, n)        out float[i] = in T[i].
//   grid-stride loops: grid (min(ceil(n/2048), 8192)), block 256; eight
//   elements per thread per step with 16-byte accesses when both pointers
//   are 16-byte aligned, then a scalar tail.
//
// argmax(idx, logits, vocab)
//   logits float [rows, vocab]; idx int32 [rows] = the first index of the
//   largest element of the row (NaN never wins; 0 when every element is
//   NaN). grid (rows), block 1024 (any multiple of 32 works).

template <class T>
__device__ __forceinline__ void embed_impl(float* __restrict__ x, const typename T::S* __restrict__ table,
                                           const int* __restrict__ ids, int n, int hidden, int vocabLo,
                                           int vocabHi) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= hidden) return;
  for (int i = blockIdx.y; i < n; i += gridDim.y) {
    const int id = ids[i];
    float v = 0.f;
    if (id >= vocabLo && id < vocabHi) v = T::tof(table[(i64)(id - vocabLo) * hidden + c]);
    x[(i64)i * hidden + c] = v;
  }
}

#define GB_EMBED(sfx, T)                                                                              \
  extern "C" __global__ void __launch_bounds__(256)                                                   \
      embed_##sfx(float* x, const T::S* table, const int* ids, int n, int hidden, int vocabLo,        \
                  int vocabHi) {                                                                      \
    embed_impl<T>(x, table, ids, n, hidden, vocabLo, vocabHi);                                        \
  }
GB_INSTANTIATE(GB_EMBED)

template <class T>
__device__ __forceinline__ void gather_rows_impl(typename T::S* __restrict__ out,
                                                 const typename T::S* __restrict__ in,
                                                 const int* __restrict__ rows, int m, int width) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= width) return;
  for (int i = blockIdx.y; i < m; i += gridDim.y)
    out[(i64)i * width + c] = in[(i64)rows[i] * width + c];
}

#define GB_GATHER(sfx, T)                                                                         \
  extern "C" __global__ void __launch_bounds__(256)                                               \
      gather_rows_##sfx(T::S* out, const T::S* in, const int* rows, int m, int width) {           \
    gather_rows_impl<T>(out, in, rows, m, width);                                                 \
  }
GB_INSTANTIATE(GB_GATHER)

template <class T>
__device__ __forceinline__ void copy2d_impl(typename T::S* __restrict__ dst, i64 dstPitch,
                                            const typename T::S* __restrict__ src, i64 srcPitch, int rows,
                                            int cols) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  for (int r = blockIdx.y; r < rows; r += gridDim.y) dst[r * dstPitch + c] = src[r * srcPitch + c];
}

#define GB_COPY2D(sfx, T)                                                                         \
  extern "C" __global__ void __launch_bounds__(256)                                               \
      copy2d_##sfx(T::S* dst, i64 dstPitch, const T::S* src, i64 srcPitch, int rows, int cols) {  \
    copy2d_impl<T>(dst, dstPitch, src, srcPitch, rows, cols);                                     \
  }
GB_INSTANTIATE(GB_COPY2D)

__device__ __forceinline__ float gb_silu(float g) { return g / (1.f + expf(-g)); }

template <class T>
__device__ __forceinline__ void silu_mul_impl(typename T::S* __restrict__ out,
                                              const typename T::S* __restrict__ gu,
                                              const typename T::S* __restrict__ bias, int n, int inter,
                                              int vec) {
  const i64 w2 = 2 * (i64)inter;
  if (vec) {
    const int j = (blockIdx.x * blockDim.x + threadIdx.x) * 4;
    if (j >= inter) return;
    float bg[4] = {0.f, 0.f, 0.f, 0.f}, bu[4] = {0.f, 0.f, 0.f, 0.f};
    if (bias) {
      ldv<T, 4>(bias + j, bg);
      ldv<T, 4>(bias + inter + j, bu);
    }
    for (int i = blockIdx.y; i < n; i += gridDim.y) {
      float g[4], u[4], o[4];
      ldv<T, 4>(gu + i * w2 + j, g);
      ldv<T, 4>(gu + i * w2 + inter + j, u);
#pragma unroll
      for (int e = 0; e < 4; e++) o[e] = gb_silu(g[e] + bg[e]) * (u[e] + bu[e]);
      stv<T, 4>(out + (i64)i * inter + j, o);
    }
  } else {
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= inter) return;
    float bg = 0.f, bu = 0.f;
    if (bias) {
      bg = T::tof(bias[j]);
      bu = T::tof(bias[inter + j]);
    }
    for (int i = blockIdx.y; i < n; i += gridDim.y) {
      const float g = T::tof(gu[i * w2 + j]) + bg, u = T::tof(gu[i * w2 + inter + j]) + bu;
      out[(i64)i * inter + j] = T::fromf(gb_silu(g) * u);
    }
  }
}

#define GB_SILU(sfx, T)                                                                              \
  extern "C" __global__ void __launch_bounds__(256)                                                  \
      silu_mul_##sfx(T::S* out, const T::S* gateUp, const T::S* bias, int n, int inter, int vec) {   \
    silu_mul_impl<T>(out, gateUp, bias, n, inter, vec);                                              \
  }
GB_INSTANTIATE(GB_SILU)

// map_impl is the grid-stride loop of add, convert and to_f32: out[i] =
// f(out[i], in[i]) where out has type TO and in type TI; ADD says whether
// out is read (add) or only written (conversions).
template <class TO, class TI, bool ADD>
__device__ __forceinline__ void map_impl(typename TO::S* __restrict__ out, const typename TI::S* __restrict__ in,
                                         i64 n) {
  constexpr int V = 8;
  const i64 nv = (gb_aligned(out, 16) && gb_aligned(in, 16)) ? n / V : 0;
  const i64 t = (i64)blockIdx.x * blockDim.x + threadIdx.x;
  const i64 stride = (i64)gridDim.x * blockDim.x;
  for (i64 i = t; i < nv; i += stride) {
    float a[V], b[V];
    ldv<TI, V>(in + i * V, b);
    if (ADD) {
      ldv<TO, V>(out + i * V, a);
#pragma unroll
      for (int e = 0; e < V; e++) a[e] += b[e];
    } else {
#pragma unroll
      for (int e = 0; e < V; e++) a[e] = b[e];
    }
    stv<TO, V>(out + i * V, a);
  }
  for (i64 i = nv * V + t; i < n; i += stride) {
    float b = TI::tof(in[i]);
    if (ADD) b += TO::tof(out[i]);
    out[i] = TO::fromf(b);
  }
}

#define GB_MAP(sfx, T)                                                                              \
  extern "C" __global__ void __launch_bounds__(256) add_##sfx(T::S* dst, const T::S* src, i64 n) {  \
    map_impl<T, T, true>(dst, src, n);                                                              \
  }                                                                                                 \
  extern "C" __global__ void __launch_bounds__(256) convert_##sfx(T::S* out, const float* in, i64 n) { \
    map_impl<T, F32, false>(out, in, n);                                                            \
  }                                                                                                 \
  extern "C" __global__ void __launch_bounds__(256) to_f32_##sfx(float* out, const T::S* in, i64 n) { \
    map_impl<F32, T, false>(out, in, n);                                                            \
  }
GB_INSTANTIATE(GB_MAP)

// gb_better reports whether (v, i) beats (bv, bi): larger value, or equal value
// at a lower index. NaN compares false both ways, so it never wins.
__device__ __forceinline__ bool gb_better(float v, int i, float bv, int bi) {
  return v > bv || (v == bv && i < bi);
}

extern "C" __global__ void __launch_bounds__(1024) argmax(int* idx, const float* logits, int vocab) {
  __shared__ float sv[32];
  __shared__ int si[32];
  const float* x = logits + (i64)blockIdx.x * vocab;
  float best = GB_NEG_INF;
  int bi = 0x7fffffff;
  for (int j = threadIdx.x; j < vocab; j += blockDim.x) {
    const float v = x[j];
    if (gb_better(v, j, best, bi)) {
      best = v;
      bi = j;
    }
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(GB_FULL_MASK, best, o);
    const int oi = __shfl_xor_sync(GB_FULL_MASK, bi, o);
    if (gb_better(ov, oi, best, bi)) {
      best = ov;
      bi = oi;
    }
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) {
    sv[warp] = best;
    si[warp] = bi;
  }
  __syncthreads();
  if (warp == 0) {
    best = GB_NEG_INF;
    bi = 0x7fffffff;
    if (lane < (int)(blockDim.x >> 5)) {
      best = sv[lane];
      bi = si[lane];
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      const float ov = __shfl_xor_sync(GB_FULL_MASK, best, o);
      const int oi = __shfl_xor_sync(GB_FULL_MASK, bi, o);
      if (gb_better(ov, oi, best, bi)) {
        best = ov;
        bi = oi;
      }
    }
    if (lane == 0) idx[blockIdx.x] = bi == 0x7fffffff ? 0 : bi;
  }
}
