// The CE statistics as a CUTLASS 3 epilogue visitor tree (EVT), on stock nodes.
//
// Per output element the tree computes ẑ = softcap(round(acc) + b) and feeds two
// column reductions (CUTLASS's Sm90ColReduction reduces along N, one value per
// row of the tile) in their non-final form, which writes one partial per row and
// BLOCK_N columns to [tiles_n][rows_pad] without atomics:
//   - the online-softmax pair (m, d) = (max ẑ, Σ exp(ẑ − m)) (flce-math.md step 3),
//     as a custom element type LsePair with its ⊕ as the reduction;
//   - Σ ẑ for label smoothing (a plain sum; a null pointer turns it off at run time).
// The root returns round(acc), so the variant that stores the tile writes the raw
// logits in the input dtype, exactly what the cuBLASLt path writes; the dZ kernel
// applies bias and softcap itself. Rounding before the statistics makes the LSE
// that of the stored logits, so p = exp(ẑ − L) sums to one over what dZ reads.
//
// Only this file knows CUTLASS's visitor interface: a CUTLASS upgrade touches it.
#pragma once

#include <cmath>

#include "cutlass/epilogue/fusion/sm90_callbacks_tma_warpspecialized.hpp"
#include "cutlass/epilogue/thread/activation.h"
#include "cutlass/functional.h"
#include "cutlass/numeric_conversion.h"
#include "kernels/flce/sm90/fused.hpp"

namespace celtune::cuda::sm90 {

// A finished pair element built from one logit: (ẑ, 1). The reductions start from
// the identity (−inf, 0), set in the arguments.
struct LseElem : LsePair {
  LseElem() = default;
  CUTLASS_HOST_DEVICE explicit LseElem(float z) : LsePair{z, 1.0f} {}
  CUTLASS_HOST_DEVICE LseElem(float m_, float d_) : LsePair{m_, d_} {}
};
static_assert(sizeof(LseElem) == 8, "shuffled as one 64-bit word by Sm90ColReduction");

// (m1,d1) ⊕ (m2,d2) with one exp: the larger max keeps its sum, the other is
// rescaled. An empty side (d = 0: one real logit gives d ≥ 1) is skipped, so two
// empty sides stay empty instead of giving exp(−inf + inf) = NaN. A NaN logit
// (NaN, 1) never compares greater, so it reaches d through the exp, and a row
// whose d is NaN stays NaN through every later merge: NaN in, NaN loss out.
CUTLASS_DEVICE LseElem lse_merge(LseElem a, LseElem b) {
  if (b.d == 0.0f) return a;
  if (b.m > a.m) return LseElem(b.m, a.d * __expf(a.m - b.m) + b.d);
  return LseElem(a.m, a.d + b.d * __expf(b.m - a.m));
}

// Sm90ColReduction asks for the reduction as a template over the element type:
// used on LseElem in registers and on one-element arrays in shuffles and smem.
template <class T>
struct LseMerge;
template <>
struct LseMerge<LseElem> {
  CUTLASS_DEVICE LseElem operator()(LseElem a, LseElem b) const { return lse_merge(a, b); }
};
template <int N>
struct LseMerge<cutlass::Array<LseElem, N>> {
  CUTLASS_DEVICE cutlass::Array<LseElem, N> operator()(cutlass::Array<LseElem, N> const& a,
                                                            cutlass::Array<LseElem, N> const& b) const {
    cutlass::Array<LseElem, N> out;
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < N; ++i) out[i] = lse_merge(a[i], b[i]);
    return out;
  }
};

// ẑ = softcap(z + b), z already rounded to the input dtype (flce-math.md step 2).
struct CeLogitArgs {
  float softcap = 0.0f;  // 0: off
};
template <class T>
struct CeLogit {
  using Arguments = CeLogitArgs;
  CUTLASS_HOST_DEVICE T operator()(T z, T b, Arguments const& a) const {
    T out;
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < int(out.size()); ++i) {
      const float v = z[i] + b[i];
      out[i] = a.softcap > 0.0f ? a.softcap * tanhf(v / a.softcap) : v;
    }
    return out;
  }
};

// The root's combiner: pass the first input (the rounded logits) through; the
// second input is the reductions' subtree, evaluated for its side effects.
template <class T>
struct TakeFirst {
  CUTLASS_HOST_DEVICE T operator()(T a, T) const { return a; }
};

namespace fusion = cutlass::epilogue::fusion;

template <class Element, class CtaTile, bool StoreTile>
struct CeStatsTree {
  static constexpr auto RN = cutlass::FloatRoundStyle::round_to_nearest;
  using Rounded = fusion::Sm90EVT<fusion::Sm90Compute<cutlass::epilogue::thread::Identity, Element, float, RN>,
                                  fusion::Sm90AccFetch>;
  using Bias = fusion::Sm90RowBroadcast<0, CtaTile, Element, float, cute::Stride<cute::_0, cute::_1, int64_t>>;
  using Logit = fusion::Sm90EVT<fusion::Sm90Compute<CeLogit, float, float, RN>, Rounded, Bias>;
  using Lse = fusion::Sm90EVT<fusion::Sm90ColReduction<LseMerge, LseMerge, LseMerge, 0, CtaTile, LseElem, LseElem, RN,
                                                       cute::Stride<cute::_1, cute::_0, int64_t>, 2, true, false>,
                              Logit>;
  using SumZNode = fusion::Sm90ColReduction<cutlass::plus, cutlass::plus, cutlass::plus, 0, CtaTile, float, float, RN,
                                            cute::Stride<cute::_1, cute::_0, int64_t>, 4, true, false>;
  // The statistics-only kernel stores no D (ElementD void). CUTLASS's epilogue
  // then sizes its staging from the tree's auxiliary output type, which a tree
  // of reductions does not have: name the input dtype (nothing is staged).
  struct SumZNodeAux : SumZNode {
    using SumZNode::SumZNode;
    using ElementAux = Element;
  };
  using SumZ = fusion::Sm90EVT<cute::conditional_t<StoreTile, SumZNode, SumZNodeAux>, Lse>;
  using Root = cute::conditional_t<StoreTile, fusion::Sm90EVT<fusion::Sm90Compute<TakeFirst, Element, float, RN>, Rounded, SumZ>,
                                   SumZ>;

  // Arguments mirror the tree: each node's children first, then its own.
  static auto rounded_args() { return typename Rounded::Arguments{{}, {}}; }
  static auto sumz_args(const LogitsArgs& a) {
    typename Logit::Arguments logit{rounded_args(),
                                    {static_cast<const Element*>(a.bias), Element(0), {cute::_0{}, cute::_1{}, 0}},
                                    CeLogitArgs{a.softcap}};
    typename Lse::Arguments lse{logit, {a.lse_partials, LseElem(-INFINITY, 0.0f), {}}};
    return typename SumZ::Arguments{lse, {a.sumz_partials, 0.0f, {}}};
  }
  static typename Root::Arguments args(const LogitsArgs& a) {
    if constexpr (StoreTile)
      return {rounded_args(), sumz_args(a), {}};
    else
      return sumz_args(a);
  }
};

}  // namespace celtune::cuda::sm90

// The generic converter static_casts; LseElem's explicit constructor from a logit
// is that cast, so no specialisation of NumericConverter is needed.
