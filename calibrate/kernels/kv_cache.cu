// KV-cache maintenance kernels: the KV write of a step and copy-on-write block copies.
//
// Cache layout (fp16): k_cache, v_cache [num_blocks, num_kv_heads, block_size, head_dim],
// the same as paged_attention.cu. A slot is block_id * block_size + offset_in_block.
//
// reshape_and_cache: key, value [num_tokens, num_kv_heads, head_dim]; slot_mapping
//   [num_tokens] int64. Grid (num_tokens), threads stride over num_kv_heads * head_dim.
//   Every slot must be valid (0 <= slot < num_blocks * block_size); the caller checks it.
//
// copy_blocks: block_pairs [num_pairs, 2] int64 (src, dst); copies the whole block of
//   both caches, elems_per_block = num_kv_heads * block_size * head_dim halfs, in 16-byte
//   vectors when elems_per_block is a multiple of 8 (head_dim is). Grid (num_pairs, 2):
//   blockIdx.y picks K or V.
#include <cuda_fp16.h>

extern "C" __global__ void reshape_and_cache(__half* k_cache, __half* v_cache,
                                             const __half* key, const __half* value,
                                             const long long* slot_mapping, int num_kv_heads,
                                             int head_dim, int block_size) {
  const long long token = blockIdx.x;
  const long long slot = slot_mapping[token];
  const long long block = slot / block_size;
  const int offset = (int)(slot % block_size);
  const int n = num_kv_heads * head_dim;
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    const int h = i / head_dim;
    const int d = i % head_dim;
    const long long dst = ((block * num_kv_heads + h) * block_size + offset) * head_dim + d;
    k_cache[dst] = key[token * n + i];
    v_cache[dst] = value[token * n + i];
  }
}

extern "C" __global__ void copy_blocks(__half* k_cache, __half* v_cache,
                                       const long long* block_pairs, long long elems_per_block) {
  const long long src = block_pairs[2 * blockIdx.x];
  const long long dst = block_pairs[2 * blockIdx.x + 1];
  __half* cache = blockIdx.y == 0 ? k_cache : v_cache;
  if (elems_per_block % 8 == 0) {
    const uint4* from = reinterpret_cast<const uint4*>(cache + src * elems_per_block);
    uint4* to = reinterpret_cast<uint4*>(cache + dst * elems_per_block);
    for (long long i = threadIdx.x; i < elems_per_block / 8; i += blockDim.x) to[i] = from[i];
  } else {
    for (long long i = threadIdx.x; i < elems_per_block; i += blockDim.x) {
      cache[dst * elems_per_block + i] = cache[src * elems_per_block + i];
    }
  }
}
