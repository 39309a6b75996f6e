// The Hopper warpgroup MMA (wgmma.mma_async, sm_90a) as the GEMM kernels use it: FP8 e4m3 (and
// bf16, at the end) with A (the weights) in registers -- each warp of the warpgroup its 16 rows
// of the 64, in mma.sync m16n8k32's (bf16: m16n8k16's) fragment layout -- and B (the
// activations) in shared memory, K-major without swizzle (core matrices of 8 rows x 16 bytes). On
// sm_90 this is the only native FP8 tensor-core instruction: mma.sync e4m3 is emulated (wg_gemm.cu
// says how that was found).
//
// Ordering rules the helpers encode: registers written before a wgmma must be written before
// wgmma_fence() (pin() them first); a wgmma reads A and writes D asynchronously, so after
// wgmma_commit() + wgmma_wait<0>() pin() D (read only after the wait) and A (kept until the
// wgmmas have read it); shared memory written by ordinary stores is made visible to wgmma with
// fence_proxy_async() before the barrier that publishes it.
#pragma once

#include <cstdint>

namespace di::cuda::gemm_detail {

/// Keeps a register's value where it is until this point (see above).
__device__ __forceinline__ void pin(std::uint32_t& r) {
  asm volatile("" : "+r"(r)::"memory");
}
__device__ __forceinline__ void pin(float& r) {
  asm volatile("" : "+f"(r)::"memory");
}

__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
/// Ordinary shared-memory stores become visible to wgmma (the async proxy).
__device__ __forceinline__ void fence_proxy_async() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

/// A shared-memory matrix descriptor, K-major without swizzle: `k_stride` bytes between
/// K-adjacent core matrices (the leading-dimension offset), `mn_stride` between core matrices
/// 8 rows apart (the stride-dimension offset); both multiples of 16.
__device__ __forceinline__ std::uint64_t smem_descriptor(const void* smem, std::uint32_t k_stride,
                                                         std::uint32_t mn_stride) {
  const std::uint64_t addr = std::uint64_t(__cvta_generic_to_shared(smem));
  return ((addr & 0x3ffff) >> 4) | (std::uint64_t((k_stride >> 4) & 0x3fff) << 16) |
         (std::uint64_t((mn_stride >> 4) & 0x3fff) << 32);
}

/// d = A B (fresh accumulators), m64n8k32 e4m3: A the warp's 16 x 32 fragment in registers, B
/// 32 x 8 in shared memory.
__device__ __forceinline__ void wgmma_n8_fresh(float (&d)[4], const std::uint32_t (&a)[4],
                                               std::uint64_t b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, 0, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3 {%0,%1,%2,%3}, {%4,%5,%6,%7}, %8, p, "
      "1, 1;\n}\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b)
      : "memory");
}

/// d = A B (fresh accumulators), m64n32k32 e4m3: A as wgmma_n8_fresh's, B 32 x 32 in shared
/// memory; d holds the thread's 16 results, column group j (8 tokens) at d[4j .. 4j + 3] in
/// mma.sync m16n8's layout (rows g / g + 8, columns 2t / 2t + 1 of the group).
__device__ __forceinline__ void wgmma_n32_fresh(float (&d)[16], const std::uint32_t (&a)[4],
                                                std::uint64_t b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, 0, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k32.f32.e4m3.e4m3 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, {%16,%17,%18,%19}, %20, p, 1, "
      "1;\n}\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3]), "=f"(d[4]), "=f"(d[5]), "=f"(d[6]),
        "=f"(d[7]), "=f"(d[8]), "=f"(d[9]), "=f"(d[10]), "=f"(d[11]), "=f"(d[12]), "=f"(d[13]),
        "=f"(d[14]), "=f"(d[15])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b)
      : "memory");
}

// bf16 m64nNk16 with A in registers (the warp's 16 x 16 fragment in mma.sync m16n8k16's layout)
// and B K-major in shared memory (core matrices of 8 rows x 16 bytes, as e4m3's): d += A B.
#define DI_WGMMA_ACC4(j) "+f"(d[j][0]), "+f"(d[j][1]), "+f"(d[j][2]), "+f"(d[j][3])
#define DI_WGMMA_BF16(shape, dregs, operands)                                   \
  "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\nwgmma.mma_async.sync.aligned." shape \
  ".f32.bf16.bf16 " dregs ", " operands ", p, 1, 1, 0;\n}\n"

