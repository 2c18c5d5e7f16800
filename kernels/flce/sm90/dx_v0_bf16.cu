// One instantiation of the fused dX GEMM (variants.hpp, row 0): bf16, stream-K.
#include "kernels/flce/sm90/instantiate.cuh"
CELTUNE_SM90_DEFINE_DX(0, bf16, __nv_bfloat16)
