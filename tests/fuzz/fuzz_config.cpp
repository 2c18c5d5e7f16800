// libFuzzer target: a kernel config from JSON text, as CELTUNE_CONFIG and
// --config give it, then validated against a problem and printed.
#include <cstddef>
#include <cstdint>
#include <string>

#include "model/config.hpp"
#include "model/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  celtune::Problem p;
  p.tokens = 4096, p.hidden = 4096, p.vocab = 128256;
  try {
    const celtune::KernelConfig c = celtune::parse_config_json(std::string(reinterpret_cast<const char*>(data), size));
    (void)celtune::to_string(c);
    celtune::validate_config(p, c);
    (void)c.v_chunk_for(p), (void)c.row_chunk_for(p);
  } catch (const celtune::Error&) {
  }
  return 0;
}
