// The compiled table of the fused path, one X-macro per GEMM role: index, tile
// (M, N, K), cluster (M, N), ping-pong (else cooperative), and the name that the
// config, the database, the logs and an ncu profile all use (CUTLASS profiler
// style). Each (variant, dtype, flag) is one translation unit: add a row here and
// its files in meson.build, and keep the table short (≈1 minute of nvcc each).
//
// Why these (measured on the H100, docs/results.md): the logits GEMM is large in
// N (the vocabulary), so a 128×256 tile in the cooperative schedule with a 2×1
// cluster (the W tile multicast to both CTAs) is close to the shape cuBLASLt
// picks for it. Ping-pong tiles, where one warp group's epilogue runs under the
// other's mainloop, were slower at every shape (H100, 2026-11-23, the
// hand-written epilogue unchanged; `gpu_run.sh variants` times any row added
// here): forward, Llama-3-8B N = 4096, 64×256 7.55 ms and 128×128 7.40 ms
// against 6.38; forward+backward in 768-row chunks 23.15 and 22.86 against
// 21.93; Gemma-2-2B 27.28 and 26.39 against 25.52. Again with the one-pass
// softcapped epilogue (2026-11-24, H100, Gemma-2-2B N = 4096 forward): 8.07–8.13
// and 8.38–8.44 ms against 7.85–8.01; with the epilogue skipped, 7.83–7.93 and
// 8.22–8.28 against 6.56–6.71. Ping-pong does hide the epilogue, but its
// mainloop alone runs 17–25% slower than this one's. dW accumulates
// in place across row chunks with K = rows: at 896 rows a 128×128 ping-pong tile
// sat at 85% of L2 throughput, and a 256×128 cooperative tile whose 1×2 cluster
// multicasts the dZ slab halves that traffic (27.1 against 28.4 ms per step).
// But a cooperative dW runs its read-modify-write of dW after its mainloop, with
// the SMs idle on memory: cuBLASLt's beta = 1 kernel took 1.69–1.71 ms a
// 1024-row chunk of Llama-3-8B where beta = 0 took 1.42 (ncu, H100), and the
// CUTLASS row 0 no less. dW row 1, ping-pong 192×128 with the 1×2 cluster
// multicasting the dZ slab (M = V), runs one warp group's read-modify-write
// under the other's mainloop (kSm90PingpongDwVariant, the fused default's).
// Each row is four CUTLASS units (bf16, fp16 × dW in the output dtype or fp32).
//
// Row 1, ping-pong 128×192, is the default's wherever H ≥ 2048
// (kSm90PingpongLogitsVariant, flce/space.cpp): its A/B intensity is close to the
// cooperative tile's (40 KB of A and B a 128×192×64 step against 48 KB for
// 128×256×64 over two warp groups; the 64×256 and 128×128 ping-pong tiles above
// loaded 25–67% more a MAC), and each warp group's epilogue runs under the
// other's mainloop. Its 192 accumulators a thread leave the epilogue 40 of the
// 232 registers: ce_epilogue.cuh keeps no copy of ẑ and addresses each row from
// one pointer, without which ptxas spilled 10 KB and the tile-storing GEMM lost
// to row 0 (Gemma-2-2B forward+backward 31.2 against 24.0 ms). Without the
// spills, H100, 2026-11-24, rows in the same process: forward 0.96–0.99× one
// GEMM against 1.00–1.09× (Llama-3-8B and -70B, Gemma-2-2B, Qwen2.5-7B);
// forward+backward 1.09× the 3-GEMM floor against 1.16× (Llama-3-8B N = 16384),
// 1.08× against 1.13× (Llama-3-70B N = 8192). At GPT-2's H = 768, with little
// mainloop to hide an epilogue under, row 0 was then ahead (forward 1.11× against
// 1.19×); the forward has since gone the other way (below).
#pragma once

#include <climits>
#include <cstddef>
#include <cstdint>

#include "model/config.hpp"
#include "model/problem.hpp"

#define CELTUNE_SM90_LOGITS_VARIANTS(X)                   \
  X(0, 128, 256, 64, 2, 1, false, "128x256x64_2x1x1_coop") \
  X(1, 128, 192, 64, 2, 1, true, "128x192x64_2x1x1_pp")
