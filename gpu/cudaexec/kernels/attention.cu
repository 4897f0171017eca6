// attention.cu: causal attention over the paged KV cache, with grouped-query
// heads (query head h reads KV head h / (heads/kvHeads)) and an optional
// sliding window. Scores are scale * q.k; the kernels fold log2(e) into the
// scale (scaleLog2 = scale * log2(e)) and use exp2, so every log-sum-exp
// below is in base 2.
//
// Shared layout of the arguments:
//   q     T [numTokens, heads, d]          out   T [numTokens, heads, d]
//   kc,vc T [blocks, kvHeads, bs, d]       (one layer of the paged cache)
//   bt    int32 [numSeqs, maxBlocks]       key position t of sequence s is
//         in block bt[s*maxBlocks + t/bs], slot t%bs
//   qStart int32 [numSeqs+1]: sequence s owns query rows qStart[s] ..
//         qStart[s+1]-1; seqPos int32 [numSeqs]: tokens cached before this
//         chunk, so row qStart[s]+i sits at position p = seqPos[s]+i and
//         attends to keys [lo, p], lo = p+1-window when window > 0 and
//         p+1 > window, else 0. The chunk's own keys are already cached.
//
// Decode path (every sequence has one query): split-K. Split z of S covers
// the z-th contiguous ceil(n/S) of the n keys of a sequence; each block
// writes the normalised partial output part float [numSeqs, heads, S, d]
// and its base-2 log-sum-exp lse float [numSeqs, heads, S] (zeros and -inf
// for an empty split), and attn_merge combines the splits. Each block
// serves all the query heads of one KV head (or a group of them), so each
// K/V row is read from memory once per block, not once per query head.
//
// attn_decode_w<W>g<GB>_T(part, lse, q, kc, vc, bt, qStart, seqPos,
//     maxBlocks, heads, kvHeads, d, bs, window, scaleLog2, S)
//   The main decode kernel, for d <= 32*W with d % W == 0 (W = 2, 4, 8:
//   d up to 64, 128, 256). grid (numSeqs, kvHeads * ceil(G/GB), S),
//   G = heads/kvHeads, block (32, nw warps). A warp reads whole rows: lane
//   l loads columns l*W .. l*W+W-1 of K and V (W*sizeof(T) bytes, the warp
//   one contiguous row per load), widens them once and applies them to all
//   GB query heads held in registers; the GB partial dot products are
//   summed across the warp by a reduce-scatter of shuffles. Warp w takes 4
//   consecutive keys per step (2 when GB = 8), all loads issued before use,
//   and keeps its own online softmax; the nw warps are merged in shared
//   memory (nw*GB*(d+2) floats) at the end. Heads beyond G in the last
//   group compute on zeros and are not written.
// attn_decode_T / attn_decode_narrow_T(part, lse, q, kc, vc, bt, qStart,
//     seqPos, maxBlocks, heads, kvHeads, d, bs, window, scaleLog2, S, nv)
//   The general decode kernel, for any even d and pointers aligned only to
//   two elements. grid (numSeqs, kvHeads * ceil(G/gb), S), block (bdx, gb,
//   bdz). A row is read as W-element vectors (16 bytes, or 4 or 8 bytes for
//   the narrow variant); lane tx of the bdx lanes (a power of two <= 32)
//   handles vectors tx, tx+bdx, ... (nv of them) and the dot product is
//   reduced with shuffles across those lanes; ty picks the head, and the
//   bdz key groups each take 4 consecutive keys per step, merged in shared
//   memory (bdz*gb*(d+2) floats) at the end.
// attn_merge_T(out, part, lse, qStart, heads, d, splits)
//   grid (numSeqs, heads), block 32..256 threads over d: out = sum over
//   splits of 2^(lse_z - max) * part_z / sum of 2^(lse_z - max).
//
// Prefill path (any mix of query counts).
// attn_prefill_d128_T (d <= 128, 64-key tiles) / attn_prefill_d256_T
//     (d <= 256, 32-key tiles)(out, q, kc, vc, bt, qStart, seqPos,
//     maxBlocks, heads, kvHeads, d, bs, window, scaleLog2, gb, bq)
//   grid (ceil(maxQLen/bq), numSeqs, kvHeads * ceil(G/gb)), block (16, 16).
//   A block owns 64 rows: bq consecutive queries of one sequence times gb
//   query heads of one KV head (row r = query*gb + head, bq*gb <= 64; the
//   x index counts tiles from the end so the longest run first). Its
//   queries, pre-scaled, stay in shared memory; it walks the keys the tile
//   needs in tiles of BK, staging each K tile and then V tile in shared
//   memory (fp32) where every row reuses them. Thread (tx, ty) computes the
//   scores of rows 4ty..4ty+3 against keys tx, tx+16, ... (a 4 x BK/16
//   register tile), the online softmax of those rows (shuffles across the
//   16 lanes of a row), and accumulates output columns 4(tx+16j)..+3 of the
//   same rows. SIMT fp32; dynamic shared memory
//   4*(64*ks + BK*ks + 64*(BK+4)) + 8*BK bytes, ks = the padded row stride.

