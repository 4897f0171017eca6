// norm.cu: residual add + RMSNorm, and the q/k/v epilogue of the attention
// projection (bias, per-head RMSNorm, RoPE, paged-cache write).
//
// add_rmsnorm_T(out, resid, delta, bias, weight, hidden, eps, vec)
//   resid float [n, hidden] (the residual stream); delta T [n, hidden] or
//   NULL; bias T [hidden] or NULL (used only with delta); weight T [hidden];
//   out T [n, hidden]. For each row: if delta, resid += delta + bias
//   (written back); then out = resid * rsqrt(mean(resid^2) + eps) * weight.
//   grid (n), block a power of two in [32, 1024]: one block per row, a
//   warp-shuffle block reduction. vec != 0 (the caller checks hidden % 4 ==
//   0 and that every pointer is 4-element aligned) moves 4 elements per
//   access.
//
// qkv_rope_T(q, kcache, vcache, qkv, bias, qNorm, kNorm, cos, sin, pos, slot,
//            heads, kvHeads, d, blockSize, eps)
//   qkv T [n, W], W = (heads + 2*kvHeads)*d, each row [q heads | k heads |
//   v heads]; bias T [W] or NULL; qNorm, kNorm T [d] or NULL; cos, sin float
//   [positions, d/2]; pos, slot int32 [n]. Every head gets the bias; q and k
//   heads then the optional per-head RMSNorm and the rotate-half RoPE at
//   position pos[i]:
//     x[j] = a*cos - b*sin, x[j+d/2] = b*cos + a*sin, a = x[j], b = x[j+d/2].
//   q heads go to q T [n, heads, d]; k and v heads go to the paged caches
//   kcache, vcache T [blocks, kvHeads, blockSize, d] at slot[i] (block
//   slot/blockSize, offset slot%blockSize), skipped when slot[i] < 0.
//   grid (n, ceil((heads + 2*kvHeads)/4)), block 128: one warp per head; lane
//   l handles the rotation pairs (j, j+d/2) for j = l, l+32, l+64, l+96
//   (d <= 256, even).

template <class T>
__device__ __forceinline__ void add_rmsnorm_impl(typename T::S* __restrict__ out, float* __restrict__ resid,
                                                 const typename T::S* __restrict__ delta,
                                                 const typename T::S* __restrict__ bias,
                                                 const typename T::S* __restrict__ weight, int hidden,
                                                 float eps, int vec) {
  __shared__ float red[32];
  const i64 base = (i64)blockIdx.x * hidden;
  float* r = resid + base;
  float ss = 0.f;
  if (vec) {
    const int h4 = hidden >> 2;
    for (int c = threadIdx.x; c < h4; c += blockDim.x) {
      float4 x = reinterpret_cast<const float4*>(r)[c];
      if (delta) {
        float dv[4];
        ldv<T, 4>(delta + base + 4 * c, dv);
        if (bias) {
          float bv[4];
          ldv<T, 4>(bias + 4 * c, bv);
#pragma unroll
          for (int e = 0; e < 4; e++) dv[e] += bv[e];
        }
        x.x += dv[0];
        x.y += dv[1];
        x.z += dv[2];
        x.w += dv[3];
        reinterpret_cast<float4*>(r)[c] = x;
      }
      ss += x.x * x.x + x.y * x.y + x.z * x.z + x.w * x.w;
    }
  } else {
    for (int c = threadIdx.x; c < hidden; c += blockDim.x) {
      float x = r[c];
      if (delta) {
        float dv = T::tof(delta[base + c]);
        if (bias) dv += T::tof(bias[c]);
        x += dv;
        r[c] = x;
      }
      ss += x * x;
    }
  }
  ss = block_sum(ss, red);
  const float inv = rsqrtf(ss / (float)hidden + eps);
  // Each thread reads back only the elements it wrote above.
  if (vec) {
    const int h4 = hidden >> 2;
    for (int c = threadIdx.x; c < h4; c += blockDim.x) {
      const float4 x = reinterpret_cast<const float4*>(r)[c];
      float w[4], o[4];
      ldv<T, 4>(weight + 4 * c, w);
      o[0] = x.x * inv * w[0];
      o[1] = x.y * inv * w[1];
      o[2] = x.z * inv * w[2];
      o[3] = x.w * inv * w[3];
      stv<T, 4>(out + base + 4 * c, o);
    }
  } else {
    for (int c = threadIdx.x; c < hidden; c += blockDim.x)
      out[base + c] = T::fromf(r[c] * inv * T::tof(weight[c]));
  }
}