#define CELTUNE_SM90_DW_VARIANTS(X)                       \
  X(0, 256, 128, 64, 1, 2, false, "256x128x64_1x2x1_coop") \
  X(1, 192, 128, 64, 1, 2, true, "192x128x64_1x2x1_pp")
// dX of the one pass (gemm_sm90.cuh's DxGemm: cooperative, stream-K; the
// cluster's two CTAs along M share the W tile). No row is the default: a config
// names one in dx_kernel, else dX runs on cuBLASLt. 128×256 with the 2×1
// cluster was the fastest of three tiles at 1024–1536 rows (scripts/probe/dx_gemm.cu,
// H200, sixty-third session).
#define CELTUNE_SM90_DX_VARIANTS(X) X(0, 128, 256, 64, 2, 1, false, "128x256x64_2x1x1_sk")

// The dW variant of the fused forward+backward default (flce/space.cpp): row 1,
// whose read-modify-write of dW runs under the other warp group's mainloop. Same
// process, 1024-row chunks, H100 / H200, × the 3-GEMM floor: Llama-3-8B N = 4096
// 1.064 / 1.052× against cuBLASLt's dW at 1.178 / 1.141×; N = 16384 1.023 /
// 1.007× against 1.126 / 1.101×; Llama-3-70B N = 8192 1.008 / 0.990× against
// 1.094 / 1.072× (docs/results.md, 2026-11-24, twenty-fourth session).
inline constexpr int kSm90PingpongDwVariant = 1;

// Where the fused forward+backward default runs dX on the CUTLASS row 0
// (stream-K) instead of cuBLASLt: the one pass with the GEMM workspace, and
// the row chunk's dX in that row's 128×256 tiles more than one wave of an
// H100 or H200's 132 SMs but filling the last wave less than 70%, where a
// data-parallel tiling idles SMs for a sweep of V. Same process, the shipped
// H200 rows against them with the stream-K dX, N = 8192 unless named, medians,
// ms (sixty-third session): Qwen2.5-7B (1536-row chunks: 12 × 14 = 168 tiles,
// 64% of two waves) 42.25 → 39.92, N = 4096 20.99 → 19.81, N = 16384 84.62 →
// 81.10; no better where the tiles fill their waves (Llama-3-8B, 2048 rows:
// 256 tiles, 38.89 / 38.81; Mistral-7B 10.25 / 10.24) and worse at Llama-3-70B
// (512 tiles: 77.85 → 81.36) and Gemma-2-2B (1024 rows at H = 2304, 72 tiles,
// under one wave: 44.74 → 46.08), where cuBLASLt picks its own narrower tiles.
inline constexpr long long kSm90DxStreamKSms = 132;
inline bool sm90_dx_stream_k(long long rows, long long hidden) {
  const long long tiles = (rows + 127) / 128 * ((hidden + 255) / 256);
  const long long waves = (tiles + kSm90DxStreamKSms - 1) / kSm90DxStreamKSms;
  return tiles > kSm90DxStreamKSms && tiles * 10 < waves * kSm90DxStreamKSms * 7;
}

// dW of impl fused may also run on cuBLASLt (its beta = 1 GEMM, as the cuBLASLt
// path runs it): a config names it so in dw_kernel. On the H100 at 896-row chunks
// of Llama-3-8B, cuBLASLt's 256x128 1x2 kernel took 1.34 ms a chunk against 1.55
// for the CUTLASS row below, while at other shapes the CUTLASS one may win: the
// tuner decides.
inline constexpr const char* kDwOnCublaslt = "cublaslt";

