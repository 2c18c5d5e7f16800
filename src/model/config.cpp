#include "config.hpp"

#include <algorithm>
#include <bit>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <ostream>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "error.hpp"
#include "json_get.hpp"

namespace celtune {

int64_t KernelConfig::v_chunk_for(const Problem& p) const {
  return (v_chunk <= 0 || v_chunk >= p.vocab) ? p.vocab : v_chunk;
}

int64_t KernelConfig::row_chunk_for(const Problem& p) const {
  return (row_chunk <= 0 || row_chunk >= p.tokens) ? p.tokens : row_chunk;
}

std::vector<int64_t> KernelConfig::row_chunk_rows(const Problem& p, int64_t unit) const {
  const int64_t n = p.tokens, rc = row_chunk_for(p), chunks = (n + rc - 1) / rc;
  std::vector<int64_t> rows;
  const int64_t units = unit > 0 ? (n + unit - 1) / unit : 0;
  if (unit > 0 && rc >= unit && (units + chunks - 1) / chunks * unit <= rc) {
    // Larger chunks first; the last one ends at n (its final unit may be partial).
    for (int64_t i = 0; i < chunks; ++i) rows.push_back((units / chunks + (i < units % chunks ? 1 : 0)) * unit);
    rows.back() -= units * unit - n;
  } else {
    for (int64_t r0 = 0; r0 < n; r0 += rc) rows.push_back(std::min(rc, n - r0));
  }
  return rows;
}

void validate_config(const Problem& p, const KernelConfig& c) {
  auto pow2 = [](int64_t v) { return v > 0 && std::has_single_bit(static_cast<uint64_t>(v)); };
  if (!pow2(c.block_size) || c.block_size < 32 || c.block_size > 65536)
    fail_usage("block_size must be a power of two in [32, 65536], got " + std::to_string(c.block_size));
  if (!pow2(c.threads) || c.threads < 32 || c.threads > 1024)
    fail_usage("threads must be a power of two in [32, 1024], got " + std::to_string(c.threads));
  if (c.v_chunk < 0) fail_usage("v_chunk must be ≥ 0 (0 = whole vocabulary)");
  if (c.row_chunk < 0) fail_usage("row_chunk must be ≥ 0 (0 = all tokens)");
  if (c.workspace_mib < 0 || c.workspace_mib > 256)
    fail_usage("workspace_mib must be in [0, 256], got " + std::to_string(c.workspace_mib));
  if (c.rows_per_block < 1 || c.rows_per_block > 64)
    fail_usage("rows_per_block must be in [1, 64], got " + std::to_string(c.rows_per_block));
  // A tile wider than a chunk would straddle two chunks' logits.
  // A config that names v_chunk alone takes the type's block_size, which the
  // caller never wrote (a helper's probe): the message says where it came from.
  if (c.v_chunk_for(p) < p.vocab && c.block_size > c.v_chunk_for(p))
    fail_usage("block_size " + std::to_string(c.block_size) + " exceeds v_chunk " +
               std::to_string(c.v_chunk_for(p)) + ": give a block_size of at most the v_chunk" +
               (c.block_size == KernelConfig{}.block_size
                    ? " (a config that leaves block_size out has the config type's " +
                          std::to_string(c.block_size) + ")"
                    : ""));
  if (p.family == Family::ce && c.fused) {
    // Past a cluster's blocks a row is spread over the GPU, a segment a block in
    // registers (one tile a thread), the whole call in one launch.
    const int64_t seg = c.v_chunk_for(p), blocks = (p.vocab + seg - 1) / seg;
    // The message is built only on the way out: this check runs on every call.
    auto refuse = [&](const std::string& why, const char* cluster_hint) {
      fail_usage("fused ce with a row split among more than " + std::to_string(kCeMaxClusterBlocks) + " blocks " +
                 why + " (" + (cluster_hint[0] ? "or " : "") + "use v_chunk ≥ " +
                 std::to_string((p.vocab + kCeMaxClusterBlocks - 1) / kCeMaxClusterBlocks) + cluster_hint + ")");
    };
    if (blocks > kCeMaxClusterBlocks && seg != c.block_size)
      refuse("holds one tile a block: v_chunk " + std::to_string(c.v_chunk) + " must equal block_size " +
                 std::to_string(c.block_size),
             " for a cluster");
    if (blocks > kCeMaxClusterBlocks && p.tokens > kCeOneLaunchTokens)
      refuse("runs in one launch: at most " + std::to_string(kCeOneLaunchTokens) + " tokens, not " +
                 std::to_string(p.tokens),
             "");
  }
  if (c.impl == KernelConfig::Impl::fused) {
    if (p.family != Family::flce) fail_usage("impl fused is a flce implementation");
    if (p.dtype == DType::fp32) fail_usage("impl fused takes bf16 or fp16 inputs; fp32 runs on cuBLASLt");
    // Names from the table of this or another build (CUTLASS profiler style),
    // printed by list and lookup: an imported escape sequence reached the
    // terminal, and a 100 000-byte name was stored.
    for (const std::string* name : {&c.logits_kernel, &c.dw_kernel, &c.dx_kernel})
      if (name->size() > 64 ||
          name->find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.") !=
              std::string::npos)
        fail_usage(
            "logits_kernel, dw_kernel and dx_kernel are variant names: at most 64 letters, digits, '_', '-' or '.'");
    // dX accumulates over vocabulary chunks in two passes, which the CUTLASS dX
    // GEMM (one output, beta = 0) does not do.
    if (!c.dx_kernel.empty() && !c.one_pass(p))
      fail_usage("dx_kernel names the one pass's CUTLASS dX GEMM: it needs v_chunk = 0 (all of V), got " +
                 std::to_string(c.v_chunk));
  } else if (!c.logits_kernel.empty() || !c.dw_kernel.empty() || !c.dx_kernel.empty()) {
    fail_usage("logits_kernel, dw_kernel and dx_kernel name CUTLASS variants of impl fused");
  }
  if (!c.gemm_algos.empty() && c.gemm_algos.size() != 3)
    fail_usage("gemm_algos holds one entry per GEMM role (logits, dX, dW): 3, got " +
               std::to_string(c.gemm_algos.size()));
  // Pinned cuBLASLt algorithms as kernels/flce/context.cu serialises them: 64
  // bytes as 128 lowercase hex digits (empty: the heuristic's), with the version.
  for (const auto& a : c.gemm_algos)
    if (!a.empty() && (a.size() != 128 || a.find_first_not_of("0123456789abcdef") != std::string::npos))
      fail_usage("gemm_algos entry is not a serialised cuBLASLt algorithm (128 lowercase hex digits)");
  if (!c.gemm_algos.empty() && c.gemm_algos_cublaslt <= 0)
    fail_usage("gemm_algos_cublaslt must name the cuBLASLt version the algorithms were tuned with");
}

namespace {
// ce, measured on an H100 and an H200 (docs/results.md, 2026-11-22, sixth
// session; V from 32000 to 256000, N from 1 to 32768): tiles of 4096 with 256
// threads (16 elements a thread) came within 1.09x (H100) and 1.06x (H200) of the
// best of 22 swept configs at every N ≥ 256, forward and forward+backward, and
// was the best at most of them. Below ~256 rows the GPU is not full: each
// row splits into segments (≥ 4096 columns, rounded up to 256) until about 256
// blocks run; at one row, 16 segments of Llama's 128256 took 0.017 ms where one
// block took 0.024.
//
// Whole rows of 16-bit logits up to kNarrowRow columns, from kNarrowTokens rows,
// take blocks of 128 threads at the same 16 elements a thread (tiles of 2048):
// forward read 5–10% faster at V = 32000 and 50257, N = 1024…32768, on both GPUs
// (H200 0.901–0.959x the time of 256 threads, H100 0.947–0.989x; docs/results.md,
// fifteenth session), and two passes forward+backward, where they run,
// 0.94–0.99x. At V = 128256 and 256000 it was 0.99–1.03x, and at N = 256 (256
// blocks of 128 threads do not fill the GPU) 1.10–1.13x: those keep 256 threads.
//
// Forward in 16 bits, by rows: up to kMidTokens the tiles of 4096 above; from
// kMidTokens tiles of 2048 with 256 threads (8 elements a thread: a block reads
// its row in twice the steps, and a grid of a few blocks an SM keeps more of
// them in flight); from kNarrowTokens tiles of 1024 with 128 threads (8 a
// thread, twice the blocks an SM); from kLongTokens tiles of 2048 with 128
// threads (16 a thread), at every V. Five tiles timed against the floor in one
// process a shape, V = 32000, 50257, 128256 and 256000, N = 256 to 32768, on an
// H100 and an H200 (docs/results.md, forty-seventh session): this rule's tile
// was the best of the five or within 2% of it at every shape on both GPUs. The
// rule it replaced (tiles of 4096 with 256 threads for rows past 131072
// columns from 512 rows, and for all but narrow rows from 1024) took 15% and
// 29% more time at N = 512, V = 256000 (H100, H200), 3-9% at N = 1024-2048 of
// V = 128256, 4-5% at N = 4096-32768 of V = 128256 on the H200, and 1-9% at
// 1024-2048 narrow rows; nowhere was it more than 0.5% faster.
KernelConfig ce_default(const Problem& p, KernelConfig c) {
  constexpr int64_t kBlocks = 256, kMinSegment = 4096, kNarrowRow = 65536, kNarrowTokens = 1024;
  constexpr int64_t kMidTokens = 512, kLongTokens = 4096;
  c.block_size = 4096;
  c.threads = 256;
  int64_t splits = 1;
  while (p.tokens * splits < kBlocks && p.vocab / (splits * 2) >= kMinSegment) splits *= 2;
  if (splits > 1) c.v_chunk = ce_segment(p.vocab, splits);
  const bool half = p.dtype != DType::fp32, narrow = half && p.vocab <= kNarrowRow;
  if (half && p.mode == Mode::forward) {
    if (p.tokens >= kLongTokens)
      c.block_size = 2048, c.threads = 128;
    else if (p.tokens >= kNarrowTokens)
      c.block_size = 1024, c.threads = 128;
    else if (p.tokens >= kMidTokens)
      c.block_size = 2048, c.threads = 256;
  } else if (narrow && p.tokens >= kNarrowTokens) {
    c.block_size = 2048, c.threads = 128;
  }
  if (c.block_size > c.v_chunk_for(p)) c.block_size = 1024;  // a vocabulary under the tile
  return c;
}
}  // namespace

int64_t flce_tile_budget(const Problem& p, size_t budget) {
  // The tile shares the budget less the GEMM workspace with the per-row softmax
  // state (4 floats a token) and the counters, so a tile that divides exactly
  // cannot push the default past the budget tune's --max-scratch enforces by default.
  const int64_t tile_bytes = static_cast<int64_t>(std::min<size_t>(budget, INT64_MAX >> 1)) -
                             (int64_t{KernelConfig::kDefaultWorkspaceMib} << 20);
  return tile_bytes - 16 * p.tokens - 4096;
}

KernelConfig default_config(const Problem& p, size_t budget) {
  // Measured on an H100 (docs/results.md, 2026-11-22): tiles of 2048 with 256
  // threads read logits at 93% of copy bandwidth.
  KernelConfig c;
  c.block_size = 2048;
  c.threads = 256;
  c.rows_per_block = 1;
  if (p.family == Family::ce) return ce_default(p, c);
  // flce: one pass (three GEMMs) with as many rows per chunk as fit the tile
  // budget, which with cuBLASLt's 32 MiB workspace keeps scratch within
  // kDefaultScratchBudget.
  // On the H100 this ran at 1.12x the three-GEMM floor for Llama-3-8B shapes,
  // where two passes (four GEMMs) cannot beat 1.33x. Only when a row chunk would
  // fall under 128 rows (V beyond ~900k in bf16) do vocabulary chunks take over.
  const int64_t bytes = dtype_bytes(p.dtype);
  const int64_t tile_budget = flce_tile_budget(p, budget);
  if (p.mode == Mode::forward) {
    // Forward only has no second pass, so vocabulary chunks cost nothing extra:
    // tall row chunks and as many columns as the budget allows. On the H100 this
    // beat one-pass chunks of 768 rows by 10% (N=4096, V=128256). Row chunks stop
    // at 8192 rows: at 16384 the budget left vocabulary chunks of ~7000 columns,
    // 1.11–1.20x the tuned best at N ≥ 16384 on both GPUs, where 8192 rows (~14000
    // columns) were the tuned best or within 1.09x at N = 8192 (docs/results.md).
    c.row_chunk = std::min<int64_t>(p.tokens, 8192);
    if (c.row_chunk >= p.tokens) c.row_chunk = 0;
    const int64_t vc = tile_budget / (c.row_chunk_for(p) * bytes) / 256 * 256;
    c.v_chunk = vc >= p.vocab ? 0 : std::max<int64_t>(vc, 2048);
    while (c.block_size > 256 && c.block_size > c.v_chunk_for(p)) c.block_size /= 2;
    return c;
  }
  // The tile's rows are V rounded up to 128 elements (kernels/flce/flce.cu).
  const int64_t rows_full_v = tile_budget / ((p.vocab + 127) / 128 * 128 * bytes);
  if (rows_full_v >= std::min<int64_t>(128, p.tokens)) {
    c.v_chunk = 0;
    c.row_chunk = rows_full_v >= p.tokens ? 0 : rows_full_v / 128 * 128;  // whole GEMM tiles
  } else {
    c.row_chunk = std::min<int64_t>(p.tokens, 1024);
    // Two passes also hold dX of a row chunk in fp32 across vocabulary chunks.
    const int64_t dx_acc = c.row_chunk * p.hidden * 4;
    c.v_chunk = std::max<int64_t>(2048, (tile_budget - dx_acc) / (c.row_chunk * bytes) / 256 * 256);
  }
  // dW accumulates across row chunks in fp32 only when that accumulator (V×H×4)
  // fits beside the tile and dX's within the budget; otherwise in the output dtype
  // (validated in the gpu suite at 16 row chunks in bf16). Small models (H = 768,
  // V = 50257) once took fp32 beside a full tile: 400 MiB of scratch, past the
  // 256 MiB that tune's --max-scratch then allowed, so tuning could not keep the
  // default.
  const int64_t rc = c.row_chunk_for(p), tile = rc * ((c.v_chunk_for(p) + 127) / 128 * 128) * bytes;
  const int64_t dx = c.one_pass(p) ? 0 : rc * p.hidden * 4;
  c.dw_acc_fp32 = p.vocab * p.hidden * 4 + tile + dx <= tile_budget;
  c.dx_acc_fp32 = true;
  while (c.block_size > 256 && c.block_size > c.v_chunk_for(p)) c.block_size /= 2;
  return c;
}

std::optional<size_t> env_max_scratch() {
  const char* e = std::getenv("CELTUNE_MAX_SCRATCH");
  if (!e || !*e) return std::nullopt;
  const size_t b = parse_bytes(e, "CELTUNE_MAX_SCRATCH");
  if (b < kMinScratchBudget)
    fail_usage("CELTUNE_MAX_SCRATCH is " + std::string(e) + "; the built-in defaults need at least " +
               std::to_string(kMinScratchBudget >> 20) + "MiB (the GEMM workspace and a tile of rows)");
  return b;
}

std::string scratch_over_budget(size_t need, size_t budget) {
  return "needs " + human_bytes(static_cast<double>(need)) + " of scratch, " +
         human_bytes(static_cast<double>(need - budget)) + " over CELTUNE_MAX_SCRATCH's " +
         human_bytes(static_cast<double>(budget));
}

size_t parse_bytes(const std::string& s, const std::string& what) {
  size_t i = 0;
  while (i < s.size() && (std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == '.')) ++i;
  const auto malformed = [&] {
    fail_usage(what + ": malformed size '" + s + "': expected e.g. 256MiB, 1GiB or 1048576");
  };
  // Past 2^63 the conversion to size_t is undefined (it came out as a small
  // limit, so tuning failed for want of configs instead of refusing the flag).
  const auto out_of_range = [&] { fail_usage(what + ": size '" + s + "' is out of range (below 2^63 bytes)"); };
  if (i == 0) malformed();
  const std::string unit = s.substr(i);
  uint64_t m = 1;
  if (unit.empty() || unit == "B") m = 1;
  else if (unit == "KiB" || unit == "K") m = uint64_t{1} << 10;
  else if (unit == "MiB" || unit == "M") m = uint64_t{1} << 20;
  else if (unit == "GiB" || unit == "G") m = uint64_t{1} << 30;
  else fail_usage(what + ": unknown size unit '" + unit + "' in '" + s + "' (B, KiB or K, MiB or M, GiB or G)");
  const char* end = s.data() + i;
  if (s.find('.') < i) {  // a fraction (1.5GiB): in double, the whole number parsed ("1.2.3MiB" was taken as 1.2)
    double v = 0;
    const auto r = std::from_chars(s.data(), end, v);
    if (r.ec == std::errc::result_out_of_range) out_of_range();
    if (r.ec != std::errc() || r.ptr != end) malformed();
    if (!(v * static_cast<double>(m) < 0x1p63)) out_of_range();
    // Of bytes themselves it means nothing: "1.5" was taken as 1 byte, silently,
    // and so were "1.3KiB" (1331.2 bytes) and "0.0001KiB" (0, "fits no config").
    const double bytes = v * static_cast<double>(m);
    if (m == 1) fail_usage(what + ": size '" + s + "' is a fraction of a byte: give whole bytes or a unit (1.5GiB)");
    if (bytes != std::floor(bytes))
      fail_usage(what + ": size '" + s + "' is " + format_double(bytes) +
                 " bytes, a fraction of a byte: give whole bytes (" + std::to_string(static_cast<uint64_t>(bytes)) +
                 ") or a size whole in bytes (1.5GiB)");
    return static_cast<size_t>(bytes);
  }
  // A whole number exactly: through a double, 2^63 - 1 rounded up to 2^63 and was refused.
  uint64_t v = 0;
  const auto r = std::from_chars(s.data(), end, v);
  if (r.ec == std::errc::result_out_of_range) out_of_range();
  if (r.ec != std::errc() || r.ptr != end) malformed();
  if (v > (uint64_t{1} << 63) / m || v * m >= (uint64_t{1} << 63)) out_of_range();
  return static_cast<size_t>(v * m);
}

void to_json(nlohmann::json& j, const KernelConfig& c) {
  j = nlohmann::json{{"block_size", c.block_size},       {"v_chunk", c.v_chunk},
                     {"row_chunk", c.row_chunk},         {"threads", c.threads},
                     {"rows_per_block", c.rows_per_block}, {"dw_acc_fp32", c.dw_acc_fp32},
                     {"dx_acc_fp32", c.dx_acc_fp32},     {"fused", c.fused}};
  // Written only when fused, so every cuBLASLt config keeps its JSON (and its
  // database key) from before the fused path existed.
  if (c.impl == KernelConfig::Impl::fused) {
    j["impl"] = "fused";
    if (!c.logits_kernel.empty()) j["logits_kernel"] = c.logits_kernel;
    if (!c.dw_kernel.empty()) j["dw_kernel"] = c.dw_kernel;
    if (!c.dx_kernel.empty()) j["dx_kernel"] = c.dx_kernel;
  }
  // Likewise written only when not the default.
  if (c.workspace_mib != KernelConfig::kDefaultWorkspaceMib) j["workspace_mib"] = c.workspace_mib;
  if (!c.gemm_algos.empty()) {
    j["gemm_algos"] = c.gemm_algos;
    j["gemm_algos_cublaslt"] = c.gemm_algos_cublaslt;
  }
}

void from_json(const nlohmann::json& j, KernelConfig& c) {
  static const std::set<std::string> known{"block_size", "v_chunk",     "row_chunk",
                                           "threads",    "rows_per_block", "dw_acc_fp32",
                                           "dx_acc_fp32", "fused",      "gemm_algos",
                                           "gemm_algos_cublaslt", "impl", "logits_kernel", "dw_kernel",
                                           "dx_kernel",  "workspace_mib"};
  if (!j.is_object()) fail_usage("a config must be a JSON object");
  for (const auto& [k, v] : j.items())
    if (!known.count(k)) fail_usage("unknown config key '" + k + "'");
  KernelConfig d;
  c = d;
  try {
    c.block_size = json_int_or<int>(j, "block_size", c.block_size);
    c.v_chunk = json_int_or<int64_t>(j, "v_chunk", c.v_chunk);
    c.row_chunk = json_int_or<int64_t>(j, "row_chunk", c.row_chunk);
    c.threads = json_int_or<int>(j, "threads", c.threads);
    c.rows_per_block = json_int_or<int>(j, "rows_per_block", c.rows_per_block);
    c.workspace_mib = json_int_or<int>(j, "workspace_mib", c.workspace_mib);
    c.dw_acc_fp32 = json_field_or<bool>(j, "dw_acc_fp32", c.dw_acc_fp32);
    c.dx_acc_fp32 = json_field_or<bool>(j, "dx_acc_fp32", c.dx_acc_fp32);
    c.fused = json_field_or<bool>(j, "fused", c.fused);
    if (j.contains("impl")) {
      const auto impl = json_field<std::string>(j, "impl");
      if (impl == "fused")
        c.impl = KernelConfig::Impl::fused;
      else if (impl != "cublaslt")
        fail_usage("config: impl must be \"cublaslt\" or \"fused\", got \"" + impl + "\"");
    }
    c.logits_kernel = json_field_or<std::string>(j, "logits_kernel", c.logits_kernel);
    c.dw_kernel = json_field_or<std::string>(j, "dw_kernel", c.dw_kernel);
    c.dx_kernel = json_field_or<std::string>(j, "dx_kernel", c.dx_kernel);
    c.gemm_algos = json_field_or<std::vector<std::string>>(j, "gemm_algos", c.gemm_algos);
    c.gemm_algos_cublaslt = json_int_or<int64_t>(j, "gemm_algos_cublaslt", c.gemm_algos_cublaslt);
  } catch (const nlohmann::json::exception& e) {
    fail_usage("config: " + json_error_text(e));
  }
}

KernelConfig parse_config_json(const std::string& text) {
  nlohmann::json j;
  try {
    j = parse_json_strict(text);
  } catch (const nlohmann::json::exception& e) {
    fail_usage("config is not valid JSON: " + json_error_text(e));
  } catch (const Error& e) {
    fail_usage(std::string("config: ") + e.what());
  }
  return j.get<KernelConfig>();
}

std::string to_string(const KernelConfig& c) {
  std::ostringstream s;
  s << "bs" << c.block_size << " vc" << (c.v_chunk ? std::to_string(c.v_chunk) : "V") << " rc"
    << (c.row_chunk ? std::to_string(c.row_chunk) : "N") << " t" << c.threads;
  if (c.rows_per_block != 1) s << " rpb" << c.rows_per_block;
  if (!c.dw_acc_fp32) s << " dw:out";
  if (!c.dx_acc_fp32) s << " dx:out";
  if (c.fused) s << " fused";
  if (c.impl == KernelConfig::Impl::fused) {
    s << " sm90";
    if (!c.logits_kernel.empty()) s << " L:" << c.logits_kernel;
    if (!c.dw_kernel.empty()) s << " W:" << c.dw_kernel;
    if (!c.dx_kernel.empty()) s << " X:" << c.dx_kernel;
  }
  if (c.workspace_mib != KernelConfig::kDefaultWorkspaceMib) s << " ws" << c.workspace_mib;
  if (!c.gemm_algos.empty()) s << " algos";
  return s.str();
}

std::ostream& operator<<(std::ostream& o, const KernelConfig& c) { return o << to_string(c); }

}  // namespace celtune
