// One instantiation of the fused dX GEMM (variants.hpp, row 0): fp16, stream-K.
#include "kernels/flce/sm90/instantiate.cuh"
CELTUNE_SM90_DEFINE_DX(0, fp16, __half)