// ldraw copies WORDS 32-bit words from p (aligned to 4*WORDS bytes, at most
// 16).
template <int WORDS>
__device__ __forceinline__ void ldraw(const void* p, unsigned* w) {
  if constexpr (WORDS == 8) {
    const uint4 a = reinterpret_cast<const uint4*>(p)[0], b = reinterpret_cast<const uint4*>(p)[1];
    w[0] = a.x; w[1] = a.y; w[2] = a.z; w[3] = a.w;
    w[4] = b.x; w[5] = b.y; w[6] = b.z; w[7] = b.w;
  } else if constexpr (WORDS == 4) {
    const uint4 a = *reinterpret_cast<const uint4*>(p);
    w[0] = a.x; w[1] = a.y; w[2] = a.z; w[3] = a.w;
  } else if constexpr (WORDS == 2) {
    const uint2 a = *reinterpret_cast<const uint2*>(p);
    w[0] = a.x; w[1] = a.y;
  } else {
    w[0] = *reinterpret_cast<const unsigned*>(p);
  }
}

// widen converts the raw words of W elements of T to floats.
template <class T, int W>
__device__ __forceinline__ void widen(const unsigned* w, float* v) {
  if constexpr (sizeof(typename T::S) == 4) {
#pragma unroll
    for (int e = 0; e < W; e++) v[e] = __uint_as_float(w[e]);
  } else {
#pragma unroll
    for (int e = 0; e < W / 2; e++) T::tof2(w[e], v[2 * e], v[2 * e + 1]);
  }
}

// window_lo is the first key position a query at position p attends to.
__device__ __forceinline__ int window_lo(int p, int window) {
  return (window > 0 && p + 1 > window) ? p + 1 - window : 0;
}

