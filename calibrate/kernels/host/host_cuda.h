// host_cuda.h: the subset of CUDA that calibrate/kernels/*.cu use, executed on the CPU.
//
// The .cu sources are compiled unmodified by g++ (C++20): this header and cuda_fp16.h stand in
// for the CUDA headers. A thread block runs its CUDA threads as fibers (ucontext) on one OS
// thread; a fiber gives up the CPU only at a barrier (__syncthreads, or the warp exchange of a
// shuffle), so a block runs like a GPU block whose threads are scheduled at sync points.
//
// Why fibers and not one OS thread per CUDA thread: `__shared__` has to expand to a storage
// class that makes `__shared__ float red[4];` inside a function one array per block and also
// keeps `extern __shared__ float smem[];` a valid declaration. With OS threads that would be
// `static`, and `extern static` is not C++; `thread_local` works in both places, and it is
// shared exactly by the fibers of one OS thread. The sources need no edit.
//
// What is checked at run time (an error ends the process with a one-line message, exit 3):
// deadlock (e.g. half a warp in a shuffle while the rest waits at __syncthreads), shuffles
// with a partial mask or warp, dynamic shared memory beyond the 48 KiB a kernel gets without
// opting in, and writes past the launch's dynamic shared size (a canary). Dynamic shared
// memory starts as NaN in every block, so reading a slot no thread wrote shows in the
// output. A barrier counts arrivals, not call sites (arrivals at two different __syncthreads
// complete one barrier, as bar.sync 0 counts them), and only threads that have not exited.
//
// Under -fsanitize=thread the fibers are announced to ThreadSanitizer (switches without
// synchronisation) and every barrier is a release/acquire pair, so TSan reports a race
// between two CUDA threads whose accesses no barrier orders, whatever order the fibers
// happened to run in. The shim's own bookkeeping uses relaxed atomics, which TSan never
// reports and which order nothing.
#pragma once

#include <ucontext.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <math.h>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <span>
#include <vector>

#if defined(__SANITIZE_THREAD__)
#include <sanitizer/tsan_interface.h>
#define PAGESIM_TSAN 1
#else
#define PAGESIM_TSAN 0
#endif

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
};
using uint3 = dim3;
struct float2 {
  float x, y;
};
struct alignas(16) uint4 {
  unsigned x, y, z, w;
};
inline float2 make_float2(float x, float y) { return {x, y}; }
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline float __expf(float x) { return std::exp(x); }

