#include "space.hpp"

#include "kernels/flce/sm90/variants.hpp"
#include "model/error.hpp"

namespace celtune {

KernelConfig SearchSpace::at(const std::vector<size_t>& index) const {
  KernelConfig c;
  for (size_t i = 0; i < params.size(); ++i) params[i].set(c, params[i].values[index[i]]);
  return c;
}

SearchSpace space_for(const Problem& p) { return p.family == Family::ce ? ce_space(p) : flce_space(p); }

KernelConfig device_default(const Problem& p, const std::function<bool(const KernelConfig&)>& runs,
                            size_t budget) {
  if (p.family == Family::ce && runs) {
    // The spread path where the GPU holds its grid, else the cluster path.
    for (const std::optional<KernelConfig>& f : {ce_spread_default(p), ce_fused_default(p)})
      if (f && runs(*f)) return *f;
  }
  if (p.family == Family::flce && p.dtype != DType::fp32 && runs) {
    // Forward+backward: the fused seed (flce_fused_forward_backward: the
    // ping-pong dW row, and the ping-pong logits row where H ≥
    // kSm90PingpongMinHidden) wherever H ≥ kFusedBwdMinHidden and its row chunks
    // (whole rows, or 512 or more) keep dW's GEMM, K = rows, ahead of its
    // read-modify-write of dW: 2·rows FLOPs a dW element against 4 bytes, and
    // an H100 does ~300 FLOPs a byte it moves, so below ~600 rows that traffic
    // bounds the GEMM. Same process, × the 3-GEMM floor, the cuBLASLt default
    // against the fused default, N = 4096 (H100 / H200, 2026-11-24): Qwen2.5-7B
    // (768 rows) 1.248 / 1.206 against 1.212 / 1.130×, Mistral-7B (V = 32768)
    // 1.111 / 1.106 against 1.060 / 1.049×; Llama-3-8B (1024 rows) fused with
    // dW on cuBLASLt 1.178 / 1.141× against 1.064 / 1.052×. Gemma-2-2B's
    // 256000 columns left 256 rows in 256 MiB: 1.548 against 1.887× (H100),
    // so there it kept the cuBLASLt default; within 512 MiB the fused seed has
    // 1024 rows and it takes that. From H = 768 the fused seed is ahead
    // since the logits GEMM stores its tile 16 bytes a lane (ce_epilogue.cuh),
    // where a short mainloop had left that store exposed (H200 before it, GPT-2
    // N = 8192: 1.535 against the cuBLASLt default's 1.479×). H100, forty-third
    // session, the medians of three rounds of each default: GPT-2's H = 768, V
    // = 50257, N = 1024…32768, 1.26–1.32× against 1.47–1.59× (12–15% less
    // time); H = 1024, V = 32000 and 50257, 1.17–1.23× against 1.33–1.41×; H =
    // 768, V = 32000, 1.22 against 1.39×; H = 1536, V = 128256, 1.19 against
    // 1.36×; at V = 151936 (512-row chunks) H = 896 and 1536, 1.30–1.44×
    // against 1.37–1.48×. Below H = 768 nothing was measured.
    constexpr int64_t kFusedBwdMinRows = 512;
    constexpr int64_t kFusedBwdMinHidden = 768;
    if (p.mode == Mode::forward) {
      const KernelConfig f = flce_fused_forward(p);
      if (runs(f)) return f;
    } else if (p.hidden >= kFusedBwdMinHidden) {
      const KernelConfig f = flce_fused_forward_backward(p, budget);
      if ((f.row_chunk == 0 || f.row_chunk >= kFusedBwdMinRows) && runs(f)) return f;
    }
  }
  return default_config(p, budget);
}

std::vector<Candidate> enumerate(const SearchSpace& s, const Problem& p, const SpaceLimits& limits,
                                 size_t* rejected) {
  std::vector<Candidate> out;
  size_t dropped = 0;
  std::vector<size_t> idx(s.params.size(), 0);
  for (;;) {
    KernelConfig c = s.at(idx);
    // Chunks at or beyond the problem mean "all of it": one spelling per config.
    if (c.v_chunk >= p.vocab) c.v_chunk = 0;
    if (c.row_chunk >= p.tokens) c.row_chunk = 0;
    bool ok = true;
    try {
      validate_config(p, c);
    } catch (const Error&) {
      ok = false;
    }
    if (ok && s.constraint) ok = s.constraint(p, c, nullptr);
    if (ok && limits.supported) ok = limits.supported(p, c, nullptr);
    if (ok && limits.scratch_bytes) ok = limits.scratch_bytes(p, c) <= limits.max_scratch;
    // Different grid points can name the same config (a v_chunk ≥ V is "all of V"):
    // keep the first.
    if (ok)
      for (const auto& o : out)
        if (o.config == c) ok = false;
    if (ok)
      out.push_back({idx, c});
    else
      ++dropped;
    size_t k = 0;
    for (; k < idx.size(); ++k) {
      if (++idx[k] < s.params[k].values.size()) break;
      idx[k] = 0;
    }
    if (k == idx.size()) break;
  }
  if (rejected) *rejected = dropped;
  return out;
}

}  // namespace celtune
