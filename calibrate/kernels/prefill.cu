// Prefill attention's softmax: the step between the two cuBLAS GEMMs of cupy_ops.py's
// prefill path (S = Q K^T, then P V), so S is read once and P written once, in fp16.
//
// causal_softmax: s [num_rows, t] fp16, in place. Row r holds the logits of the query at
//   position i = r % t of its sequence against keys 0 .. t-1; keys after i are masked
//   (their weight is written as 0). Each row becomes softmax(scale * s[r, 0..i]), computed
//   in fp32. Grid (ceil(num_rows / ROWS_PER_BLOCK)), NUM_THREADS threads: one warp per row.
#include <cuda_fp16.h>

// NVRTC has no <math.h>, which is where INFINITY usually comes from
#ifndef INFINITY
#define INFINITY __int_as_float(0x7f800000)
#endif

#define SOFTMAX_THREADS 128
#define ROWS_PER_BLOCK (SOFTMAX_THREADS / 32)

__device__ __forceinline__ float row_max(float x) {
  for (int mask = 16; mask > 0; mask >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, mask));
  return x;
}

__device__ __forceinline__ float row_sum(float x) {
  for (int mask = 16; mask > 0; mask >>= 1) x += __shfl_xor_sync(0xffffffffu, x, mask);
  return x;
}

extern "C" __global__ void __launch_bounds__(SOFTMAX_THREADS)
    causal_softmax(__half* s, long long num_rows, int t, float scale) {
  const int lane = threadIdx.x % 32;
  const long long row = (long long)blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / 32;
  if (row >= num_rows) return;  // a whole warp leaves together: no shuffle is split
  __half* x = s + row * t;
  const int last = (int)(row % t);  // the query's position: keys 0 .. last are visible
  float m = -INFINITY;
  for (int j = lane; j <= last; j += 32) m = fmaxf(m, __half2float(x[j]) * scale);
  m = row_max(m);
  float l = 0.f;
  for (int j = lane; j <= last; j += 32) l += __expf(__half2float(x[j]) * scale - m);
  const float inv = 1.f / row_sum(l);
  for (int j = lane; j < t; j += 32) {
    x[j] = j <= last ? __float2half(__expf(__half2float(x[j]) * scale - m) * inv)
                     : __float2half(0.f);
  }
}
