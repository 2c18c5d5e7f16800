// The runtime's lookup costs: the first lookup of a context (which opens the
// database read-only) and a cached lookup, through the C API and through the
// resolver as a GPU with current rows in the database sees it (an exact hit:
// the first of the H100 and the H200 whose rows this build's kernels tuned; a
// GPU whose rows are stale borrows another's, same-arch, and is not what this
// measures). Prints medians; the bars (2 µs cached, 5 ms first) live here, not
// in a timed test.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <sstream>
#include <vector>

#include "celtune/celtune.h"
#include "kernels/kernel_hash.hpp"
#include "runtime/resolve.hpp"

using Clock = std::chrono::steady_clock;

static double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: lookup_bench DB\n");
    return 2;
  }
  const std::string db = argv[1];
  celtune::Problem p;
  p.tokens = 8192, p.hidden = 4096, p.vocab = 128256;
  std::ostringstream warn;
  celtune::DeviceInfo gpu;
  gpu.arch = "sm_90", gpu.cublaslt_version = 130100;
  for (const char* name : {"NVIDIA H100 80GB HBM3", "NVIDIA H200"}) {
    gpu.name = name;
    if (celtune::runtime::Resolver(db, gpu, kKernelSourceHash, warn).resolve(p, nullptr).source ==
        celtune::runtime::Source::exact)
      break;
  }
  std::printf("device: %s\n", gpu.name.c_str());

  std::vector<double> first, cached;
  for (int rep = 0; rep < 50; ++rep) {  // a fresh resolver each time: open + query
    celtune::runtime::Resolver r(db, gpu, kKernelSourceHash, warn);
    const auto t0 = Clock::now();
    const auto got = r.resolve(p, nullptr);
    first.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    if (got.source != celtune::runtime::Source::exact) {
      std::fprintf(stderr, "expected an exact hit (the H100's or the H200's rows at this build's kernel hash %s), got %s\n",
                   kKernelSourceHash, celtune::runtime::to_string(got.source));
      return 1;
    }
  }
  celtune::runtime::Resolver r(db, gpu, kKernelSourceHash, warn);
  r.resolve(p, nullptr);
  for (int rep = 0; rep < 21; ++rep) {
    const int n = 100000;
    const auto t0 = Clock::now();
    for (int i = 0; i < n; ++i) r.resolve(p, nullptr);
    cached.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / n);
  }
  // Through the C API (context lock, argument checks, key building, cache).
  celtune_context* ctx = nullptr;
  if (celtune_create(&ctx, db.c_str()) != CELTUNE_OK) return 1;
  celtune_flce_args a{};
  a.tokens = 8192, a.hidden = 4096, a.vocab = 128256, a.dtype = CELTUNE_BF16, a.target_dtype = CELTUNE_INT64;
  a.mode = CELTUNE_FORWARD_BACKWARD;
  celtune_loss_defaults(&a.options);
  char json[512], tag[32];
  std::vector<double> api;
  for (int rep = 0; rep < 21; ++rep) {
    const int n = 100000;
    const auto t0 = Clock::now();
    for (int i = 0; i < n; ++i) celtune_flce_config(ctx, &a, json, sizeof json, tag, sizeof tag);
    api.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / n);
  }
  celtune_destroy(ctx);
  std::printf("first lookup (open + query, exact hit): median %.1f us over %zu fresh resolvers (bar: 5000 us)\n",
              median(first), first.size());
  std::printf("cached lookup (resolver):               median %.3f us (bar: 2 us)\n", median(cached));
  std::printf("cached lookup (C API, celtune_flce_config): median %.3f us (bar: 2 us)\n", median(api));
  return 0;
}
