// One instantiation of the fused logits GEMM (variants.hpp, row 1): fp16, storing the logits tile.
#include "kernels/flce/sm90/instantiate.cuh"
CELTUNE_SM90_DEFINE_LOGITS(1, fp16, __half, tile, true)