#define GB_RMSNORM(sfx, T)                                                                           \
  extern "C" __global__ void __launch_bounds__(1024)                                                 \
      add_rmsnorm_##sfx(T::S* out, float* resid, const T::S* delta, const T::S* bias,                \
                        const T::S* weight, int hidden, float eps, int vec) {                        \
    add_rmsnorm_impl<T>(out, resid, delta, bias, weight, hidden, eps, vec);                          \
  }
GB_INSTANTIATE(GB_RMSNORM)

template <class T>
__device__ __forceinline__ void qkv_rope_impl(typename T::S* __restrict__ q, typename T::S* __restrict__ kcache,
                                              typename T::S* __restrict__ vcache,
                                              const typename T::S* __restrict__ qkv,
                                              const typename T::S* __restrict__ bias,
                                              const typename T::S* __restrict__ qNorm,
                                              const typename T::S* __restrict__ kNorm,
                                              const float* __restrict__ cosT, const float* __restrict__ sinT,
                                              const int* __restrict__ pos, const int* __restrict__ slot,
                                              int heads, int kvHeads, int d, int blockSize, float eps) {
  const int i = blockIdx.x;
  const int hh = blockIdx.y * 4 + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  const int th = heads + 2 * kvHeads;
  if (hh >= th) return;  // whole warp: no block-wide synchronisation below
  const int half = d >> 1;
  const typename T::S* x = qkv + (i64)i * th * d + (i64)hh * d;
  const typename T::S* bx = bias ? bias + (i64)hh * d : nullptr;
  float a[4], b[4];
#pragma unroll
  for (int t = 0; t < 4; t++) {
    const int j = lane + 32 * t;
    a[t] = b[t] = 0.f;
    if (j < half) {
      a[t] = T::tof(x[j]);
      b[t] = T::tof(x[j + half]);
      if (bx) {
        a[t] += T::tof(bx[j]);
        b[t] += T::tof(bx[j + half]);
      }
    }
  }
  typename T::S* dst;
  if (hh < heads) {
    dst = q + ((i64)i * heads + hh) * d;
  } else {
    const int sl = slot[i];
    if (sl < 0) return;
    const bool isK = hh < heads + kvHeads;
    const int kh = isK ? hh - heads : hh - heads - kvHeads;
    const int blk = sl / blockSize, off = sl - blk * blockSize;
    dst = (isK ? kcache : vcache) + (((i64)blk * kvHeads + kh) * blockSize + off) * d;
    if (!isK) {
#pragma unroll
      for (int t = 0; t < 4; t++) {
        const int j = lane + 32 * t;
        if (j < half) {
          dst[j] = T::fromf(a[t]);
          dst[j + half] = T::fromf(b[t]);
        }
      }
      return;
    }
  }
  const typename T::S* nw = hh < heads ? qNorm : kNorm;
  if (nw) {
    float ss = 0.f;
#pragma unroll
    for (int t = 0; t < 4; t++) ss += a[t] * a[t] + b[t] * b[t];
    ss = warp_sum(ss);
    const float inv = rsqrtf(ss / (float)d + eps);
#pragma unroll
    for (int t = 0; t < 4; t++) {
      const int j = lane + 32 * t;
      if (j < half) {
        a[t] = a[t] * inv * T::tof(nw[j]);
        b[t] = b[t] * inv * T::tof(nw[j + half]);
      }
    }
  }
  const i64 cb = (i64)pos[i] * half;
#pragma unroll
  for (int t = 0; t < 4; t++) {
    const int j = lane + 32 * t;
    if (j < half) {
      const float c = cosT[cb + j], s = sinT[cb + j];
      dst[j] = T::fromf(a[t] * c - b[t] * s);
      dst[j + half] = T::fromf(b[t] * c + a[t] * s);
    }
  }
}

#define GB_QKV(sfx, T)                                                                             \
  extern "C" __global__ void __launch_bounds__(128)                                                \
      qkv_rope_##sfx(T::S* q, T::S* kcache, T::S* vcache, const T::S* qkv, const T::S* bias,       \
                     const T::S* qNorm, const T::S* kNorm, const float* cosT, const float* sinT,   \
                     const int* pos, const int* slot, int heads, int kvHeads, int d,               \
                     int blockSize, float eps) {                                                   \
    qkv_rope_impl<T>(q, kcache, vcache, qkv, bias, qNorm, kNorm, cosT, sinT, pos, slot, heads,     \
                     kvHeads, d, blockSize, eps);                                                  \
  }
GB_INSTANTIATE(GB_QKV)
