// One instantiation of the fused dW GEMM (variants.hpp, row 1): fp16 inputs, dW in fp32 scratch.
#include "kernels/flce/sm90/instantiate.cuh"
CELTUNE_SM90_DEFINE_DW(1, fp16, __half, f32, true)