/// d += A B for 8 NT tokens (NT = 2, 4 or 8); d[j] holds token group j in mma.sync m16n8's
/// layout (rows g / g + 8, columns 2t / 2t + 1 of the group).
template <int NT>
__device__ __forceinline__ void wgmma_bf16(float (&d)[NT][4], const std::uint32_t (&a)[4],
                                           std::uint64_t b);

template <>
__device__ __forceinline__ void wgmma_bf16<2>(float (&d)[2][4], const std::uint32_t (&a)[4],
                                              std::uint64_t b) {
  asm volatile(DI_WGMMA_BF16("m64n16k16", "{%0,%1,%2,%3,%4,%5,%6,%7}", "{%8,%9,%10,%11}, %12")
               : DI_WGMMA_ACC4(0), DI_WGMMA_ACC4(1)
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b)
               : "memory");
}

template <>
__device__ __forceinline__ void wgmma_bf16<4>(float (&d)[4][4], const std::uint32_t (&a)[4],
                                              std::uint64_t b) {
  asm volatile(DI_WGMMA_BF16("m64n32k16", "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}",
                             "{%16,%17,%18,%19}, %20")
               : DI_WGMMA_ACC4(0), DI_WGMMA_ACC4(1), DI_WGMMA_ACC4(2), DI_WGMMA_ACC4(3)
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b)
               : "memory");
}

template <>
__device__ __forceinline__ void wgmma_bf16<8>(float (&d)[8][4], const std::uint32_t (&a)[4],
                                              std::uint64_t b) {
  asm volatile(DI_WGMMA_BF16("m64n64k16",
                             "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,"
                             "%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}",
                             "{%32,%33,%34,%35}, %36")
               : DI_WGMMA_ACC4(0), DI_WGMMA_ACC4(1), DI_WGMMA_ACC4(2), DI_WGMMA_ACC4(3),
                 DI_WGMMA_ACC4(4), DI_WGMMA_ACC4(5), DI_WGMMA_ACC4(6), DI_WGMMA_ACC4(7)
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b)
               : "memory");
}

/// d += A B, m64n32k16 fp16 in, fp32 accumulate, with A (64 x 16) and B (16 x 32) both in
/// shared memory, K-major descriptors (no transpose); d in wgmma_n32_fresh's layout.
__device__ __forceinline__ void wgmma_f16_ss_n32(float (&d)[16], std::uint64_t a, std::uint64_t b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k16.f32.f16.f16 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, %16, %17, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
        "+f"(d[14]), "+f"(d[15])
      : "l"(a), "l"(b)
      : "memory");
}

#undef DI_WGMMA_BF16
#undef DI_WGMMA_ACC4


// e4m3 m64nNk32 with A in registers (as wgmma_n8_fresh's) and B K-major in shared memory, for
// 8 NG tokens: d = A B (Acc false: fresh accumulators) or d += A B (Acc true); d[j] holds token
// group j in mma.sync m16n8's layout (rows g / g + 8, columns 2t / 2t + 1 of the group).
#define DI_WGMMA_D4(mod, j) mod "f"(d[j][0]), mod "f"(d[j][1]), mod "f"(d[j][2]), mod "f"(d[j][3])
#define DI_WGMMA_E4M3(acc, shape, dregs, operands)                                          \
  "{\n.reg .pred p;\nsetp.ne.b32 p, " acc ", 0;\nwgmma.mma_async.sync.aligned." shape \
  ".f32.e4m3.e4m3 " dregs ", " operands ", p, 1, 1;\n}\n"
#define DI_WGMMA_A_B "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b)

template <int NG, bool Acc>
__device__ __forceinline__ void wgmma_e4m3(float (&d)[NG][4], const std::uint32_t (&a)[4],
                                           std::uint64_t b);

