// The one interface between everything above the kernels (validate, bench, tune,
// the runtime) and an implementation of both kernel families on one device.
//
// Backends receive a Problem and a KernelConfig and never see the database.
// Two exist: the CPU backend (kernels/cpu), which runs the same chunked algorithm
// as the GPU in fp32, and the CUDA backend (kernels/cuda.*), built when CUDA is.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "model/config.hpp"
#include "model/device.hpp"
#include "model/host_case.hpp"
#include "model/problem.hpp"

namespace celtune {

// Inputs and outputs resident on the backend's device, so that timing measures the
// kernels alone. Created by Backend::prepare, run any number of times.
class Workload {
 public:
  virtual ~Workload() = default;
  // Runs once; returns the elapsed time in milliseconds as the backend measures it
  // (CUDA events around the work on a GPU, a steady clock on the CPU).
  virtual double run_timed(const KernelConfig& c) = 0;
  // Evicts the inputs from the caches that would otherwise make repeat runs
  // faster than a real training step (the GPU's L2).
  virtual void flush_caches() {}
};

// Ceilings measured on the device in the same run, for bench's ratios.
struct Floors {
  bool available = false;
  int gemms = 0;  // the GEMMs the mode needs (logits, dX, dW), full size: prepare_floor times them
  // The vocabulary width the GEMMs were timed at: V rounded up to a multiple of
  // 128. A full-width GEMM at an odd V (GPT-2's 50257) falls off cuBLASLt's fast
  // kernels and would make a fake-slow floor; a good implementation pays for
  // aligned widths (padding or an aligned chunk plus a ragged one), so that is
  // the floor. Equal to V when V is already aligned.
  int64_t gemm_vocab = 0;
  double copy_gb_per_s = 0;     // device-to-device copy, bytes read + written per second
  // The ce floors' second half: one device-to-device copy moving the same bytes
  // as ce (forward: N·V elements read; forward+backward: read and written), timed
  // the same way. At a few rows the launch and DRAM latency, not bandwidth, set
  // what any kernel can do; the floor is the larger of this and bytes at
  // copy_gb_per_s. 0 where not measured (the copies beyond 1 GiB, where
  // bandwidth alone decides).
  double ce_copy_ms[2] = {0, 0};  // [0] forward, [1] forward+backward
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const DeviceInfo& device() const = 0;

  // Throws Error(usage) with the reason if this backend cannot run the config for
  // the problem (beyond validate_config: its compiled table, alignment, limits).
  virtual void check(const Problem& p, const KernelConfig& c) const = 0;
  // check() as a predicate, the reason in *why: what search spaces filter with.
  bool supports(const Problem& p, const KernelConfig& c, std::string* why = nullptr) const;

  // The cuBLASLt algorithms each GEMM role (logits, dX, dW) of a config could
  // take: the heuristic's first k at the config's full-chunk shapes, serialised,
  // [0] being what an empty gemm_algos runs. Empty where there are no GEMMs (the
  // CPU backend, the ce family); the tuner then has nothing to choose.
  virtual std::vector<std::vector<std::string>> gemm_candidates(const Problem&, const KernelConfig&, int /*k*/) {
    return {};
  }

  // Device scratch a config needs beyond inputs and outputs (the tuner's budget).
  virtual size_t scratch_bytes(const Problem& p, const KernelConfig& c) const = 0;

  // Runs once on host inputs and returns host outputs. Outputs are poisoned (NaN)
  // on the device before the run, so an element never written stays NaN.
  virtual HostOutputs run(const Problem& p, const KernelConfig& c, const HostCase& in) = 0;

  // Random inputs resident on the device for timing.
  virtual std::unique_ptr<Workload> prepare(const Problem& p, uint64_t seed) = 0;

  // Copy-bandwidth floors for a problem, and what the GEMM floor is (GPU backends only).
  virtual Floors measure_floors(const Problem&) { return {}; }
  // The GEMM floor as a workload: one run is each GEMM of Floors::gemms, one
  // after another, on random inputs (the config is ignored), so that bench times
  // it in rounds with the configs it is compared with. Both GPUs run these GEMMs
  // at their power limit and the clock drifts over a run: timed apart, the same
  // floor GEMM took 6.13 and 6.59 ms in two processes (H100, 2026-11-24). Null
  // where there is none.
  virtual std::unique_ptr<Workload> prepare_floor(const Problem&) { return nullptr; }

  // The SM clock now, in MHz, read without changing anything (0 where unknown).
  virtual double sm_clock_mhz() { return 0; }
};

// "cpu", a CUDA ordinal ("0", "cuda:0"), or "" for the default: the first CUDA GPU,
// else the CPU. Throws Error(environment) for a device that does not exist.
std::unique_ptr<Backend> open_backend(const std::string& device);

// Every device this build can run on: CUDA GPUs first, then the CPU.
std::vector<DeviceInfo> list_devices();

// Whether this build has the CUDA backend, and whether a CUDA GPU is present.
bool cuda_built();
int cuda_device_count();

}  // namespace celtune
