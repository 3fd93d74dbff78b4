// Decode attention (one query token per sequence) over a paged or a contiguous KV cache.
//
// Algorithm: the online softmax of the PagedAttention paper (eq. 4), applied tile by tile.
// A tile is TILE consecutive context tokens (a whole number of KV blocks, at least one);
// for each tile the kernel computes the logits q.k / sqrt(d), the tile maximum, rescales the
// running accumulator and running sum by exp(m_old - m_new) and adds sum_t exp(s_t - m_new) v_t.
// fp16 K/V/Q/O, fp32 accumulation.
//
// Cache layouts (fp16, row-major):
//   paged:      k_cache, v_cache [num_blocks, num_kv_heads, block_size, HEAD_DIM]
//               block_tables [num_seqs, max_blocks_per_seq] int32 (physical block ids)
//   contiguous: k, v [num_seqs, max_context, num_kv_heads, HEAD_DIM]
//   q, out      [num_seqs, num_heads, HEAD_DIM]
// Grouped-query attention: query head h reads KV head h / (num_heads / num_kv_heads).
//
// Kernels (one thread block of NUM_THREADS per (head, sequence[, partition])):
//   paged_attention_v1_hd{D}        single pass over the whole context
//   paged_attention_v2_hd{D}        context split into partitions of partition_size tokens
//                                   (a multiple of the tile); writes per-partition max,
//                                   sum and unnormalised accumulator
//   attention_v2_reduce_hd{D}       combines the partitions (log-sum-exp rescaling)
//   contiguous_attention_hd{D}      the v1 algorithm over the contiguous layout (baseline)
// Dynamic shared memory: TILE floats (the tile's logits).
#include <cuda_fp16.h>

// NVRTC has no <math.h>, which is where INFINITY usually comes from
#ifndef INFINITY
#define INFINITY __int_as_float(0x7f800000)
#endif

#define NUM_THREADS 128
#define NUM_WARPS (NUM_THREADS / 32)
// the occupancy the register budget is for (8 x 128 threads x 64 registers = an SM's 64K)
#define MIN_BLOCKS_PER_SM 8

struct PagedKV {
  const __half* k_cache;
  const __half* v_cache;
  const int* block_table;  // this sequence's row
  int block_size;
  int num_kv_heads;
  int kv_head;
  int head_dim;
  __device__ __forceinline__ long long offset(int token) const {
    const long long block = block_table[token / block_size];
    return ((block * num_kv_heads + kv_head) * block_size + token % block_size) * head_dim;
  }
};

struct ContiguousKV {
  const __half* k_cache;
  const __half* v_cache;
  int seq;
  int max_context;
  int num_kv_heads;
  int kv_head;
  int head_dim;
  __device__ __forceinline__ long long offset(int token) const {
    return (((long long)seq * max_context + token) * num_kv_heads + kv_head) * head_dim;
  }
};

__device__ __forceinline__ float warp_sum(float x) {
  for (int mask = 16; mask > 0; mask >>= 1) x += __shfl_xor_sync(0xffffffffu, x, mask);
  return x;
}

__device__ __forceinline__ float warp_max(float x) {
  for (int mask = 16; mask > 0; mask >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, mask));
  return x;
}

// Work split. Every thread loads VEC consecutive half2 pairs of a K or V row (16 bytes),
// so a row of HEAD_DIM halves is NVEC = HEAD_DIM / 8 loads:
// - logits: a group of K_LANES lanes (NVEC rounded up to a power of two) per token, so a
//   warp scores 32 / K_LANES tokens at once and sums each dot product over its group with
//   xor shuffles that stay inside it;
// - weighted V: NVEC threads per token, V_GROUPS = NUM_THREADS / NVEC tokens at once (threads
//   past V_GROUPS * NVEC are idle in that phase), then reduce_groups sums the groups.
// Compared with one lane per pair and one warp per token, a thread keeps four loads in
// flight instead of one and walks a quarter as many tokens.
constexpr int VEC = 4;  // half2 pairs per load: 16 bytes

__host__ __device__ constexpr int pow2_at_least(int n) { return n <= 1 ? 1 : 2 * pow2_at_least((n + 1) / 2); }

template <int HEAD_DIM>
struct Split {
  static_assert(HEAD_DIM % (2 * VEC) == 0, "HEAD_DIM must be a multiple of 8");
  static constexpr int NVEC = HEAD_DIM / (2 * VEC);
  static constexpr int K_LANES = pow2_at_least(NVEC);
  static_assert(K_LANES <= 32, "a token's K row must fit one warp");
  static constexpr int K_TOKENS_PER_WARP = 32 / K_LANES;
  static constexpr int V_GROUPS = NUM_THREADS / NVEC;
};