template <class T, int W>
__device__ __forceinline__ void attn_decode_impl(float* __restrict__ part, float* __restrict__ lse,
                                                 const typename T::S* __restrict__ q,
                                                 const typename T::S* __restrict__ kc,
                                                 const typename T::S* __restrict__ vc,
                                                 const int* __restrict__ bt, const int* __restrict__ qStart,
                                                 const int* __restrict__ seqPos, int maxBlocks, int heads,
                                                 int kvHeads, int d, int bs, int window, float scaleLog2,
                                                 int splits, int nv) {
  typedef typename T::S S;
  constexpr int NVMAX = 8 / W;                // vectors per lane: d <= 256 = 32 lanes * 8 elements
  constexpr int E = W * NVMAX;                // elements per lane
  constexpr int WORDS = W * (int)sizeof(S) / 4;
  constexpr int U = 4;                        // keys per key group per step
  const int tx = threadIdx.x, ty = threadIdx.y, tz = threadIdx.z;
  const int bdx = blockDim.x, gb = blockDim.y, bdz = blockDim.z;
  const int s = blockIdx.x, z = blockIdx.z;
  const int G = heads / kvHeads;
  const int groups = (G + gb - 1) / gb;
  const int kh = blockIdx.y / groups;
  const int g = (blockIdx.y - kh * groups) * gb + ty;
  const bool gvalid = g < G;
  const int h = kh * G + (gvalid ? g : G - 1);
  const int q0 = qStart[s];
  if (qStart[s + 1] - q0 <= 0) return;  // uniform: no query, nothing to write
  const int p = seqPos[s];
  const int lo = window_lo(p, window);
  const int chunk = (p + 1 - lo + splits - 1) / splits;
  const int kb = lo + z * chunk;
  const int ke = gb_min(p + 1, kb + chunk);
  const int tid = tx + bdx * (ty + gb * tz);
  // The bdx lanes of one (head, key group) are consecutive and aligned in
  // their warp; shuffles stay inside them.
  const unsigned gmask = bdx >= 32 ? GB_FULL_MASK : (((1u << bdx) - 1u) << ((tid & 31) & ~(bdx - 1)));

  float qv[E], o[E];
#pragma unroll
  for (int e = 0; e < E; e++) qv[e] = o[e] = 0.f;
  const S* qp = q + ((i64)q0 * heads + h) * d;
#pragma unroll
  for (int v = 0; v < NVMAX; v++) {
    const int col = (tx + bdx * v) * W;
    if (v < nv && col < d) {
      ldv<T, W>(qp + col, qv + v * W);
#pragma unroll
      for (int e = 0; e < W; e++) qv[v * W + e] *= scaleLog2;
    }
  }

  float m = GB_NEG_INF, l = 0.f;
  const i64 blkStride = (i64)kvHeads * bs * d;
  const i64 headOff = (i64)kh * bs * d;
  const int* tab = bt + (i64)s * maxBlocks;
  const int step = bdz * U;
  const int iters = ke > kb ? (ke - kb + step - 1) / step : 0;
  for (int it = 0; it < iters; it++) {
    const int k0 = kb + it * step + tz * U;
    int blk = k0 / bs, off = k0 - blk * bs;
    unsigned kr[U][NVMAX][WORDS], vr[U][NVMAX][WORDS];
#pragma unroll
    for (int u = 0; u < U; u++) {
      const bool valid = k0 + u < ke;
      const i64 row = valid ? (i64)tab[blk] * blkStride + headOff + (i64)off * d : 0;
#pragma unroll
      for (int v = 0; v < NVMAX; v++) {
        const int col = (tx + bdx * v) * W;
        if (valid && v < nv && col < d) {
          ldraw<WORDS>(kc + row + col, kr[u][v]);
          ldraw<WORDS>(vc + row + col, vr[u][v]);
        } else {
#pragma unroll
          for (int w = 0; w < WORDS; w++) kr[u][v][w] = vr[u][v][w] = 0u;
        }
      }
      if (++off == bs) {
        off = 0;
        blk++;
      }
    }
    float sc[U];
#pragma unroll
    for (int u = 0; u < U; u++) {
      float acc = 0.f;
#pragma unroll
      for (int v = 0; v < NVMAX; v++) {
        if (v < nv) {
          float kf[W];
          widen<T, W>(kr[u][v], kf);
#pragma unroll
          for (int e = 0; e < W; e++) acc = fmaf(qv[v * W + e], kf[e], acc);
        }
      }
      for (int sh = bdx >> 1; sh > 0; sh >>= 1) acc += __shfl_xor_sync(gmask, acc, sh);
      sc[u] = k0 + u < ke ? acc : GB_NEG_INF;
    }
    float mt = sc[0];
#pragma unroll
    for (int u = 1; u < U; u++) mt = fmaxf(mt, sc[u]);
    const float mn = fmaxf(m, mt);
    if (mn != GB_NEG_INF) {
      const float alpha = exp2f(m - mn);  // 0 while m is still -inf
      float pu[U], ps = 0.f;
#pragma unroll
      for (int u = 0; u < U; u++) {
        pu[u] = exp2f(sc[u] - mn);
        ps += pu[u];
      }
      l = l * alpha + ps;
#pragma unroll
      for (int e = 0; e < E; e++) o[e] *= alpha;
#pragma unroll
      for (int u = 0; u < U; u++) {
#pragma unroll
        for (int v = 0; v < NVMAX; v++) {
          if (v < nv) {
            float vf[W];
            widen<T, W>(vr[u][v], vf);
#pragma unroll
            for (int e = 0; e < W; e++) o[v * W + e] = fmaf(pu[u], vf[e], o[v * W + e]);
          }
        }
      }
      m = mn;
    }
  }

  if (bdz > 1) {
    float* so = gb_smem;            // [bdz*gb][d] partial outputs
    float* sm = so + bdz * gb * d;  // [bdz*gb] maxima
    float* sl = sm + bdz * gb;      // [bdz*gb] sums
    const int row = tz * gb + ty;
#pragma unroll
    for (int v = 0; v < NVMAX; v++) {
      const int col = (tx + bdx * v) * W;
      if (v < nv && col < d) {
#pragma unroll
        for (int e = 0; e < W; e++) so[row * d + col + e] = o[v * W + e];
      }
    }
    if (tx == 0) {
      sm[row] = m;
      sl[row] = l;
    }
    __syncthreads();
    if (tz == 0) {
      float mx = GB_NEG_INF;
      for (int zz = 0; zz < bdz; zz++) mx = fmaxf(mx, sm[zz * gb + ty]);
      float sum = 0.f;
#pragma unroll
      for (int e = 0; e < E; e++) o[e] = 0.f;
      if (mx != GB_NEG_INF) {
        for (int zz = 0; zz < bdz; zz++) {
          const int r = zz * gb + ty;
          const float w = exp2f(sm[r] - mx);
          sum += w * sl[r];
#pragma unroll
          for (int v = 0; v < NVMAX; v++) {
            const int col = (tx + bdx * v) * W;
            if (v < nv && col < d) {
#pragma unroll
              for (int e = 0; e < W; e++) o[v * W + e] = fmaf(w, so[r * d + col + e], o[v * W + e]);
            }
          }
        }
      }
      m = mx;
      l = sum;
    }
  }
  if (tz == 0 && gvalid) {
    const i64 base = ((i64)s * heads + h) * splits + z;
    float* dst = part + base * d;
    const float inv = l > 0.f ? 1.f / l : 0.f;
#pragma unroll
    for (int v = 0; v < NVMAX; v++) {
      const int col = (tx + bdx * v) * W;
      if (v < nv && col < d) {
#pragma unroll
        for (int e = 0; e < W; e++) dst[col + e] = o[v * W + e] * inv;
      }
    }
    if (tx == 0) lse[base] = l > 0.f ? m + log2f(l) : GB_NEG_INF;
  }
}

