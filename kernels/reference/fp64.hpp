// The fp64 CPU reference of both kernel families: the truth for small shapes.
//
// Written to be read next to ../shared/reference/flce-math.md, step for step, with
// no chunking, tiling or online softmax: a plain row-by-row loop in double.
//
// `emulate_dtype` turns it into the unfused low-precision path that PyTorch eager
// runs: logits rounded to the input dtype, the loss in high precision, dZ rounded
// to the input dtype before the gradient GEMMs, gradients rounded on output. Its
// error against the plain reference is how much error is normal for the dtype.
#pragma once

#include "model/host_case.hpp"
#include "model/problem.hpp"

namespace celtune::reference {

// Throws Error(usage) for a target outside [0, V) that is not ignore_index.
// lse_offset (N values, or null): each row's L moved by that much before the
// loss and dZ are formed from it, as a kernel whose LSE is off by that much
// forms them (validate measures what an fp32 LSE's rounding moves).
RefOutputs run(const Problem& p, const HostCase& c, bool emulate_dtype = false, const double* lse_offset = nullptr);

}  // namespace celtune::reference
