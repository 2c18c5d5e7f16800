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
  if (p.family == Family::flce && p.mode == Mode::forward && p.dtype != DType::fp32 && runs) {
    const KernelConfig f = flce_fused_forward(p);
    if (runs(f)) return f;
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
