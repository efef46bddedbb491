// Warp-level building blocks of the paged attention kernels (attention_kernels.cuh): the sm_80+
// instructions they use (mma.sync m16n8k16 f16 -> f32, ldmatrix, cp.async with zero fill), the
// query fragment and one online-softmax step of a warp's 16 query rows over a block of 32 keys
// held in shared memory. All valid on sm_80, 86, 89 and 90.
//
// Fragment layouts (PTX ISA, mma.m16n8k16 .f16): with g = lane / 4 and c = 2 · (lane % 4),
//   A (16 x 16): a0 = (row g, cols c, c+1), a1 = (row g+8, cols c, c+1), a2 = (row g, cols c+8,
//                c+9), a3 = (row g+8, cols c+8, c+9);
//   B (16 x 8):  b0 = (rows c, c+1; col g), b1 = (rows c+8, c+9; col g);
//   C (16 x 8):  c0, c1 = (row g, cols c, c+1), c2, c3 = (row g+8, cols c, c+1).
// Scores S = Q·Kᵀ come out in C layout, which is exactly the A layout P needs for O += P·V, so
// P never leaves registers.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>
#include <cstring>

namespace exl3::attention_detail {

constexpr int kBlockKeys = 32;  // keys per shared-memory block (4 n-tiles of 8, 2 k-steps of 16)
constexpr int kWarpRows = 16;   // query rows per warp (the mma M)

// Halves per key row in shared memory: head_dim plus 8 (16 B) of padding, so the 8 row addresses
// of one ldmatrix 8x8 matrix fall in 8 distinct 4-bank groups (row stride 272 B or 144 B, i.e. 4
// banks apart modulo 32).
template <int D>
constexpr int row_stride() {
  return D + 8;
}
template <int D>
constexpr int block_halves() {
  return kBlockKeys * row_stride<D>();
}

__device__ __forceinline__ uint32_t smem_address(const void* ptr) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(ptr));
}

// 16 bytes global -> shared, asynchronously; `valid` false writes 16 zero bytes instead (src is
// then not read but must still be a valid address).
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool valid) {
  const int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_address(smem)), "l"(gmem),
               "r"(src_bytes)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// Waits until at most one committed group of this thread is still in flight.
__device__ __forceinline__ void cp_async_wait_all_but_one() {
  asm volatile("cp.async.wait_group 1;\n" ::: "memory");
}

// Four 8x8 b16 matrices; lanes 8i..8i+7 give the row addresses of matrix i.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const __half* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_address(row))
               : "memory");
}
// The same, each matrix transposed: lane l receives (row 2(l%4), col l/4) and (row 2(l%4)+1,
// col l/4) of the stored matrix.
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const __half* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_address(row))
               : "memory");
}

// c += a · b for one 16x8x16 tile, fp16 inputs, fp32 accumulation.
__device__ __forceinline__ void mma_16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t pack_half2(float lo, float hi) {
  const __half2 h = __floats2half2_rn(lo, hi);  // lo in the low 16 bits: the lower column
  uint32_t u;
  memcpy(&u, &h, sizeof(u));
  return u;
}

__device__ __forceinline__ uint32_t load_half2_bits(const __half* ptr) {
  return __ldg(reinterpret_cast<const unsigned int*>(ptr));
}

// Online-softmax state of a warp's 16 rows; lane holds rows g and g+8 (index 0 and 1).
template <int D>
struct WarpSoftmax {
  float o[D / 8][4];  // unnormalised output, C layout per 8-column n-tile
  float m[2];         // running max of the scores, log2 domain (scores · scale · log2 e)
  float l[2];         // this lane's part of the running sum of exp2(score - m)

  __device__ __forceinline__ void init() {
#pragma unroll
    for (int i = 0; i < D / 8; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
    m[0] = m[1] = -INFINITY;
    l[0] = l[1] = 0.0f;
  }

  // Full row sums (the four lanes of a row group summed); every lane must call it.
  __device__ __forceinline__ void row_sums(float (&sum)[2]) const {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float s = l[r];
      s += __shfl_xor_sync(0xFFFFFFFFu, s, 1);
      s += __shfl_xor_sync(0xFFFFFFFFu, s, 2);
      sum[r] = s;
    }
  }
};

// A fragments of the warp's 16 query rows (row0 = row g, row1 = row g+8; nullptr = padding row,
// loaded as zeros).
template <int D>
__device__ __forceinline__ void load_q_fragment(uint32_t (&qf)[D / 16][4], const __half* row0, const __half* row1) {
  const int c = 2 * (static_cast<int>(threadIdx.x) % 4);
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    qf[kk][0] = row0 != nullptr ? load_half2_bits(row0 + kk * 16 + c) : 0u;
    qf[kk][1] = row1 != nullptr ? load_half2_bits(row1 + kk * 16 + c) : 0u;
    qf[kk][2] = row0 != nullptr ? load_half2_bits(row0 + kk * 16 + 8 + c) : 0u;
    qf[kk][3] = row1 != nullptr ? load_half2_bits(row1 + kk * 16 + 8 + c) : 0u;
  }
}