#define DI_WGMMA_E4M3_N8(Acc, acc, mod)                                                        \
  template <>                                                                                  \
  __device__ __forceinline__ void wgmma_e4m3<1, Acc>(float (&d)[1][4], const std::uint32_t(&a)[4], \
                                                     std::uint64_t b) {                        \
    asm volatile(DI_WGMMA_E4M3(acc, "m64n8k32", "{%0,%1,%2,%3}", "{%4,%5,%6,%7}, %8")          \
                 : DI_WGMMA_D4(mod, 0)                                                          \
                 : DI_WGMMA_A_B                                                                 \
                 : "memory");                                                                   \
  }
#define DI_WGMMA_E4M3_N16(Acc, acc, mod)                                                       \
  template <>                                                                                  \
  __device__ __forceinline__ void wgmma_e4m3<2, Acc>(float (&d)[2][4], const std::uint32_t(&a)[4], \
                                                     std::uint64_t b) {                        \
    asm volatile(DI_WGMMA_E4M3(acc, "m64n16k32", "{%0,%1,%2,%3,%4,%5,%6,%7}",                  \
                               "{%8,%9,%10,%11}, %12")                                          \
                 : DI_WGMMA_D4(mod, 0), DI_WGMMA_D4(mod, 1)                                     \
                 : DI_WGMMA_A_B                                                                 \
                 : "memory");                                                                   \
  }
#define DI_WGMMA_E4M3_N32(Acc, acc, mod)                                                       \
  template <>                                                                                  \
  __device__ __forceinline__ void wgmma_e4m3<4, Acc>(float (&d)[4][4], const std::uint32_t(&a)[4], \
                                                     std::uint64_t b) {                        \
    asm volatile(DI_WGMMA_E4M3(acc, "m64n32k32",                                               \
                               "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}",      \
                               "{%16,%17,%18,%19}, %20")                                        \
                 : DI_WGMMA_D4(mod, 0), DI_WGMMA_D4(mod, 1), DI_WGMMA_D4(mod, 2),               \
                   DI_WGMMA_D4(mod, 3)                                                          \
                 : DI_WGMMA_A_B                                                                 \
                 : "memory");                                                                   \
  }
#define DI_WGMMA_E4M3_N64(Acc, acc, mod)                                                       \
  template <>                                                                                  \
  __device__ __forceinline__ void wgmma_e4m3<8, Acc>(float (&d)[8][4], const std::uint32_t(&a)[4], \
                                                     std::uint64_t b) {                        \
    asm volatile(DI_WGMMA_E4M3(acc, "m64n64k32",                                               \
                               "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,"   \
                               "%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}", \
                               "{%32,%33,%34,%35}, %36")                                        \
                 : DI_WGMMA_D4(mod, 0), DI_WGMMA_D4(mod, 1), DI_WGMMA_D4(mod, 2),               \
                   DI_WGMMA_D4(mod, 3), DI_WGMMA_D4(mod, 4), DI_WGMMA_D4(mod, 5),               \
                   DI_WGMMA_D4(mod, 6), DI_WGMMA_D4(mod, 7)                                     \
                 : DI_WGMMA_A_B                                                                 \
                 : "memory");                                                                   \
  }
DI_WGMMA_E4M3_N8(false, "0", "=")
DI_WGMMA_E4M3_N8(true, "1", "+")
DI_WGMMA_E4M3_N16(false, "0", "=")
DI_WGMMA_E4M3_N16(true, "1", "+")
DI_WGMMA_E4M3_N32(false, "0", "=")
DI_WGMMA_E4M3_N32(true, "1", "+")
DI_WGMMA_E4M3_N64(false, "0", "=")
DI_WGMMA_E4M3_N64(true, "1", "+")

#undef DI_WGMMA_E4M3_N8
#undef DI_WGMMA_E4M3_N16
#undef DI_WGMMA_E4M3_N32
#undef DI_WGMMA_E4M3_N64
#undef DI_WGMMA_A_B
#undef DI_WGMMA_E4M3
#undef DI_WGMMA_D4

}  // namespace di::cuda::gemm_detail
