/* A training job's use of libceltune, in C: fused linear cross-entropy forward
 * and backward for one shape, the config resolved from the database (or the
 * built-in default), and the loss checked against a plain fp64 loop.
 *
 * Build with pkg-config alone, against an install built with CUDA (its
 * celtune.pc carries the CUDA runtime's flags; a CPU-only build's has none, and
 * this example calls the CUDA runtime itself):
 *   cc flce_example.c $(pkg-config --cflags --libs celtune) -lm -o flce_example
 * Exit: 0 loss matches, 1 it does not, 77 no CUDA device. */
#include <celtune/celtune.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { N = 128, H = 256, V = 32000 };

static uint16_t to_bf16(float f) { /* round to nearest even */
  uint32_t u;
  memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}
static float from_bf16(uint16_t b) {
  uint32_t u = (uint32_t)b << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static uint64_t state = 42;
static float uniform(void) { /* in [-1, 1) */
  state = state * 6364136223846793005ull + 1442695040888963407ull;
  return (float)((state >> 40) & 0xffffff) / 8388608.0f - 1.0f;
}

#define CUDA(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
  fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e_)); return 1; } } while (0)

int main(void) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    printf("flce_example: no CUDA device, nothing to run\n");
    return 77;
  }
  uint16_t* x = malloc(sizeof(uint16_t) * N * H);
  uint16_t* w = malloc(sizeof(uint16_t) * V * H);
  int64_t* y = malloc(sizeof(int64_t) * N);
  for (int i = 0; i < N * H; ++i) x[i] = to_bf16(uniform());
  for (long i = 0; i < (long)V * H; ++i) w[i] = to_bf16(uniform() * 0.2f);
  for (int i = 0; i < N; ++i) y[i] = (i % 7 == 3) ? -100 : (int64_t)((state = state * 6364136223846793005ull + 1) >> 33) % V;

  void *dx_in, *dw_in, *dy, *ddx, *ddw;
  float *dloss, *dtok, *dlse, *dg;
  CUDA(cudaMalloc(&dx_in, sizeof(uint16_t) * N * H));
  CUDA(cudaMalloc(&dw_in, sizeof(uint16_t) * V * H));
  CUDA(cudaMalloc(&dy, sizeof(int64_t) * N));
  CUDA(cudaMalloc(&ddx, sizeof(uint16_t) * N * H));
  CUDA(cudaMalloc(&ddw, sizeof(uint16_t) * V * H));
  CUDA(cudaMalloc((void**)&dloss, 4));
  CUDA(cudaMalloc((void**)&dtok, 4 * N));
  CUDA(cudaMalloc((void**)&dlse, 4 * N));
  CUDA(cudaMalloc((void**)&dg, 4));
  const float one = 1.0f;
  CUDA(cudaMemcpy(dx_in, x, sizeof(uint16_t) * N * H, cudaMemcpyHostToDevice));
  CUDA(cudaMemcpy(dw_in, w, sizeof(uint16_t) * V * H, cudaMemcpyHostToDevice));
  CUDA(cudaMemcpy(dy, y, sizeof(int64_t) * N, cudaMemcpyHostToDevice));
  CUDA(cudaMemcpy(dg, &one, 4, cudaMemcpyHostToDevice));

  celtune_context* ctx = NULL;
  if (celtune_create(&ctx, NULL) != CELTUNE_OK) {
    fprintf(stderr, "celtune_create failed: %s\n", celtune_last_error(NULL));
    return 1;
  }
  celtune_flce_args a;
  memset(&a, 0, sizeof a);
  a.tokens = N, a.hidden = H, a.vocab = V;
  a.dtype = CELTUNE_BF16, a.target_dtype = CELTUNE_INT64, a.mode = CELTUNE_FORWARD_BACKWARD;
  celtune_loss_defaults(&a.options);
  a.x = dx_in, a.w = dw_in, a.targets = dy, a.grad_scale = dg;
  a.loss = dloss, a.token_loss = dtok, a.lse = dlse, a.dx = ddx, a.dw = ddw;
  char json[512], tag[32];
  celtune_flce_config(ctx, &a, json, sizeof json, tag, sizeof tag);
  printf("celtune %s: config %s [%s]\n", celtune_version(), json, tag);
  if (celtune_flce(ctx, &a, NULL) != CELTUNE_OK) {
    fprintf(stderr, "celtune_flce: %s\n", celtune_last_error(ctx));
    return 1;
  }
  float loss = 0;
  CUDA(cudaMemcpy(&loss, dloss, 4, cudaMemcpyDeviceToHost));

  /* The reference: fp64 over the same bf16 inputs, mean over valid tokens. */
  double total = 0;
  int valid = 0;
  double* z = malloc(sizeof(double) * V);
  for (int i = 0; i < N; ++i) {
    if (y[i] == -100) continue;
    double m = -INFINITY, s = 0;
    for (int j = 0; j < V; ++j) {
      double acc = 0;
      for (int k = 0; k < H; ++k) acc += (double)from_bf16(x[i * H + k]) * from_bf16(w[(long)j * H + k]);
      z[j] = acc;
      if (acc > m) m = acc;
    }
    for (int j = 0; j < V; ++j) s += exp(z[j] - m);
    total += m + log(s) - z[y[i]];
    ++valid;
  }
  const double ref = total / valid;
  const double rel = fabs(loss - ref) / fabs(ref);
  /* bf16 logits carry ~2^-9 relative error; the loss averages it down. */
  printf("loss %.6f, fp64 reference %.6f, relative difference %.2e: %s\n", loss, ref, rel, rel < 5e-3 ? "ok" : "MISMATCH");
  celtune_destroy(ctx);
  return rel < 5e-3 ? 0 : 1;
}
