// cuda_fp16.h for the host shim: __half as _Float16 (IEEE binary16, round to nearest even,
// as __float2half on the GPU), __half2 as a pair, and the conversions the kernels use.
#pragma once

#include "host_cuda.h"

struct __half {
  _Float16 x;
};
struct alignas(4) __half2 {
  __half x, y;
};
static_assert(sizeof(__half) == 2 && sizeof(__half2) == 4);

inline __half __float2half(float f) { return {static_cast<_Float16>(f)}; }
inline float __half2float(__half h) { return static_cast<float>(h.x); }
inline float2 __half22float2(__half2 h) { return {__half2float(h.x), __half2float(h.y)}; }
