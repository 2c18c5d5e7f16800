// One instantiation of the fused dW GEMM (variants.hpp, row 1): bf16 inputs, dW in the input dtype.
#include "kernels/flce/sm90/instantiate.cuh"
CELTUNE_SM90_DEFINE_DW(1, bf16, __nv_bfloat16, out, false)
