// attention_mma.cu: the prefill path of attention.cu on tensor cores, for
// the 16-bit types and head_dim 64 or 128 (Llama, Qwen, Mistral); the
// SIMT kernels there serve float32 and every other head_dim. Arguments,
// rows and masking are those of attn_prefill_d128_T (see attention.cu);
// the q, k and v pointers must be 16-byte aligned and out 4-byte aligned.
//
// attn_prefill_mma_d<D>_T(out, q, kc, vc, bt, qStart, seqPos, maxBlocks,
//     heads, kvHeads, bs, window, scaleLog2, gb, bq)
//   grid (ceil(maxQLen/bq), numSeqs, kvHeads * ceil(G/gb)), block 128
//   (four warps). A block owns 64 rows (bq queries × gb query heads of one
//   KV head, as in the SIMT kernel) and each warp 16 of them. Queries, key
//   tiles and value tiles of 64 rows are staged in shared memory as 16-bit
//   elements with cp.async (rows padded by 16 bytes so ldmatrix reads are
//   free of bank conflicts); the value tile loads while the scores are
//   computed and the next key tile while the values are applied. Each warp
//   computes S = Q·Kᵀ with mma.m16n8k16 (float32 accumulators), scales by
//   scaleLog2 in float32, masks, keeps the online softmax of its rows in
//   registers (row max and sum across the four lanes that share a row),
//   reuses the accumulators of S, rounded to T, as the A operand of P·V,
//   and writes O / l at the end. A warp skips the tiles that are masked for
//   all its rows. Dynamic shared memory 3 · 64 · (D + 8) · 2 bytes.

// MMA is the tensor-core instruction and the float pair packing of a
// 16-bit type: mma accumulates the 16×8 product of A (16×16, row-major
// fragment a) and B (16×8, column-major fragment b0, b1) into c; pack
// rounds lo and hi to the type and packs them, lo in the low half.
template <class T>
struct MMA;

#define GB_MMA(TAG, PTX)                                                                               \
  template <>                                                                                          \
  struct MMA<TAG> {                                                                                    \
    static __device__ __forceinline__ void mma(float* c, const unsigned* a, unsigned b0, unsigned b1) { \
      asm volatile("mma.sync.aligned.m16n8k16.row.col.f32." PTX "." PTX ".f32 {%0,%1,%2,%3}, "          \
                   "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"                                            \
                   : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])                                    \
                   : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));                    \
    }                                                                                                  \
    static __device__ __forceinline__ unsigned pack(float lo, float hi) {                              \
      unsigned r;                                                                                      \
      asm("cvt.rn." PTX "x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));                            \
      return r;                                                                                        \
    }                                                                                                  \
  };
GB_MMA(F16, "f16")
GB_MMA(BF16, "bf16")

// smem_addr is p's address in the shared window, as ldmatrix and cp.async
// take it.
__device__ __forceinline__ unsigned smem_addr(const void* p) {
  unsigned r;
  asm("{ .reg .u64 a; cvta.to.shared.u64 a, %1; cvt.u32.u64 %0, a; }" : "=r"(r) : "l"(p));
  return r;
}

// cp_async16 copies 16 bytes from global src to shared dst without
// staging them in registers; when valid is false it writes 16 zero bytes
// and reads nothing.
__device__ __forceinline__ void cp_async16(unsigned dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0)
               : "memory");
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }

// cp_async_wait_all waits for this thread's cp.async copies; the block
// still needs a __syncthreads to see everyone's.
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;" ::: "memory"); }

// ldsm_x4 loads four 8×8 matrices of 16-bit elements: lane l gives the
// address of row l%8 of matrix l/8, and r[i] receives row lane/4, columns
// 2(lane%4) and 2(lane%4)+1 of matrix i. ldsm_x4_t loads them transposed:
// r[i] receives rows 2(lane%4) and 2(lane%4)+1 of column lane/4.
__device__ __forceinline__ void ldsm_x4(unsigned addr, unsigned* r) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}

__device__ __forceinline__ void ldsm_x4_t(unsigned addr, unsigned* r) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}