#define GB_DECODE(sfx, T)                                                                              \
  extern "C" __global__ void __launch_bounds__(256)                                                    \
      attn_decode_##sfx(float* part, float* lse, const T::S* q, const T::S* kc, const T::S* vc,        \
                        const int* bt, const int* qStart, const int* seqPos, int maxBlocks, int heads, \
                        int kvHeads, int d, int bs, int window, float scaleLog2, int splits, int nv) { \
    attn_decode_impl<T, 16 / sizeof(T::S)>(part, lse, q, kc, vc, bt, qStart, seqPos, maxBlocks, heads,  \
                                           kvHeads, d, bs, window, scaleLog2, splits, nv);             \
  }                                                                                                    \
  extern "C" __global__ void __launch_bounds__(256) attn_decode_narrow_##sfx(                          \
      float* part, float* lse, const T::S* q, const T::S* kc, const T::S* vc, const int* bt,           \
      const int* qStart, const int* seqPos, int maxBlocks, int heads, int kvHeads, int d, int bs,      \
      int window, float scaleLog2, int splits, int nv) {                                               \
    attn_decode_impl<T, 2>(part, lse, q, kc, vc, bt, qStart, seqPos, maxBlocks, heads, kvHeads, d, bs, \
                           window, scaleLog2, splits, nv);                                             \
  }
GB_INSTANTIATE(GB_DECODE)

// warp_sum_heads replaces v[g], g < GB, with its sum over the 32 lanes of
// the warp, on every lane. A reduce-scatter (each xor step halves the
// values a lane keeps: after log2(GB) steps lane L holds head
// L >> (5 - log2 GB)), the remaining xor steps, then a broadcast from each
// head's owner: GB - 1 + 5 - log2(GB) + GB shuffles instead of 5 GB.
template <int GB>
__device__ __forceinline__ void warp_sum_heads(float* v) {
  constexpr int LG = GB == 1 ? 0 : GB == 2 ? 1 : GB == 4 ? 2 : 3;
  static_assert(GB == 1 << LG, "GB must be 1, 2, 4 or 8");
  const int lane = threadIdx.x & 31;
  float r[GB];
#pragma unroll
  for (int g = 0; g < GB; g++) r[g] = v[g];
#pragma unroll
  for (int i = 0; i < LG; i++) {
    const int mask = 16 >> i;
    const bool upper = (lane & mask) != 0;
    const int half = GB >> (i + 1);
#pragma unroll
    for (int j = 0; j < half; j++) {
      const float send = upper ? r[j] : r[j + half];
      const float keep = upper ? r[j + half] : r[j];
      r[j] = keep + __shfl_xor_sync(GB_FULL_MASK, send, mask);
    }
  }
#pragma unroll
  for (int mask = 16 >> LG; mask > 0; mask >>= 1) r[0] += __shfl_xor_sync(GB_FULL_MASK, r[0], mask);
  if constexpr (GB == 1) {
    v[0] = r[0];
  } else {
#pragma unroll
    for (int g = 0; g < GB; g++) v[g] = __shfl_sync(GB_FULL_MASK, r[0], g << (5 - LG));
  }
}