namespace pagesim_host {

[[noreturn]] inline void fail(const char* what) {
  std::fprintf(stderr, "pagesim host cuda: %s\n", what);
  std::fflush(stderr);
  std::_Exit(3);
}

constexpr unsigned kWarpSize = 32;
constexpr std::size_t kMaxDynamicSharedBytes = 48 * 1024;  // without cudaFuncSetAttribute

// A barrier over a group of fibers (a block or a warp). Counters are relaxed atomics so that
// ThreadSanitizer never reports the shim's own bookkeeping; ordering between CUDA threads
// comes from the explicit release/acquire on sync[generation % 2] (two objects, so a fast
// thread arriving at the next barrier cannot hand its later writes to a slow one leaving this).
struct Barrier {
  std::atomic<unsigned> arrived{0};
  std::atomic<unsigned> generation{0};
  std::atomic<unsigned> live{0};  // threads of the group that have not exited
  char sync[2]{};
  void complete_if_all_arrived() {
    const unsigned n = arrived.load(std::memory_order_relaxed);
    if (n > 0 && n == live.load(std::memory_order_relaxed)) {
      arrived.store(0, std::memory_order_relaxed);
      generation.fetch_add(1, std::memory_order_relaxed);
    }
  }
};

struct Fiber {
  ucontext_t context{};
  std::unique_ptr<char[]> stack;
  dim3 thread_idx;
  unsigned warp = 0, lane = 0;
  std::atomic<bool> done{false};
  std::atomic<const Barrier*> waiting_on{nullptr};
  std::atomic<unsigned> waiting_generation{0};
  void* tsan_fiber = nullptr;
};

struct Warp {
  Barrier barrier;
  unsigned size = 0;
  std::uint64_t slots[2][kWarpSize]{};  // shuffle exchange, double-buffered by generation
};

struct Runtime {
  dim3 grid_dim, block_dim, block_idx;
  std::vector<std::unique_ptr<Fiber>> fibers;
  std::vector<std::unique_ptr<Warp>> warps;
  Barrier block_barrier;
  std::atomic<Fiber*> current{nullptr};  // written by the scheduler, read by the fibers
  ucontext_t scheduler{};
  void* tsan_scheduler = nullptr;
  const std::function<void()>* kernel = nullptr;
  char block_start = 0, block_end = 0;  // TSan sync objects: scheduler <-> fibers per block
};

inline Runtime& runtime() {
  static thread_local Runtime rt;
  return rt;
}

inline void tsan_release([[maybe_unused]] void* addr) {
#if PAGESIM_TSAN
  __tsan_release(addr);
#endif
}
inline void tsan_acquire([[maybe_unused]] void* addr) {
#if PAGESIM_TSAN
  __tsan_acquire(addr);
#endif
}

// Back to the scheduler; no happens-before: only barriers order CUDA threads.
inline void yield_to_scheduler() {
  Runtime& rt = runtime();
  Fiber* f = rt.current.load(std::memory_order_relaxed);
#if PAGESIM_TSAN
  __tsan_switch_to_fiber(rt.tsan_scheduler, __tsan_switch_to_fiber_no_sync);
#endif
  swapcontext(&f->context, &rt.scheduler);
}

inline void arrive_and_wait(Barrier& b) {
  Fiber* f = runtime().current.load(std::memory_order_relaxed);
  const unsigned generation = b.generation.load(std::memory_order_relaxed);
  tsan_release(&b.sync[generation % 2]);
  b.arrived.fetch_add(1, std::memory_order_relaxed);
  b.complete_if_all_arrived();
  if (b.generation.load(std::memory_order_relaxed) == generation) {
    f->waiting_generation.store(generation, std::memory_order_relaxed);
    f->waiting_on.store(&b, std::memory_order_relaxed);
    yield_to_scheduler();
    f->waiting_on.store(nullptr, std::memory_order_relaxed);
  }
  tsan_acquire(&b.sync[generation % 2]);
}

inline void fiber_main() {
  Runtime& rt = runtime();
  tsan_acquire(&rt.block_start);
  Fiber* f = rt.current.load(std::memory_order_relaxed);
  (*rt.kernel)();
  Warp& w = *rt.warps[f->warp];
  w.barrier.live.fetch_sub(1, std::memory_order_relaxed);
  w.barrier.complete_if_all_arrived();
  rt.block_barrier.live.fetch_sub(1, std::memory_order_relaxed);
  rt.block_barrier.complete_if_all_arrived();
  f->done.store(true, std::memory_order_relaxed);
  tsan_release(&rt.block_end);  // everything this thread did precedes the end of the block
  yield_to_scheduler();
  fail("a finished fiber was resumed");
}

inline bool is_runnable(const Fiber& f) {
  if (f.done.load(std::memory_order_relaxed)) return false;
  const Barrier* b = f.waiting_on.load(std::memory_order_relaxed);
  return b == nullptr || b->generation.load(std::memory_order_relaxed) !=
                             f.waiting_generation.load(std::memory_order_relaxed);
}

struct LaunchConfig {
  dim3 grid, block;
  std::size_t shared_bytes = 0;
  std::uint64_t seed = 0;  // 0: fibers resume in thread order; else a seeded shuffle per round
};

// Run `kernel` (the kernel call with its arguments bound) over the grid; `dynamic_shared` is
// the thread_local array behind the sources' `extern __shared__` declaration (may be empty).
inline void launch(const LaunchConfig& cfg, std::span<std::byte> dynamic_shared,
                   const std::function<void()>& kernel) {
  Runtime& rt = runtime();
  const unsigned num_threads = cfg.block.x * cfg.block.y * cfg.block.z;
  if (num_threads == 0 || num_threads > 1024) fail("block size must be 1..1024 threads");
  if (cfg.grid.x == 0 || cfg.grid.y == 0 || cfg.grid.z == 0) fail("grid has a zero dimension");
  if (cfg.shared_bytes > kMaxDynamicSharedBytes) {
    fail("launch asks for more dynamic shared memory than the 48 KiB a kernel gets");
  }
  if (!dynamic_shared.empty() && cfg.shared_bytes > dynamic_shared.size()) {
    fail("launch asks for more dynamic shared memory than the shim reserved");
  }
  constexpr std::size_t kStackBytes = PAGESIM_TSAN ? (1u << 20) : (256u << 10);
  rt.grid_dim = cfg.grid;
  rt.block_dim = cfg.block;
  rt.kernel = &kernel;
  rt.fibers.clear();
  rt.warps.clear();
  const unsigned num_warps = (num_threads + kWarpSize - 1) / kWarpSize;
  for (unsigned w = 0; w < num_warps; ++w) rt.warps.push_back(std::make_unique<Warp>());
  for (unsigned t = 0; t < num_threads; ++t) {
    auto f = std::make_unique<Fiber>();
    f->stack.reset(new char[kStackBytes]);
    f->thread_idx = {t % cfg.block.x, (t / cfg.block.x) % cfg.block.y,
                     t / (cfg.block.x * cfg.block.y)};
    f->warp = t / kWarpSize;
    f->lane = t % kWarpSize;
    rt.warps[f->warp]->size++;
#if PAGESIM_TSAN
    f->tsan_fiber = __tsan_create_fiber(0);
#endif
    rt.fibers.push_back(std::move(f));
  }
#if PAGESIM_TSAN
  rt.tsan_scheduler = __tsan_get_current_fiber();
#endif
  std::mt19937_64 rng(cfg.seed);
  std::vector<unsigned> order(num_threads);
  for (unsigned t = 0; t < num_threads; ++t) order[t] = t;
  for (unsigned bz = 0; bz < cfg.grid.z; ++bz) {
    for (unsigned by = 0; by < cfg.grid.y; ++by) {
      for (unsigned bx = 0; bx < cfg.grid.x; ++bx) {
        rt.block_idx = {bx, by, bz};
        if (!dynamic_shared.empty()) {
          std::memset(dynamic_shared.data(), 0xff, dynamic_shared.size());  // NaN floats
        }
        rt.block_barrier.live.store(num_threads, std::memory_order_relaxed);
        rt.block_barrier.arrived.store(0, std::memory_order_relaxed);
        for (auto& w : rt.warps) {
          w->barrier.live.store(w->size, std::memory_order_relaxed);
          w->barrier.arrived.store(0, std::memory_order_relaxed);
        }
        for (auto& f : rt.fibers) {
          getcontext(&f->context);
          f->context.uc_stack.ss_sp = f->stack.get();
          f->context.uc_stack.ss_size = kStackBytes;
          f->context.uc_link = nullptr;
          makecontext(&f->context, fiber_main, 0);
          f->done.store(false, std::memory_order_relaxed);
          f->waiting_on.store(nullptr, std::memory_order_relaxed);
        }
        tsan_release(&rt.block_start);
        for (unsigned finished = 0; finished < num_threads;) {
          if (cfg.seed != 0) std::shuffle(order.begin(), order.end(), rng);
          bool resumed = false;
          finished = 0;
          for (unsigned t : order) {
            Fiber& f = *rt.fibers[t];
            if (f.done.load(std::memory_order_relaxed)) {
              ++finished;
              continue;
            }
            if (!is_runnable(f)) continue;
            rt.current.store(&f, std::memory_order_relaxed);
#if PAGESIM_TSAN
            __tsan_switch_to_fiber(f.tsan_fiber, __tsan_switch_to_fiber_no_sync);
#endif
            swapcontext(&rt.scheduler, &f.context);
            resumed = true;
          }
          if (!resumed && finished < num_threads) {
            fail("deadlock: the threads of a block wait at different barriers");
          }
        }
        rt.current.store(nullptr, std::memory_order_relaxed);
        tsan_acquire(&rt.block_end);
        for (std::size_t i = cfg.shared_bytes; i < dynamic_shared.size(); ++i) {
          if (dynamic_shared[i] != std::byte{0xff}) {
            fail("a kernel wrote past the dynamic shared memory of its launch");
          }
        }
      }
    }
  }
#if PAGESIM_TSAN
  for (auto& f : rt.fibers) __tsan_destroy_fiber(f->tsan_fiber);
#endif
  rt.fibers.clear();
  rt.kernel = nullptr;
}

inline Fiber& current_fiber() {
  Fiber* f = runtime().current.load(std::memory_order_relaxed);
  if (f == nullptr) fail("a CUDA builtin was used outside a kernel launch");
  return *f;
}

template <typename T>
T shfl_xor_sync(unsigned mask, T var, int lane_mask) {
  static_assert(sizeof(T) <= sizeof(std::uint64_t));
  Runtime& rt = runtime();
  Fiber& f = current_fiber();
  Warp& w = *rt.warps[f.warp];
  if (mask != 0xffffffffu || w.size != kWarpSize ||
      w.barrier.live.load(std::memory_order_relaxed) != kWarpSize) {
    fail("__shfl_xor_sync needs a full mask and a full warp of live threads");
  }
  const unsigned slot = w.barrier.generation.load(std::memory_order_relaxed) % 2;
  std::memcpy(&w.slots[slot][f.lane], &var, sizeof(T));
  arrive_and_wait(w.barrier);
  T out;
  std::memcpy(&out, &w.slots[slot][(f.lane ^ static_cast<unsigned>(lane_mask)) % kWarpSize],
              sizeof(T));
  return out;
}

}  // namespace pagesim_host

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __launch_bounds__(...)
#define __shared__ thread_local
#define threadIdx (::pagesim_host::current_fiber().thread_idx)
#define blockIdx (::pagesim_host::runtime().block_idx)
#define blockDim (::pagesim_host::runtime().block_dim)
#define gridDim (::pagesim_host::runtime().grid_dim)
#define warpSize (::pagesim_host::kWarpSize)
#define __syncthreads() (::pagesim_host::arrive_and_wait(::pagesim_host::runtime().block_barrier))
#define __shfl_xor_sync(mask, var, lane_mask) \
  (::pagesim_host::shfl_xor_sync((mask), (var), (lane_mask)))

namespace pagesim_host {
// A value the compiler cannot fold: it makes the initialisation of the dynamic shared array
// dynamic, so g++ emits the TLS init function that a block-scope `extern thread_local`
// declaration calls unconditionally (without one the call goes to address 0).
template <typename T>
[[gnu::noinline]] T runtime_zero() {
  return T{};
}
}  // namespace pagesim_host

// Defines the thread_local array behind the sources' `extern __shared__ TYPE NAME[];` (it must
// precede the source) and pagesim_dynamic_shared(), the span the launcher fills and checks.
#define PAGESIM_DYNAMIC_SHARED(TYPE, NAME)                                                  \
  alignas(16) thread_local TYPE NAME[::pagesim_host::kMaxDynamicSharedBytes / sizeof(TYPE)] = \
      {::pagesim_host::runtime_zero<TYPE>()};                                               \
  inline std::span<std::byte> pagesim_dynamic_shared() {                                    \
    return {reinterpret_cast<std::byte*>(NAME), sizeof(NAME)};                              \
  }
#define PAGESIM_NO_DYNAMIC_SHARED \
  inline std::span<std::byte> pagesim_dynamic_shared() { return {}; }