template <class T, int D>
__device__ __forceinline__ void attn_prefill_mma_impl(typename T::S* __restrict__ out,
                                                      const typename T::S* __restrict__ q,
                                                      const typename T::S* __restrict__ kc,
                                                      const typename T::S* __restrict__ vc,
                                                      const int* __restrict__ bt, const int* __restrict__ qStart,
                                                      const int* __restrict__ seqPos, int maxBlocks, int heads,
                                                      int kvHeads, int bs, int window, float scaleLog2, int gb,
                                                      int bq) {
  typedef typename T::S S;
  constexpr int R = 64;       // rows (query, head) per block, 16 per warp
  constexpr int BK = 64;      // keys per tile
  constexpr int ST = D + 8;   // shared row stride in elements: an odd number of 16-byte chunks
  constexpr int CH = D / 8;   // 16-byte chunks per row
  constexpr int NT = BK / 8;  // 8-key column tiles of S
  constexpr int DT = D / 8;   // 8-column tiles of O
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int gid = lane >> 2, tig = lane & 3;
  const int s = blockIdx.y;
  const int G = heads / kvHeads;
  const int groups = (G + gb - 1) / gb;
  const int kh = blockIdx.z / groups;
  const int g0 = (blockIdx.z - kh * groups) * gb;
  const int q0 = qStart[s], qn = qStart[s + 1] - q0;
  const int i0 = (gridDim.x - 1 - blockIdx.x) * bq;  // longest tiles first
  if (i0 >= qn) return;                               // uniform
  const int nq = gb_min(bq, qn - i0);
  const int pos0 = seqPos[s] + i0;

  S* Qs = reinterpret_cast<S*>(gb_smem);  // [R][ST]
  S* Ks = Qs + R * ST;                    // [BK][ST]
  S* Vs = Ks + BK * ST;                   // [BK][ST]

  // Stage the queries; padding rows are zero.
  for (int idx = tid; idx < R * CH; idx += 128) {
    const int r = idx / CH, c = idx - r * CH, qi = r / gb, gg = r - qi * gb;
    const bool ok = r < bq * gb && qi < nq && g0 + gg < G;
    const S* src = ok ? q + ((i64)(q0 + i0 + qi) * heads + kh * G + g0 + gg) * D + c * 8 : q;
    cp_async16(smem_addr(Qs + r * ST + c * 8), src, ok);
  }

  const int kmin = window_lo(pos0, window);
  const int kend = pos0 + nq;  // one past the last query's position
  const int ntiles = (kend - kmin + BK - 1) / BK;
  const i64 blkStride = (i64)kvHeads * bs * D, headOff = (i64)kh * bs * D;
  const int* tab = bt + (i64)s * maxBlocks;
  // load_tile starts copying keys kt .. kt+BK-1 of cache into dst; keys
  // at or past kend are zero.
  auto load_tile = [&](S* dst, const S* cache, int kt) {
    for (int idx = tid; idx < BK * CH; idx += 128) {
      const int k = idx / CH, c = idx - k * CH, key = kt + k;
      const bool ok = key < kend;
      const S* src = ok ? cache + (i64)tab[key / bs] * blkStride + headOff + (i64)(key % bs) * D + c * 8 : cache;
      cp_async16(smem_addr(dst + k * ST + c * 8), src, ok);
    }
    cp_async_commit();
  };
  load_tile(Ks, kc, kmin);  // one group with the queries

  // This thread's rows gid and gid+8 of the warp's 16: validity, position,
  // window start; and the warp's span of positions, to skip dead tiles.
  bool rv[2];
  int rp[2], rlo[2];
  int wmax = -1, wlo = 0x7fffffff;
#pragma unroll
  for (int i = 0; i < 2; i++) {
    const int r = warp * 16 + gid + 8 * i, qi = r / gb, gg = r - qi * gb;
    rv[i] = r < bq * gb && qi < nq && g0 + gg < G;
    rp[i] = pos0 + qi;
    rlo[i] = window_lo(rp[i], window);
    if (rv[i]) {
      wmax = max(wmax, rp[i]);
      wlo = min(wlo, rlo[i]);
    }
  }
#pragma unroll
  for (int sh = 16; sh > 0; sh >>= 1) {
    wmax = max(wmax, __shfl_xor_sync(GB_FULL_MASK, wmax, sh));
    wlo = min(wlo, __shfl_xor_sync(GB_FULL_MASK, wlo, sh));
  }

  float o[DT][4], m[2] = {GB_NEG_INF, GB_NEG_INF}, l[2] = {0.f, 0.f};
#pragma unroll
  for (int j = 0; j < DT; j++) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.f;
  unsigned qf[D / 16][4];

  for (int t = 0; t < ntiles; t++) {
    const int kt = kmin + t * BK;
    cp_async_wait_all();
    __syncthreads();  // K tile t (and the queries) landed; every warp is done with V tile t-1
    if (t == 0) {
#pragma unroll
      for (int kk = 0; kk < D / 16; kk++)
        ldsm_x4(smem_addr(Qs + (warp * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * ST + kk * 16 + (lane >> 4) * 8),
                qf[kk]);
    }
    load_tile(Vs, vc, kt);
    const bool live = wmax >= kt && wlo < kt + BK;  // warp-uniform

    float sc[NT][4];
    if (live) {
#pragma unroll
      for (int n = 0; n < NT; n++) sc[n][0] = sc[n][1] = sc[n][2] = sc[n][3] = 0.f;
#pragma unroll
      for (int kk = 0; kk < D / 16; kk += 2) {
#pragma unroll
        for (int n = 0; n < NT; n++) {
          unsigned b[4];
          ldsm_x4(smem_addr(Ks + (n * 8 + (lane & 7)) * ST + kk * 16 + (lane >> 3) * 8), b);
          MMA<T>::mma(sc[n], qf[kk], b[0], b[1]);
          MMA<T>::mma(sc[n], qf[kk + 1], b[2], b[3]);
        }
      }
      // Online softmax of rows gid (accumulators 0, 1) and gid+8 (2, 3);
      // the four lanes of a row are tig = 0..3 of one quad.
#pragma unroll
      for (int i = 0; i < 2; i++) {
        float mx = GB_NEG_INF;
#pragma unroll
        for (int n = 0; n < NT; n++)
#pragma unroll
          for (int e = 0; e < 2; e++) {
            const int key = kt + n * 8 + tig * 2 + e;
            const bool ok = rv[i] && key >= rlo[i] && key <= rp[i];
            const float v = ok ? sc[n][2 * i + e] * scaleLog2 : GB_NEG_INF;
            sc[n][2 * i + e] = v;
            mx = fmaxf(mx, v);
          }
        mx = fmaxf(mx, __shfl_xor_sync(GB_FULL_MASK, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(GB_FULL_MASK, mx, 2));
        const float mn = fmaxf(m[i], mx);
        float alpha = 1.f, rs = 0.f;
        if (mn != GB_NEG_INF) {
          alpha = exp2f(m[i] - mn);
#pragma unroll
          for (int n = 0; n < NT; n++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
              const float p = exp2f(sc[n][2 * i + e] - mn);
              sc[n][2 * i + e] = p;
              rs += p;
            }
        } else {
#pragma unroll
          for (int n = 0; n < NT; n++) sc[n][2 * i] = sc[n][2 * i + 1] = 0.f;
        }
        rs += __shfl_xor_sync(GB_FULL_MASK, rs, 1);
        rs += __shfl_xor_sync(GB_FULL_MASK, rs, 2);
        l[i] = l[i] * alpha + rs;
        m[i] = mn;
#pragma unroll
        for (int j = 0; j < DT; j++) {
          o[j][2 * i] *= alpha;
          o[j][2 * i + 1] *= alpha;
        }
      }
    }
    cp_async_wait_all();
    __syncthreads();  // V tile t landed; every warp is done with K tile t
    if (t + 1 < ntiles) load_tile(Ks, kc, kt + BK);
    if (live) {
      // The accumulators of S tiles 2kk and 2kk+1 are the A fragment of
      // keys 16kk .. 16kk+15.
#pragma unroll
      for (int kk = 0; kk < BK / 16; kk++) {
        unsigned a[4] = {MMA<T>::pack(sc[2 * kk][0], sc[2 * kk][1]), MMA<T>::pack(sc[2 * kk][2], sc[2 * kk][3]),
                         MMA<T>::pack(sc[2 * kk + 1][0], sc[2 * kk + 1][1]),
                         MMA<T>::pack(sc[2 * kk + 1][2], sc[2 * kk + 1][3])};
#pragma unroll
        for (int j = 0; j < DT; j += 2) {
          unsigned b[4];
          ldsm_x4_t(smem_addr(Vs + (kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * ST + j * 8 + (lane >> 4) * 8), b);
          MMA<T>::mma(o[j], a, b[0], b[1]);
          MMA<T>::mma(o[j + 1], a, b[2], b[3]);
        }
      }
    }
  }

#pragma unroll
  for (int i = 0; i < 2; i++) {
    if (!rv[i]) continue;
    const int r = warp * 16 + gid + 8 * i, qi = r / gb, gg = r - qi * gb;
    S* dst = out + ((i64)(q0 + i0 + qi) * heads + kh * G + g0 + gg) * D;
    const float inv = l[i] > 0.f ? 1.f / l[i] : 0.f;
#pragma unroll
    for (int j = 0; j < DT; j++)
      *reinterpret_cast<unsigned*>(dst + j * 8 + tig * 2) = MMA<T>::pack(o[j][2 * i] * inv, o[j][2 * i + 1] * inv);
  }
}

#define GB_PREFILL_MMA(sfx, T)                                                                         \
  extern "C" __global__ void __launch_bounds__(128) attn_prefill_mma_d64_##sfx(                        \
      T::S* out, const T::S* q, const T::S* kc, const T::S* vc, const int* bt, const int* qStart,      \
      const int* seqPos, int maxBlocks, int heads, int kvHeads, int bs, int window, float scaleLog2,   \
      int gb, int bq) {                                                                                \
    attn_prefill_mma_impl<T, 64>(out, q, kc, vc, bt, qStart, seqPos, maxBlocks, heads, kvHeads, bs,    \
                                 window, scaleLog2, gb, bq);                                           \
  }                                                                                                    \
  extern "C" __global__ void __launch_bounds__(128) attn_prefill_mma_d128_##sfx(                       \
      T::S* out, const T::S* q, const T::S* kc, const T::S* vc, const int* bt, const int* qStart,      \
      const int* seqPos, int maxBlocks, int heads, int kvHeads, int bs, int window, float scaleLog2,   \
      int gb, int bq) {                                                                                \
    attn_prefill_mma_impl<T, 128>(out, q, kc, vc, bt, qStart, seqPos, maxBlocks, heads, kvHeads, bs,   \
                                  window, scaleLog2, gb, bq);                                          \
  }
GB_INSTANTIATE_HALF(GB_PREFILL_MMA)