// attn_decode_rows_impl is the decode kernel for head dimensions with
// d <= 32*W and d % W == 0: a warp reads whole K and V rows (lane l holds
// columns l*W .. l*W+W-1), so every element is loaded and widened once per
// block and used by all GB query heads, kept in registers.
template <class T, int W, int GB>
__device__ __forceinline__ void attn_decode_rows_impl(float* __restrict__ part, float* __restrict__ lse,
                                                      const typename T::S* __restrict__ q,
                                                      const typename T::S* __restrict__ kc,
                                                      const typename T::S* __restrict__ vc,
                                                      const int* __restrict__ bt, const int* __restrict__ qStart,
                                                      const int* __restrict__ seqPos, int maxBlocks, int heads,
                                                      int kvHeads, int d, int bs, int window, float scaleLog2,
                                                      int splits) {
  typedef typename T::S S;
  constexpr int WORDS = W * (int)sizeof(S) / 4;
  constexpr int U = GB >= 8 ? 2 : 4;  // keys per warp per step
  const int lane = threadIdx.x, warp = threadIdx.y, nw = blockDim.y;
  const int s = blockIdx.x, z = blockIdx.z;
  const int G = heads / kvHeads;
  const int groups = (G + GB - 1) / GB;
  const int kh = blockIdx.y / groups;
  const int g0 = (blockIdx.y - kh * groups) * GB;
  const int q0 = qStart[s];
  if (qStart[s + 1] - q0 <= 0) return;  // uniform: no query, nothing to write
  const int p = seqPos[s];
  const int lo = window_lo(p, window);
  const int chunk = (p + 1 - lo + splits - 1) / splits;
  const int kb = lo + z * chunk;
  const int ke = gb_min(p + 1, kb + chunk);
  const int col = lane * W;
  const bool active = col < d;

  float qv[GB][W], o[GB][W], m[GB], l[GB];
#pragma unroll
  for (int g = 0; g < GB; g++) {
    m[g] = GB_NEG_INF;
    l[g] = 0.f;
#pragma unroll
    for (int e = 0; e < W; e++) qv[g][e] = o[g][e] = 0.f;
    if (active && g0 + g < G) {
      ldv<T, W>(q + ((i64)q0 * heads + kh * G + g0 + g) * d + col, qv[g]);
#pragma unroll
      for (int e = 0; e < W; e++) qv[g][e] *= scaleLog2;
    }
  }

  const i64 blkStride = (i64)kvHeads * bs * d;
  const i64 headOff = (i64)kh * bs * d;
  const int* tab = bt + (i64)s * maxBlocks;
  const int step = nw * U;
  const int iters = ke > kb ? (ke - kb + step - 1) / step : 0;
  for (int it = 0; it < iters; it++) {
    const int k0 = kb + it * step + warp * U;
    int blk = k0 / bs, off = k0 - blk * bs;
    unsigned kr[U][WORDS], vr[U][WORDS];
#pragma unroll
    for (int u = 0; u < U; u++) {
      const bool valid = k0 + u < ke;
      if (valid && active) {
        const i64 row = (i64)tab[blk] * blkStride + headOff + (i64)off * d;
        ldraw<WORDS>(kc + row + col, kr[u]);
        ldraw<WORDS>(vc + row + col, vr[u]);
      } else {
#pragma unroll
        for (int w = 0; w < WORDS; w++) kr[u][w] = vr[u][w] = 0u;
      }
      if (++off == bs) {
        off = 0;
        blk++;
      }
    }
    float sc[U][GB];
#pragma unroll
    for (int u = 0; u < U; u++) {
      float kf[W];
      widen<T, W>(kr[u], kf);
#pragma unroll
      for (int g = 0; g < GB; g++) {
        float acc = 0.f;
#pragma unroll
        for (int e = 0; e < W; e++) acc = fmaf(qv[g][e], kf[e], acc);
        sc[u][g] = acc;
      }
      warp_sum_heads<GB>(sc[u]);
      if (k0 + u >= ke) {
#pragma unroll
        for (int g = 0; g < GB; g++) sc[u][g] = GB_NEG_INF;
      }
    }
    // Online softmax per head; sc becomes the probabilities.
#pragma unroll
    for (int g = 0; g < GB; g++) {
      float mt = sc[0][g];
#pragma unroll
      for (int u = 1; u < U; u++) mt = fmaxf(mt, sc[u][g]);
      const float mn = fmaxf(m[g], mt);
      if (mn != GB_NEG_INF) {
        const float alpha = exp2f(m[g] - mn);
        float ps = 0.f;
#pragma unroll
        for (int u = 0; u < U; u++) {
          sc[u][g] = exp2f(sc[u][g] - mn);
          ps += sc[u][g];
        }
        l[g] = l[g] * alpha + ps;
#pragma unroll
        for (int e = 0; e < W; e++) o[g][e] *= alpha;
        m[g] = mn;
      } else {
#pragma unroll
        for (int u = 0; u < U; u++) sc[u][g] = 0.f;
      }
    }
#pragma unroll
    for (int u = 0; u < U; u++) {
      float vf[W];
      widen<T, W>(vr[u], vf);
#pragma unroll
      for (int g = 0; g < GB; g++)
#pragma unroll
        for (int e = 0; e < W; e++) o[g][e] = fmaf(sc[u][g], vf[e], o[g][e]);
    }
  }

  if (nw > 1) {
    float* so = gb_smem;             // [nw][GB][d] partial outputs
    float* sm = so + nw * GB * d;    // [nw][GB] maxima
    float* sl = sm + nw * GB;        // [nw][GB] sums
#pragma unroll
    for (int g = 0; g < GB; g++) {
      if (active) {
#pragma unroll
        for (int e = 0; e < W; e++) so[(warp * GB + g) * d + col + e] = o[g][e];
      }
      if (lane == 0) {
        sm[warp * GB + g] = m[g];
        sl[warp * GB + g] = l[g];
      }
    }
    __syncthreads();
    if (warp != 0) return;
#pragma unroll
    for (int g = 0; g < GB; g++) {
      float mx = GB_NEG_INF;
      for (int w = 0; w < nw; w++) mx = fmaxf(mx, sm[w * GB + g]);
      float sum = 0.f;
#pragma unroll
      for (int e = 0; e < W; e++) o[g][e] = 0.f;
      if (mx != GB_NEG_INF) {
        for (int w = 0; w < nw; w++) {
          const float wt = exp2f(sm[w * GB + g] - mx);
          sum += wt * sl[w * GB + g];
          if (active) {
#pragma unroll
            for (int e = 0; e < W; e++) o[g][e] = fmaf(wt, so[(w * GB + g) * d + col + e], o[g][e]);
          }
        }
      }
      m[g] = mx;
      l[g] = sum;
    }
  }
#pragma unroll
  for (int g = 0; g < GB; g++) {
    if (g0 + g >= G) continue;
    const i64 base = ((i64)s * heads + kh * G + g0 + g) * splits + z;
    const float inv = l[g] > 0.f ? 1.f / l[g] : 0.f;
    if (active) {
#pragma unroll
      for (int e = 0; e < W; e++) part[base * d + col + e] = o[g][e] * inv;
    }
    if (lane == 0) lse[base] = l[g] > 0.f ? m[g] + log2f(l[g]) : GB_NEG_INF;
  }
}