// The names alone, for code that must not depend on CUDA (the search space, the
// config checks): the same rows, so a name here always has a kernel there.
#define CELTUNE_SM90_NAME(idx, bm, bn, bk, cm, cn, pp, name) name,
inline constexpr const char* kSm90LogitsVariantNames[] = {CELTUNE_SM90_LOGITS_VARIANTS(CELTUNE_SM90_NAME)};
inline constexpr const char* kSm90DwVariantNames[] = {CELTUNE_SM90_DW_VARIANTS(CELTUNE_SM90_NAME)};
inline constexpr const char* kSm90DxVariantNames[] = {CELTUNE_SM90_DX_VARIANTS(CELTUNE_SM90_NAME)};
#undef CELTUNE_SM90_NAME
#define CELTUNE_SM90_BLOCK_M(idx, bm, bn, bk, cm, cn, pp, name) bm,
#define CELTUNE_SM90_BLOCK_N(idx, bm, bn, bk, cm, cn, pp, name) bn,
inline constexpr int kSm90LogitsBlockM[] = {CELTUNE_SM90_LOGITS_VARIANTS(CELTUNE_SM90_BLOCK_M)};
inline constexpr int kSm90LogitsBlockN[] = {CELTUNE_SM90_LOGITS_VARIANTS(CELTUNE_SM90_BLOCK_N)};
// Rows one cluster of the logits GEMM covers (BLOCK_M × cluster M): the
// persistent scheduler hands out whole clusters, so a row chunk that is not a
// multiple computes padding rows (896 rows ran as 1024 on the 2×1 cluster).
#define CELTUNE_SM90_CLUSTER_ROWS(idx, bm, bn, bk, cm, cn, pp, name) bm * cm,
inline constexpr int kSm90LogitsClusterRows[] = {CELTUNE_SM90_LOGITS_VARIANTS(CELTUNE_SM90_CLUSTER_ROWS)};
// The logits variant of the fused defaults where H ≥ kSm90PingpongMinHidden
// (flce/space.cpp): row 1 above says why. Below it the fused forward+backward
// default (from H = 768, kernels/space.cpp) takes row 0. Forward
// alone takes row 1 from kSm90PingpongMinHiddenForward: at GPT-2's shape
// (N = 8192, H = 768, V = 50257) it ran 5–8% ahead of row 0 on both GPUs
// (docs/results.md, thirty-sixth session).
inline constexpr int kSm90PingpongLogitsVariant = 1;
inline constexpr long long kSm90PingpongMinHidden = 2048;
inline constexpr long long kSm90PingpongMinHiddenForward = 768;
#undef CELTUNE_SM90_CLUSTER_ROWS
#undef CELTUNE_SM90_BLOCK_M
#undef CELTUNE_SM90_BLOCK_N

// The statistics partials of logits variant v over a [rows, cols] GEMM: one entry
// per row (padded to BLOCK_M) and per BLOCK_N columns (Sm90ColReduction's layout).
inline long long sm90_partial_rows(int v, long long rows) {
  const int bm = kSm90LogitsBlockM[v];
  return (rows + bm - 1) / bm * bm;
}
// Bytes of those partials per entry: max and Σexp as floats, and Σẑ (a third
// float) with label smoothing.
inline long long sm90_partial_bytes(bool label_smoothing) { return (label_smoothing ? 3 : 2) * 4; }
inline long long sm90_partial_tiles(int v, long long cols) {
  const int bn = kSm90LogitsBlockN[v];
  return (cols + bn - 1) / bn;
}

// Where the one-pass backward of impl fused runs without a dZ pass: the logits
// GEMM stores q = exp(ẑ − m_i)·g(ẑ) against a row reference m_i known before
// it runs, so dZ = a_i·q off the target with a_i = c_i·(1 + 2λL_i)·exp(m_i − L_i);
// the target's element is patched from its fp32 logit, X is scaled by a_i for dW
// and dX by a_i after its GEMM (flce.cu). It needs ε = 0 (the ε/V term is not a
// row factor of q) and bf16, whose exponent range holds q where fp16's does not.
// Two references:
// - A softcap s ≤ 32 bounds ẑ: m_i = s and g = 1 − (ẑ/s)², so q ≥ e^(−2s),
//   a_i ≤ c_i·e^64 keeps a_i·x inside bf16's range for any |x| below ~1e10, and
//   2λs < 1/2 keeps 1 + 2λL_i > 1/2 (L_i > −s). Gemma 2 caps at 30.
// - No softcap (g = 1): m_i is the max over kSm90RefSamples columns spread over
//   V, raised by kSm90RefLift; a tile whose row max lies more than
//   kSm90RefSpan above m_i stores that row against its own max instead, and
//   scaled_dz_rows brings such a row back to one reference (ce.hpp). So
//   q ≤ e^kSm90RefSpan, Σq ≤ e^(kSm90RefSpan + ln V), and a_i lies between
//   c_i·e^(−kSm90RefSpan − ln V) and c_i·e^kSm90RefLift: nothing overflows, and
//   q stays a normal bf16 down to p ≈ e^(−87 + kSm90RefLift). λ = 0:
//   without a bound on L, 1 + 2λL may vanish, and the patch divides by a_i.
inline constexpr double kSm90ScaledDzMaxSoftcap = 32.0;
inline bool sm90_scaled_dz(bool bf16, double softcap, double label_smoothing, double z_loss) {
  if (!bf16 || label_smoothing != 0.0) return false;
  if (softcap == 0.0) return z_loss == 0.0;
  return softcap > 0.0 && softcap <= kSm90ScaledDzMaxSoftcap && 2.0 * z_loss * softcap < 0.5;
}
// The sampled reference of the no-softcap case (above; ce_epilogue.cuh, stats.cu).
// 128 columns cost a GEMM of 1/1000 of the logits' at Llama-3's V. The lift puts
// m_i nearer L_i (the row max of random logits of scale σ lies ~2σ above the
// max of 128 samples at V = 128256), so rows of logits spread over ~50 nats keep
// the one reference.
inline constexpr int kSm90RefSamples = 128;
inline constexpr float kSm90RefLift = 12.0f, kSm90RefSpan = 40.0f;
inline bool sm90_sampled_ref(double softcap) { return softcap == 0.0; }