// Attend the query over tokens [start, end) of one sequence with the online softmax.
// On return, every thread of the block holds m (running max); thread (group, vec) of the V
// phase holds its group's running sum l and the accumulator of pairs vec*VEC .. vec*VEC+VEC-1
// in acc; the caller reduces groups.
template <int HEAD_DIM, typename KV>
__device__ void attend_range(const KV& kv, const __half* q_ptr, float scale, int start, int end,
                             int tile, float* logits, float* red, float& m, float& l,
                             float2 (&acc)[VEC]) {
  using S = Split<HEAD_DIM>;
  const int tid = threadIdx.x;
  const int warp = tid / 32;
  const int lane = tid % 32;
  const int k_vec = lane % S::K_LANES;      // which 16 bytes of a K row this lane loads
  const int k_token = lane / S::K_LANES;    // which of the warp's tokens it scores
  const int v_vec = tid % S::NVEC;
  const int v_group = tid / S::NVEC;        // groups >= V_GROUPS are idle in the V phase

  // This lane's slice of the query, as float2 pairs, in registers.
  float2 qv[VEC];
#pragma unroll
  for (int i = 0; i < VEC; ++i) {
    qv[i] = k_vec < S::NVEC
                ? __half22float2(reinterpret_cast<const __half2*>(q_ptr)[k_vec * VEC + i])
                : make_float2(0.f, 0.f);
  }
  m = -INFINITY;
  l = 0.f;
#pragma unroll
  for (int i = 0; i < VEC; ++i) acc[i] = make_float2(0.f, 0.f);

  for (int tile_start = start; tile_start < end; tile_start += tile) {
    const int tile_len = min(tile, end - tile_start);
    // Phase 1: logits. The trip count is the same for every lane of a warp (the shuffles
    // need the whole warp); a lane past the tile scores nothing.
    float local_max = -INFINITY;
    for (int base = warp * S::K_TOKENS_PER_WARP; base < tile_len;
         base += NUM_WARPS * S::K_TOKENS_PER_WARP) {
      const int t = base + k_token;
      float dot = 0.f;
      if (t < tile_len && k_vec < S::NVEC) {
        const __half2* k =
            reinterpret_cast<const __half2*>(kv.k_cache + kv.offset(tile_start + t)) + k_vec * VEC;
        __half2 kh[VEC];
#pragma unroll
        for (int i = 0; i < VEC; ++i) kh[i] = k[i];
#pragma unroll
        for (int i = 0; i < VEC; ++i) {
          const float2 kf = __half22float2(kh[i]);
          dot += qv[i].x * kf.x + qv[i].y * kf.y;
        }
      }
#pragma unroll
      for (int mask = S::K_LANES / 2; mask > 0; mask >>= 1) {
        dot += __shfl_xor_sync(0xffffffffu, dot, mask);
      }
      dot *= scale;
      if (t < tile_len) {
        if (k_vec == 0) logits[t] = dot;
        local_max = fmaxf(local_max, dot);
      }
    }
    local_max = warp_max(local_max);
    if (lane == 0) red[warp] = local_max;
    __syncthreads();
    float tile_max = red[0];
#pragma unroll
    for (int w = 1; w < NUM_WARPS; ++w) tile_max = fmaxf(tile_max, red[w]);
    const float m_new = fmaxf(m, tile_max);
    const float rescale = __expf(m - m_new);  // exp(-inf) = 0 on the first tile
    l *= rescale;
#pragma unroll
    for (int i = 0; i < VEC; ++i) {
      acc[i].x *= rescale;
      acc[i].y *= rescale;
    }
    // Phase 2: weights and V, thread (group, vec) takes tokens group, group + V_GROUPS, ...
    if (v_group < S::V_GROUPS) {
      for (int t = v_group; t < tile_len; t += S::V_GROUPS) {
        const float p = __expf(logits[t] - m_new);
        l += p;
        const __half2* v =
            reinterpret_cast<const __half2*>(kv.v_cache + kv.offset(tile_start + t)) + v_vec * VEC;
        __half2 vh[VEC];
#pragma unroll
        for (int i = 0; i < VEC; ++i) vh[i] = v[i];
#pragma unroll
        for (int i = 0; i < VEC; ++i) {
          const float2 vf = __half22float2(vh[i]);
          acc[i].x += p * vf.x;
          acc[i].y += p * vf.y;
        }
      }
    }
    m = m_new;
    __syncthreads();  // logits and red are reused by the next tile
  }
}