#define GB_DECODE_ROWS_ONE(sfx, T, W, GB)                                                                 \
  extern "C" __global__ void __launch_bounds__(128) attn_decode_w##W##g##GB##_##sfx(                      \
      float* part, float* lse, const T::S* q, const T::S* kc, const T::S* vc, const int* bt,              \
      const int* qStart, const int* seqPos, int maxBlocks, int heads, int kvHeads, int d, int bs,         \
      int window, float scaleLog2, int splits) {                                                          \
    attn_decode_rows_impl<T, W, GB>(part, lse, q, kc, vc, bt, qStart, seqPos, maxBlocks, heads, kvHeads,  \
                                    d, bs, window, scaleLog2, splits);                                    \
  }
#define GB_DECODE_ROWS(sfx, T)                                                                            \
  GB_DECODE_ROWS_ONE(sfx, T, 2, 1) GB_DECODE_ROWS_ONE(sfx, T, 2, 4) GB_DECODE_ROWS_ONE(sfx, T, 2, 8)      \
  GB_DECODE_ROWS_ONE(sfx, T, 4, 1) GB_DECODE_ROWS_ONE(sfx, T, 4, 4) GB_DECODE_ROWS_ONE(sfx, T, 4, 8)      \
  GB_DECODE_ROWS_ONE(sfx, T, 8, 1) GB_DECODE_ROWS_ONE(sfx, T, 8, 4)
GB_INSTANTIATE(GB_DECODE_ROWS)

template <class T>
__device__ __forceinline__ void attn_merge_impl(typename T::S* __restrict__ out, const float* __restrict__ part,
                                                const float* __restrict__ lse, const int* __restrict__ qStart,
                                                int heads, int d, int splits) {
  const int s = blockIdx.x, h = blockIdx.y;
  const int q0 = qStart[s];
  if (qStart[s + 1] - q0 <= 0) return;
  const i64 base = ((i64)s * heads + h) * splits;
  const float* ls = lse + base;
  float mx = GB_NEG_INF;
  for (int z = 0; z < splits; z++) mx = fmaxf(mx, ls[z]);
  for (int c = threadIdx.x; c < d; c += blockDim.x) {
    float acc = 0.f, sum = 0.f;
    if (mx != GB_NEG_INF) {
      for (int z = 0; z < splits; z++) {
        const float lz = ls[z];
        if (lz != GB_NEG_INF) {
          const float w = exp2f(lz - mx);
          acc = fmaf(w, part[(base + z) * d + c], acc);
          sum += w;
        }
      }
    }
    out[((i64)q0 * heads + h) * d + c] = T::fromf(sum > 0.f ? acc / sum : 0.f);
  }
}

#define GB_MERGE(sfx, T)                                                                              \
  extern "C" __global__ void __launch_bounds__(256)                                                   \
      attn_merge_##sfx(T::S* out, const float* part, const float* lse, const int* qStart, int heads,  \
                       int d, int splits) {                                                           \
    attn_merge_impl<T>(out, part, lse, qStart, heads, d, splits);                                     \
  }
GB_INSTANTIATE(GB_MERGE)

// prefill_stride is the shared-memory row stride (floats) for rows of d
// elements read as float4 by 16 lanes at rows r, r+1, ...: a multiple of 4
// at least d, and an odd number of float4s so that eight consecutive rows
// start in eight different 16-byte bank groups.
__device__ __forceinline__ int prefill_stride(int d) {
  int ks = (d + 3) & ~3;
  if (((ks >> 2) & 1) == 0) ks += 4;
  return ks;
}

// load_rows stages rows of BK keys (K or V, per rowOff) into dst with row
// stride ks, widened to float; columns d .. ks-1 and rows whose rowOff is
// negative are zero. Pairs of elements are moved at a time (d is even).
template <class T, int BK>
__device__ __forceinline__ void load_rows(float* __restrict__ dst, const typename T::S* __restrict__ src,
                                          const i64* __restrict__ rowOff, int d, int ks, int tid) {
  const int pairs = ks >> 1;
  const int dk = 256 / pairs, dc = 256 - dk * pairs;
  int k = tid / pairs, c2 = tid - k * pairs;
  while (k < BK) {
    const i64 ro = rowOff[k];
    float v[2] = {0.f, 0.f};
    if (ro >= 0 && 2 * c2 < d) ldv<T, 2>(src + ro + 2 * c2, v);
    *reinterpret_cast<float2*>(dst + k * ks + 2 * c2) = make_float2(v[0], v[1]);
    k += dk;
    c2 += dc;
    if (c2 >= pairs) {
      c2 -= pairs;
      k++;
    }
  }
}