// One online-softmax step of the warp's rows over the 32 keys in kbuf/vbuf, whose first key is
// at position `start`. Row r (0: g, 1: g+8) sees keys at positions lower[r] <= p <= limit[r]
// (limit -1: none; lower is the sliding window's start, 0 without one).
template <int D>
__device__ __forceinline__ void attend_block(const uint32_t (&qf)[D / 16][4], const __half* kbuf, const __half* vbuf,
                                             int32_t start, const int32_t (&limit)[2], const int32_t (&lower)[2],
                                             float scale_log2, WarpSoftmax<D>& st) {
  constexpr int kStride = row_stride<D>();
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int mat = lane / 8;  // which 8x8 matrix of an x4 ldmatrix this lane addresses
  const int mat_row = lane % 8;
  const int c = 2 * (lane % 4);

  // S = Q · Kᵀ: 4 n-tiles of 8 keys; one x4 ldmatrix gives b0, b1 of two n-tiles.
  float s[4][4];
#pragma unroll
  for (int nt = 0; nt < 4; ++nt) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
#pragma unroll
    for (int np = 0; np < 2; ++np) {
      // Matrices: (keys +0..7, dims +0..7), (keys +0..7, dims +8..15), (keys +8..15, dims
      // +0..7), (keys +8..15, dims +8..15).
      uint32_t b[4];
      ldmatrix_x4(b, kbuf + (np * 16 + (mat / 2) * 8 + mat_row) * kStride + kk * 16 + (mat % 2) * 8);
      mma_16816(s[2 * np], qf[kk], b[0], b[1]);
      mma_16816(s[2 * np + 1], qf[kk], b[2], b[3]);
    }
  }

  // Scale into the log2 domain, mask, and take the block's row maxima.
  float block_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
  for (int nt = 0; nt < 4; ++nt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int32_t key = start + nt * 8 + c + (e % 2);
      const int r = e / 2;
      s[nt][e] = key <= limit[r] && key >= lower[r] ? s[nt][e] * scale_log2 : -INFINITY;
      block_max[r] = fmaxf(block_max[r], s[nt][e]);
    }
  }
  float alpha[2], m_use[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    block_max[r] = fmaxf(block_max[r], __shfl_xor_sync(0xFFFFFFFFu, block_max[r], 1));
    block_max[r] = fmaxf(block_max[r], __shfl_xor_sync(0xFFFFFFFFu, block_max[r], 2));
    const float m_new = fmaxf(st.m[r], block_max[r]);
    // A row that has seen no key yet keeps m = -inf: subtract 0 so exp2 gives 0, never NaN.
    m_use[r] = m_new == -INFINITY ? 0.0f : m_new;
    alpha[r] = exp2f(st.m[r] - m_use[r]);
    st.m[r] = m_new;
  }
  float p_sum[2] = {0.0f, 0.0f};
#pragma unroll
  for (int nt = 0; nt < 4; ++nt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      s[nt][e] = exp2f(s[nt][e] - m_use[e / 2]);
      p_sum[e / 2] += s[nt][e];
    }
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) st.l[r] = st.l[r] * alpha[r] + p_sum[r];
#pragma unroll
  for (int dt = 0; dt < D / 8; ++dt) {
    st.o[dt][0] *= alpha[0];
    st.o[dt][1] *= alpha[0];
    st.o[dt][2] *= alpha[1];
    st.o[dt][3] *= alpha[1];
  }

  // O += P · V over 2 k-steps of 16 keys; P's A fragment is S's C fragments of n-tiles 2j, 2j+1.
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    const uint32_t pa[4] = {pack_half2(s[2 * j][0], s[2 * j][1]), pack_half2(s[2 * j][2], s[2 * j][3]),
                            pack_half2(s[2 * j + 1][0], s[2 * j + 1][1]),
                            pack_half2(s[2 * j + 1][2], s[2 * j + 1][3])};
#pragma unroll
    for (int dp = 0; dp < D / 16; ++dp) {
      // Transposed matrices: (keys +0..7, dims +0..7), (keys +8..15, dims +0..7), (keys +0..7,
      // dims +8..15), (keys +8..15, dims +8..15) -> b0, b1 of n-tiles 2dp and 2dp+1.
      uint32_t b[4];
      ldmatrix_x4_trans(b, vbuf + (j * 16 + (mat % 2) * 8 + mat_row) * kStride + dp * 16 + (mat / 2) * 8);
      mma_16816(st.o[2 * dp], pa, b[0], b[1]);
      mma_16816(st.o[2 * dp + 1], pa, b[2], b[3]);
    }
  }
}

}  // namespace exl3::attention_detail
