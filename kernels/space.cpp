#include "space.hpp"

#include "model/error.hpp"

namespace celtune {

KernelConfig SearchSpace::at(const std::vector<size_t>& index) const {
  KernelConfig c;
  for (size_t i = 0; i < params.size(); ++i) params[i].set(c, params[i].values[index[i]]);
  return c;
}

SearchSpace space_for(const Problem& p) { return p.family == Family::ce ? ce_space(p) : flce_space(p); }

KernelConfig device_default(const Problem& p, const std::function<bool(const KernelConfig&)>& runs) {
  if (p.family == Family::ce && runs) {
    // The spread path where the GPU holds its grid, else the cluster path.
    for (const std::optional<KernelConfig>& f : {ce_spread_default(p), ce_fused_default(p)})
      if (f && runs(*f)) return *f;
  }
  if (p.family == Family::flce && p.dtype != DType::fp32 && runs) {
    // Forward+backward: from the shipped databases of kernel hash
    // 58e9598bef4af120 (five presets, N = 1024…32768, H100 and H200), the fused
    // seed was the best or within 1% of it at every Llama-3-8B and -70B shape
    // (H = 4096, 8192; V = 128256), where the cuBLASLt default ran up to 1.17×
    // the best at N = 1024; at Gemma-2-2B (H = 2304) it lost 5–17%, at
    // Mistral-7B (V = 32768) up to 7%, so those keep the cuBLASLt default.
    const bool fused_bwd = p.mode == Mode::forward_backward && p.hidden >= 4096 && p.vocab >= 65536;
    if (p.mode == Mode::forward || fused_bwd) {
      const KernelConfig f = p.mode == Mode::forward ? flce_fused_forward(p) : flce_fused_forward_backward(p);
      if (runs(f)) return f;
    }
  }
  return default_config(p);
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