template <class T, int BK, int NJ4>
__device__ __forceinline__ void attn_prefill_impl(typename T::S* __restrict__ out,
                                                  const typename T::S* __restrict__ q,
                                                  const typename T::S* __restrict__ kc,
                                                  const typename T::S* __restrict__ vc,
                                                  const int* __restrict__ bt, const int* __restrict__ qStart,
                                                  const int* __restrict__ seqPos, int maxBlocks, int heads,
                                                  int kvHeads, int d, int bs, int window, float scaleLog2,
                                                  int gb, int bq) {
  constexpr int R = 64;        // rows (query, head) per block
  constexpr int KPT = BK / 16; // keys per thread in the score tile
  constexpr int PS = BK + 4;   // row stride of the probabilities
  const int tx = threadIdx.x, ty = threadIdx.y, tid = ty * 16 + tx;
  const int s = blockIdx.y;
  const int G = heads / kvHeads;
  const int groups = (G + gb - 1) / gb;
  const int kh = blockIdx.z / groups;
  const int g0 = (blockIdx.z - kh * groups) * gb;
  const int q0 = qStart[s], qn = qStart[s + 1] - q0;
  const int i0 = (gridDim.x - 1 - blockIdx.x) * bq;  // first query of the tile, longest tiles first
  if (i0 >= qn) return;                               // uniform
  const int nq = gb_min(bq, qn - i0);
  const int pos0 = seqPos[s] + i0;
  const int ks = prefill_stride(d);

  float* Qs = gb_smem;                                     // [R][ks]
  float* KV = Qs + R * ks;                                 // [BK][ks], K then V
  float* Ps = KV + BK * ks;                                // [R][PS]
  i64* rowOff = reinterpret_cast<i64*>(Ps + R * PS);       // [BK]

  // Stage the queries, pre-scaled; padding rows and columns are zero.
  {
    const int pairs = ks >> 1;
    for (int idx = tid; idx < R * pairs; idx += 256) {
      const int r = idx / pairs, c2 = idx - r * pairs;
      const int qi = r / gb, gg = r - qi * gb;
      float v[2] = {0.f, 0.f};
      if (qi < nq && r < bq * gb && g0 + gg < G && 2 * c2 < d) {
        ldv<T, 2>(q + ((i64)(q0 + i0 + qi) * heads + kh * G + g0 + gg) * d + 2 * c2, v);
        v[0] *= scaleLog2;
        v[1] *= scaleLog2;
      }
      *reinterpret_cast<float2*>(Qs + r * ks + 2 * c2) = make_float2(v[0], v[1]);
    }
  }
  // This thread's rows 4ty..4ty+3: validity, position, window start.
  bool rv[4];
  int rp[4], rlo[4];
#pragma unroll
  for (int i = 0; i < 4; i++) {
    const int r = ty * 4 + i, qi = r / gb, gg = r - qi * gb;
    rv[i] = r < bq * gb && qi < nq && g0 + gg < G;
    rp[i] = pos0 + qi;
    rlo[i] = window_lo(rp[i], window);
  }
  const int kmin = window_lo(pos0, window);
  const int kend = pos0 + nq;  // one past the last query's position
  const int ntiles = (kend - kmin + BK - 1) / BK;

  float m[4], l[4], o[4][NJ4 * 4];
#pragma unroll
  for (int i = 0; i < 4; i++) {
    m[i] = GB_NEG_INF;
    l[i] = 0.f;
#pragma unroll
    for (int j = 0; j < NJ4 * 4; j++) o[i][j] = 0.f;
  }
  const i64 blkStride = (i64)kvHeads * bs * d, headOff = (i64)kh * bs * d;
  const int* tab = bt + (i64)s * maxBlocks;

  for (int t = 0; t < ntiles; t++) {
    const int kt = kmin + t * BK;
    if (tid < BK) {
      const int key = kt + tid;
      rowOff[tid] = key < kend ? (i64)tab[key / bs] * blkStride + headOff + (i64)(key % bs) * d : -1;
    }
    __syncthreads();  // rowOff written; Qs staged (first tile)
    load_rows<T, BK>(KV, kc, rowOff, d, ks, tid);
    __syncthreads();

    float acc[4][KPT];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
      for (int j = 0; j < KPT; j++) acc[i][j] = 0.f;
#pragma unroll 1  // one step is 8 float4 loads and 16*KPT FMAs; unrolling spills
    for (int c = 0; c < ks; c += 4) {
      float4 qa[4], kb[KPT];
#pragma unroll
      for (int i = 0; i < 4; i++) qa[i] = *reinterpret_cast<const float4*>(Qs + (ty * 4 + i) * ks + c);
#pragma unroll
      for (int j = 0; j < KPT; j++) kb[j] = *reinterpret_cast<const float4*>(KV + (tx + 16 * j) * ks + c);
#pragma unroll
      for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < KPT; j++) {
          acc[i][j] = fmaf(qa[i].x, kb[j].x, acc[i][j]);
          acc[i][j] = fmaf(qa[i].y, kb[j].y, acc[i][j]);
          acc[i][j] = fmaf(qa[i].z, kb[j].z, acc[i][j]);
          acc[i][j] = fmaf(qa[i].w, kb[j].w, acc[i][j]);
        }
    }

    // Online softmax of this thread's rows; the 16 lanes tx of a row are
    // one aligned half-warp, so xor shuffles by 1..8 stay inside it.
#pragma unroll
    for (int i = 0; i < 4; i++) {
      float mx = GB_NEG_INF;
#pragma unroll
      for (int j = 0; j < KPT; j++) {
        const int key = kt + tx + 16 * j;
        const bool ok = rv[i] && key >= rlo[i] && key <= rp[i];
        acc[i][j] = ok ? acc[i][j] : GB_NEG_INF;
        mx = fmaxf(mx, acc[i][j]);
      }
#pragma unroll
      for (int sh = 8; sh > 0; sh >>= 1) mx = fmaxf(mx, __shfl_xor_sync(GB_FULL_MASK, mx, sh));
      const float mn = fmaxf(m[i], mx);
      float alpha = 1.f, rs = 0.f;
      if (mn != GB_NEG_INF) {
        alpha = exp2f(m[i] - mn);
#pragma unroll
        for (int j = 0; j < KPT; j++) {
          acc[i][j] = exp2f(acc[i][j] - mn);
          rs += acc[i][j];
        }
      } else {
#pragma unroll
        for (int j = 0; j < KPT; j++) acc[i][j] = 0.f;
      }
#pragma unroll
      for (int sh = 8; sh > 0; sh >>= 1) rs += __shfl_xor_sync(GB_FULL_MASK, rs, sh);
      l[i] = l[i] * alpha + rs;
      m[i] = mn;
#pragma unroll
      for (int j = 0; j < NJ4 * 4; j++) o[i][j] *= alpha;
#pragma unroll
      for (int j = 0; j < KPT; j++) Ps[(ty * 4 + i) * PS + tx + 16 * j] = acc[i][j];
    }
    __syncthreads();  // Ps written; every K read done
    load_rows<T, BK>(KV, vc, rowOff, d, ks, tid);
    __syncthreads();

#pragma unroll 1  // a step is already 16*NJ4*4 FMAs; unrolling costs seconds of NVRTC time
    for (int k = 0; k < BK; k += 4) {
      float4 pf[4];
#pragma unroll
      for (int i = 0; i < 4; i++) pf[i] = *reinterpret_cast<const float4*>(Ps + (ty * 4 + i) * PS + k);
#pragma unroll
      for (int kk = 0; kk < 4; kk++) {
        const float* vrow = KV + (k + kk) * ks;
#pragma unroll
        for (int j4 = 0; j4 < NJ4; j4++) {
          const int c = 4 * (tx + 16 * j4);
          if (c < ks) {
            const float4 vv = *reinterpret_cast<const float4*>(vrow + c);
#pragma unroll
            for (int i = 0; i < 4; i++) {
              const float pk = kk == 0 ? pf[i].x : kk == 1 ? pf[i].y : kk == 2 ? pf[i].z : pf[i].w;
              o[i][4 * j4 + 0] = fmaf(pk, vv.x, o[i][4 * j4 + 0]);
              o[i][4 * j4 + 1] = fmaf(pk, vv.y, o[i][4 * j4 + 1]);
              o[i][4 * j4 + 2] = fmaf(pk, vv.z, o[i][4 * j4 + 2]);
              o[i][4 * j4 + 3] = fmaf(pk, vv.w, o[i][4 * j4 + 3]);
            }
          }
        }
      }
    }
    __syncthreads();  // KV, Ps and rowOff are rewritten by the next tile
  }

