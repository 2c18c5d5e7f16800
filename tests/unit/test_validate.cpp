// validate's criteria at their edges: a correct kernel whose output cancels
// passes; a kernel worse than the plain path still fails.
#include <doctest/doctest.h>

#include <algorithm>
#include <functional>
#include <string>

#include "kernels/cpu/cpu_backend.hpp"
#include "kernels/reference/fp64.hpp"
#include "validate/validate.hpp"

using namespace celtune;

namespace {

ValidationCase case_for(const std::string& key, uint64_t seed) {
  ValidationCase vc;
  vc.problem = Problem::from_key(key);
  vc.config = default_config(vc.problem);
  vc.spec.seed = seed;
  vc.name = key;
  return vc;
}

const OutputVerdict& verdict(const CaseResult& r, const std::string& name) {
  const auto it =
      std::find_if(r.outputs.begin(), r.outputs.end(), [&](const OutputVerdict& o) { return o.name == name; });
  REQUIRE(it != r.outputs.end());
  return *it;
}

// The CPU backend with something wrong on purpose: its inputs or outputs changed.
class WrongKernel : public Backend {
 public:
  std::function<void(HostCase&)> inputs = [](HostCase&) {};
  std::function<void(const Problem&, HostOutputs&)> outputs = [](const Problem&, HostOutputs&) {};

  const DeviceInfo& device() const override { return cpu_->device(); }
  void check(const Problem& p, const KernelConfig& c) const override { cpu_->check(p, c); }
  size_t scratch_bytes(const Problem& p, const KernelConfig& c) const override { return cpu_->scratch_bytes(p, c); }
  HostOutputs run(const Problem& p, const KernelConfig& c, const HostCase& in) override {
    HostCase changed = in;
    inputs(changed);
    HostOutputs out = cpu_->run(p, c, changed);
    outputs(p, out);
    return out;
  }
  std::unique_ptr<Workload> prepare(const Problem& p, uint64_t seed) override { return cpu_->prepare(p, seed); }

 private:
  std::unique_ptr<Backend> cpu_ = cpu::make_backend();
};

}  // namespace

TEST_CASE("validate: the absolute bound gives way only where the plain path cannot meet it either") {
  auto backend = cpu::make_backend();
  // dX of one token with H = 1 is one sum whose terms add up to 97 times it:
  // rounding dZ to bf16 leaves it 8.6% off, the kernel and the unfused path alike.
  const ValidationCase vc = case_for("flce:N1:H1:V3001:bf16:int64:ign-100:mean:ls0:cap0:z0:nobias:fwdbwd", 24);
  const CaseResult r = validate_case(*backend, vc);
  const OutputVerdict& dx = verdict(r, "dx");
  CHECK(dx.baseline.rel_l2 > tolerance_for(DType::bf16).bound);
  CHECK(dx.pass);
  CHECK(r.pass);
  // A kernel whose dX error is 10% larger than that path's fails on the bound
  // (the other criteria allow 1.25x).
  const RefOutputs truth = reference::run(vc.problem, make_case(vc.problem, vc.spec));
  WrongKernel worse;
  worse.outputs = [&](const Problem&, HostOutputs& o) {
    for (size_t k = 0; k < o.dx.size(); ++k)
      o.dx[k] = static_cast<float>(truth.dx[k] + 1.1 * (o.dx[k] - truth.dx[k]));
  };
  const CaseResult w = validate_case(worse, vc);
  CHECK_FALSE(w.pass);
  CHECK(verdict(w, "dx").why.find("bound") != std::string::npos);
}