// Sum acc and l over the V phase's thread groups into shared memory: out_acc[HEAD_DIM], *out_l.
template <int HEAD_DIM>
__device__ void reduce_groups(const float2 (&acc)[VEC], float l, float* scratch, float* out_l) {
  using S = Split<HEAD_DIM>;
  const int tid = threadIdx.x;
  const int vec = tid % S::NVEC;
  const int group = tid / S::NVEC;
  // scratch holds V_GROUPS * HEAD_DIM floats + V_GROUPS sums
  if (group < S::V_GROUPS) {
#pragma unroll
    for (int i = 0; i < VEC; ++i) {
      scratch[group * HEAD_DIM + 2 * (vec * VEC + i)] = acc[i].x;
      scratch[group * HEAD_DIM + 2 * (vec * VEC + i) + 1] = acc[i].y;
    }
    if (vec == 0) scratch[S::V_GROUPS * HEAD_DIM + group] = l;
  }
  __syncthreads();
  if (tid < HEAD_DIM) {
    float s = 0.f;
    for (int g = 0; g < S::V_GROUPS; ++g) s += scratch[g * HEAD_DIM + tid];
    scratch[tid] = s;  // safe: each tid reads column tid of every group before writing row 0
  }
  if (tid == 0) {
    float s = 0.f;
    for (int g = 0; g < S::V_GROUPS; ++g) s += scratch[S::V_GROUPS * HEAD_DIM + g];
    *out_l = s;
  }
  __syncthreads();
}

template <int HEAD_DIM, typename KV>
__device__ void attention_single_pass(const KV& kv, const __half* q_ptr, __half* out_ptr,
                                      float scale, int context_len, int tile) {
  extern __shared__ float smem[];
  constexpr int GROUPS = Split<HEAD_DIM>::V_GROUPS;
  __shared__ float red[NUM_WARPS];
  __shared__ float scratch[GROUPS * HEAD_DIM + GROUPS];
  __shared__ float total_l;
  float m, l;
  float2 acc[VEC];
  attend_range<HEAD_DIM>(kv, q_ptr, scale, 0, context_len, tile, smem, red, m, l, acc);
  reduce_groups<HEAD_DIM>(acc, l, scratch, &total_l);
  const float inv = 1.f / total_l;
  for (int d = threadIdx.x; d < HEAD_DIM; d += NUM_THREADS) {
    out_ptr[d] = __float2half(scratch[d] * inv);
  }
}

template <int HEAD_DIM>
__device__ void paged_v1(__half* out, const __half* q, const __half* k_cache,
                         const __half* v_cache, const int* block_tables, const int* context_lens,
                         int max_blocks_per_seq, int num_kv_heads, int block_size, int tile,
                         float scale) {
  const int head = blockIdx.x;
  const int seq = blockIdx.y;
  const int num_heads = gridDim.x;
  const PagedKV kv{k_cache, v_cache, block_tables + (long long)seq * max_blocks_per_seq,
                   block_size, num_kv_heads, head / (num_heads / num_kv_heads), HEAD_DIM};
  const long long qo = ((long long)seq * num_heads + head) * HEAD_DIM;
  attention_single_pass<HEAD_DIM>(kv, q + qo, out + qo, scale, context_lens[seq], tile);
}

template <int HEAD_DIM>
__device__ void contiguous_v1(__half* out, const __half* q, const __half* k, const __half* v,
                              const int* context_lens, int max_context, int num_kv_heads,
                              int tile, float scale) {
  const int head = blockIdx.x;
  const int seq = blockIdx.y;
  const int num_heads = gridDim.x;
  const ContiguousKV kv{k, v, seq, max_context, num_kv_heads, head / (num_heads / num_kv_heads),
                        HEAD_DIM};
  const long long qo = ((long long)seq * num_heads + head) * HEAD_DIM;
  attention_single_pass<HEAD_DIM>(kv, q + qo, out + qo, scale, context_lens[seq], tile);
}

// Partition pass: grid (num_heads, num_seqs, max_num_partitions).
// tmp_out [num_seqs, num_heads, max_num_partitions, HEAD_DIM] float (unnormalised),
// max_logits, exp_sums [num_seqs, num_heads, max_num_partitions] float.
template <int HEAD_DIM>
__device__ void paged_v2(float* tmp_out, float* max_logits, float* exp_sums, const __half* q,
                         const __half* k_cache, const __half* v_cache, const int* block_tables,
                         const int* context_lens, int max_blocks_per_seq, int num_kv_heads,
                         int block_size, int tile, int partition_size, float scale) {
  extern __shared__ float smem[];
  constexpr int GROUPS = Split<HEAD_DIM>::V_GROUPS;
  __shared__ float red[NUM_WARPS];
  __shared__ float scratch[GROUPS * HEAD_DIM + GROUPS];
  __shared__ float total_l;
  const int head = blockIdx.x;
  const int seq = blockIdx.y;
  const int part = blockIdx.z;
  const int num_heads = gridDim.x;
  const int num_parts = gridDim.z;
  // the partition's row of the outputs (recomputed where used: fewer live registers)
  const auto row_of = [&]() { return ((long long)seq * num_heads + head) * num_parts + part; };
  const int context_len = context_lens[seq];
  const int start = part * partition_size;
  if (start >= context_len) {  // empty partition: neutral element of the reduction
    if (threadIdx.x == 0) {
      max_logits[row_of()] = -INFINITY;
      exp_sums[row_of()] = 0.f;
    }
    return;
  }
  const int end = min(start + partition_size, context_len);
  const PagedKV kv{k_cache, v_cache, block_tables + (long long)seq * max_blocks_per_seq,
                   block_size, num_kv_heads, head / (num_heads / num_kv_heads), HEAD_DIM};
  float m, l;
  float2 acc[VEC];
  attend_range<HEAD_DIM>(kv, q + ((long long)seq * num_heads + head) * HEAD_DIM, scale, start,
                         end, tile, smem, red, m, l, acc);
  reduce_groups<HEAD_DIM>(acc, l, scratch, &total_l);
  const long long row = row_of();
  for (int d = threadIdx.x; d < HEAD_DIM; d += NUM_THREADS) tmp_out[row * HEAD_DIM + d] = scratch[d];
  if (threadIdx.x == 0) {
    max_logits[row] = m;
    exp_sums[row] = total_l;
  }
}