#pragma unroll
  for (int i = 0; i < 4; i++) {
    if (!rv[i]) continue;
    const int r = ty * 4 + i, qi = r / gb, gg = r - qi * gb;
    typename T::S* dst = out + ((i64)(q0 + i0 + qi) * heads + kh * G + g0 + gg) * d;
    const float inv = l[i] > 0.f ? 1.f / l[i] : 0.f;
#pragma unroll
    for (int j4 = 0; j4 < NJ4; j4++) {
#pragma unroll
      for (int e = 0; e < 4; e++) {
        const int c = 4 * (tx + 16 * j4) + e;
        if (c < d) dst[c] = T::fromf(o[i][4 * j4 + e] * inv);
      }
    }
  }
}

#define GB_PREFILL(sfx, T)                                                                             \
  extern "C" __global__ void __launch_bounds__(256, 2) attn_prefill_d128_##sfx(                        \
      T::S* out, const T::S* q, const T::S* kc, const T::S* vc, const int* bt, const int* qStart,      \
      const int* seqPos, int maxBlocks, int heads, int kvHeads, int d, int bs, int window,             \
      float scaleLog2, int gb, int bq) {                                                               \
    attn_prefill_impl<T, 64, 2>(out, q, kc, vc, bt, qStart, seqPos, maxBlocks, heads, kvHeads, d, bs,  \
                                window, scaleLog2, gb, bq);                                            \
  }                                                                                                    \
  extern "C" __global__ void __launch_bounds__(256, 1) attn_prefill_d256_##sfx(                        \
      T::S* out, const T::S* q, const T::S* kc, const T::S* vc, const int* bt, const int* qStart,      \
      const int* seqPos, int maxBlocks, int heads, int kvHeads, int d, int bs, int window,             \
      float scaleLog2, int gb, int bq) {                                                               \
    attn_prefill_impl<T, 32, 4>(out, q, kc, vc, bt, qStart, seqPos, maxBlocks, heads, kvHeads, d, bs,  \
                                window, scaleLog2, gb, bq);                                            \
  }
GB_INSTANTIATE(GB_PREFILL)