// The same for a problem and config: a fused forward+backward in one pass, of
// tokens and targets that target_rows_add's 32-bit sort keys and rows hold (a
// larger problem takes the dZ pass; found here, before any launch).
inline bool sm90_scaled_dz(const celtune::Problem& p, const celtune::KernelConfig& c) {
  using namespace celtune;
  return p.family == Family::flce && c.impl == KernelConfig::Impl::fused && p.mode == Mode::forward_backward &&
         c.one_pass(p) && p.tokens <= INT32_MAX && p.vocab < INT32_MAX &&
         sm90_scaled_dz(p.dtype == DType::bf16, p.loss.softcap, p.loss.label_smoothing, p.loss.z_loss);
}

// target_rows_add's scratch (ce.hpp), which the no-dZ-pass path lays in its tile
// after the last chunk, and which space.cpp's seeds count: the keys and rows
// twice over (the sort's double buffers), the sort's own temporary storage
// (bounded here; run_flce checks CUB's query against it before any launch, since
// the query needs a device and this layout does not), and two slots of hidden
// floats a piece of kSm90TargetPiece sorted tokens. CUB's onesweep asks a few KiB
// of bins and counters and 256 digits' lookback words a tile of thousands of
// keys; its older passes a spine of 256 counters a block of their grid: 4 MiB +
// 4 bytes a key holds either. About 4 MiB + 20·N + N·H/16 bytes in all.
inline constexpr int64_t kSm90TargetPiece = 128;
struct Sm90TargetScratch {
  size_t keys = 0, rows = 0, temp = 0, temp_bytes = 0, part = 0, part_t = 0, total = 0;
  Sm90TargetScratch(int64_t tokens, int64_t hidden) {
    const auto n = static_cast<size_t>(tokens);
    const auto pieces = static_cast<size_t>((tokens + kSm90TargetPiece - 1) / kSm90TargetPiece);
    auto take = [&](size_t bytes) {
      const size_t at = total;
      total += (bytes + 255) / 256 * 256;
      return at;
    };
    keys = take(2 * n * sizeof(unsigned));
    rows = take(2 * n * sizeof(unsigned));
    temp_bytes = (size_t{4} << 20) + 4 * n;
    temp = take(temp_bytes);
    part = take(pieces * 2 * static_cast<size_t>(hidden) * sizeof(float));
    part_t = take(pieces * 2 * sizeof(float));
  }
};

// Up to this softcap the epilogue sums exp(ẑ − s) in one pass, with s as every
// row's reference instead of its max (ce_epilogue.cuh): ẑ ≤ s, and
// exp(ẑ − s) ≥ e^(−2s) stays a normal float (e^(−80) ≈ 1.8e-35 > FLT_MIN).
// With a softcap the scaled store builds q from those terms, so it needs this path.
inline constexpr float kSm90FixedReferenceMaxSoftcap = 40.0f;
static_assert(kSm90ScaledDzMaxSoftcap <= kSm90FixedReferenceMaxSoftcap);

// Entry points defined by the translation units.
#define CELTUNE_SM90_LOGITS_FN(idx, dt, store) logits_v##idx##_##dt##_##store
#define CELTUNE_SM90_DW_FN(idx, dt, out) dw_v##idx##_##dt##_##out
#define CELTUNE_SM90_DX_FN(idx, dt) dx_v##idx##_##dt