// Reduction: grid (num_heads, num_seqs); out = sum_p e^(m_p - M) acc_p / sum_p e^(m_p - M) l_p.
template <int HEAD_DIM>
__device__ void reduce_v2(__half* out, const float* tmp_out, const float* max_logits,
                          const float* exp_sums, int num_parts) {
  const int head = blockIdx.x;
  const int seq = blockIdx.y;
  const int num_heads = gridDim.x;
  const long long base = ((long long)seq * num_heads + head) * num_parts;
  float big_m = -INFINITY;
  for (int p = 0; p < num_parts; ++p) big_m = fmaxf(big_m, max_logits[base + p]);
  float big_l = 0.f;
  for (int p = 0; p < num_parts; ++p) {
    if (exp_sums[base + p] > 0.f) big_l += __expf(max_logits[base + p] - big_m) * exp_sums[base + p];
  }
  const float inv = 1.f / big_l;
  for (int d = threadIdx.x; d < HEAD_DIM; d += blockDim.x) {
    float s = 0.f;
    for (int p = 0; p < num_parts; ++p) {
      if (exp_sums[base + p] > 0.f) {
        s += __expf(max_logits[base + p] - big_m) * tmp_out[(base + p) * HEAD_DIM + d];
      }
    }
    out[((long long)seq * num_heads + head) * HEAD_DIM + d] = __float2half(s * inv);
  }
}

#define INSTANTIATE(D)                                                                          \
  extern "C" __global__ void __launch_bounds__(NUM_THREADS) paged_attention_v1_hd##D(           \
      __half* out, const __half* q, const __half* k_cache, const __half* v_cache,               \
      const int* block_tables, const int* context_lens, int max_blocks_per_seq,                 \
      int num_kv_heads, int block_size, int tile, float scale) {                                \
    paged_v1<D>(out, q, k_cache, v_cache, block_tables, context_lens, max_blocks_per_seq,       \
                num_kv_heads, block_size, tile, scale);                                         \
  }                                                                                             \
  extern "C" __global__ void __launch_bounds__(NUM_THREADS, MIN_BLOCKS_PER_SM)                  \
      paged_attention_v2_hd##D(                                                                 \
      float* tmp_out, float* max_logits, float* exp_sums, const __half* q,                      \
      const __half* k_cache, const __half* v_cache, const int* block_tables,                    \
      const int* context_lens, int max_blocks_per_seq, int num_kv_heads, int block_size,        \
      int tile, int partition_size, float scale) {                                              \
    paged_v2<D>(tmp_out, max_logits, exp_sums, q, k_cache, v_cache, block_tables,               \
                context_lens, max_blocks_per_seq, num_kv_heads, block_size, tile,               \
                partition_size, scale);                                                         \
  }                                                                                             \
  extern "C" __global__ void attention_v2_reduce_hd##D(                                         \
      __half* out, const float* tmp_out, const float* max_logits, const float* exp_sums,        \
      int num_parts) {                                                                          \
    reduce_v2<D>(out, tmp_out, max_logits, exp_sums, num_parts);                                \
  }                                                                                             \
  extern "C" __global__ void __launch_bounds__(NUM_THREADS) contiguous_attention_hd##D(         \
      __half* out, const __half* q, const __half* k, const __half* v, const int* context_lens,  \
      int max_context, int num_kv_heads, int tile, float scale) {                               \
    contiguous_v1<D>(out, q, k, v, context_lens, max_context, num_kv_heads, tile, scale);       \
  }

INSTANTIATE(64)
INSTANTIATE(80)
INSTANTIATE(96)
INSTANTIATE(128)
