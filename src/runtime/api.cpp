// The C API: the boundary where exceptions become status codes plus a message
// (CLBlast's DispatchException pattern). Each context holds the cuBLASLt handle
// and workspace (cuda::Context) or, for a CPU context, the CPU backend; the
// resolver with its read-only databases and config cache; and a lock that
// serialises calls on the context.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <iostream>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <nlohmann/json.hpp>
#include <omp.h>
#include <pthread.h>

#include "celtune/celtune.h"
#include "kernels/backend.hpp"
#include "kernels/cpu/cpu_backend.hpp"
#include "kernels/kernel_hash.hpp"
#include "model/error.hpp"
#include "model/problem.hpp"
#include "model/numerics.hpp"
#include "resolve.hpp"

#ifdef CELTUNE_HAVE_CUDA
#include <cuda_runtime.h>

#include "kernels/cuda_backend.hpp"
#include "kernels/flce/flce.hpp"
#include "kernels/scale.hpp"
#endif

using namespace celtune;

namespace {
// Each thread's last error on each context, in the thread's own storage, keyed
// by the context's serial. With one string a context, a thread that shared the
// context read another thread's message, or "" after another's success; keyed
// by std::thread::id, a new thread read the error of an ended one whose id it
// was given again (glibc reuses a joined thread's id), and the map grew with
// every thread that ever failed. Here a thread's errors end with it, and a
// serial is never reused, as a freed context's address may be. A thread's
// string changes only in its own calls, so the pointer celtune_last_error
// returns holds until then (map nodes never move).
//
// The map is reached through a plain pointer, freed by an owner object's
// destructor when the thread ends: a thread_local map itself is destroyed as
// exit() begins, before atexit handlers and static destructors, so a call
// failing in one of those wrote into freed memory (a segfault, found by the
// forty-ninth session's C API probe). A call made after the thread's storage
// has gone keeps its message in the context instead (late_error).
using ErrorMap = std::unordered_map<uint64_t, std::string>;
thread_local ErrorMap* t_errors = nullptr;  // trivially destructible: valid until the thread is gone
thread_local bool t_errors_gone = false;
struct ThreadErrorsOwner {
  ~ThreadErrorsOwner() {
    delete t_errors;
    t_errors = nullptr;
    t_errors_gone = true;
  }
};
thread_local ThreadErrorsOwner t_errors_owner;

// Why this thread's last celtune_create or celtune_create_cpu failed, for
// celtune_last_error(NULL): the context that held the message is gone by the
// time the caller sees the status (a malformed CELTUNE_MAX_SCRATCH reached
// Python as "cannot create a context (status 2)"). A fixed array, trivially
// destructible, for the reason t_errors is a pointer; a longer message is cut.
thread_local char t_create_error[1024] = "";

celtune_status remember_create(celtune_status st, const char* message) {
  const std::string m = st == CELTUNE_OK ? std::string() : printable_message(message);
  // Cut where the buffer ends, on a whole character and a whole \xNN escape
  // (one cut in \xf gave a garbled end), and say so with an ellipsis.
  static constexpr std::string_view kCut = "\u2026";
  const size_t cap = sizeof t_create_error - 1;
  size_t n = m.size() <= cap ? m.size() : cap - kCut.size();
  if (n < m.size()) {
    while (n > 0 && (static_cast<unsigned char>(m[n]) & 0xc0) == 0x80) --n;  // a whole character
    for (size_t k = n >= 3 ? n - 3 : 0; k < n; ++k)
      if (m[k] == '\\' && k + 4 > n) n = k;  // a whole escape
  }
  std::memcpy(t_create_error, m.data(), n);
  const size_t cut = n < m.size() ? kCut.size() : 0;
  std::memcpy(t_create_error + n, kCut.data(), cut);
  t_create_error[n + cut] = '\0';
  return st;
}

// This thread's map, made on first use; nullptr once the thread is ending.
ErrorMap* thread_errors() {
  if (t_errors_gone) return nullptr;
  if (!t_errors) {
    (void)&t_errors_owner;  // constructed here, so its destructor runs when the thread ends
    t_errors = new ErrorMap;
  }
  return t_errors;
}

std::atomic<uint64_t> g_contexts{0};

// The serials of live contexts. A thread's messages for a context destroyed on
// another thread stayed in the thread's map until the thread ended (~130 bytes
// a context: a long-lived worker failing once on each of 100,000 short-lived
// contexts held 13 MB); a thread drops those whenever it stores a message, so
// its map holds at most the live contexts it failed on. Never freed, so it
// outlives every static destructor and atexit handler that may destroy a
// context.
struct LiveContexts {
  std::mutex mu;
  std::unordered_set<uint64_t> serials;
};
LiveContexts& live_contexts() {
  static auto* live = new LiveContexts;
  return *live;
}
}  // namespace

struct celtune_context {
  mutable std::mutex mu;
  const uint64_t serial = ++g_contexts;
  // A message stored while the calling thread was ending (its map gone).
  mutable std::mutex late_mu;
  mutable std::string late_error;
  celtune_context() {
    LiveContexts& live = live_contexts();
    std::lock_guard lk(live.mu);
    live.serials.insert(serial);
  }
  // Stored as printed: messages echo what the caller gave (a config's bytes), and
  // one that is not UTF-8 was handed back raw, a string a caller's logger or
  // JSON encoder may refuse (a helper's C API probe, sixty-second session).
  void set_error(const std::string& raw) const {
    std::string msg = printable_message(raw);
    ErrorMap* errors = thread_errors();
    if (!errors) {
      std::lock_guard lk(late_mu);
      late_error = std::move(msg);
      return;
    }
    {
      LiveContexts& live = live_contexts();
      std::lock_guard lk(live.mu);
      std::erase_if(*errors, [&](const auto& e) { return e.first != serial && !live.serials.count(e.first); });
    }
    (*errors)[serial] = std::move(msg);
  }
  void clear_error() const {  // every successful call: makes no map where the thread has none
    if (t_errors_gone) {
      std::lock_guard lk(late_mu);
      late_error.clear();
    } else if (t_errors) {
      t_errors->erase(serial);
    }
  }
  const char* last_error() const {
    if (t_errors_gone) {
      std::lock_guard lk(late_mu);
      return late_error.c_str();
    }
    if (!t_errors) return "";
    const auto it = t_errors->find(serial);  // this thread's own: no lock
    return it == t_errors->end() ? "" : it->second.c_str();
  }
  ~celtune_context() {
    {
      LiveContexts& live = live_contexts();
      std::lock_guard lk(live.mu);
      live.serials.erase(serial);
    }
    if (t_errors) t_errors->erase(serial);  // the destroying thread's; others' go at their next error or end
  }
  DeviceInfo device;
  std::unique_ptr<runtime::Resolver> resolver;
  std::shared_ptr<Backend> cpu;  // set for a CPU context (celtune_create_cpu)
#ifdef CELTUNE_HAVE_CUDA
  std::unique_ptr<cuda::Context> cuda;
#endif
};

namespace {

// A caller's output buffer cannot hold the answer: CELTUNE_ERROR_BUFFER_TOO_SMALL.
struct BufferTooSmall : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Every entry point runs through here: a null context is refused, the call holds
// the context's lock (so threads may share one), and exceptions become a status.
template <typename F>
celtune_status guarded(celtune_context* ctx, F&& f) {
  if (!ctx) return CELTUNE_ERROR_INVALID_ARGUMENT;
  std::lock_guard lk(ctx->mu);
  try {
    f();
    ctx->clear_error();
    return CELTUNE_OK;
  } catch (const BufferTooSmall& e) {
    ctx->set_error(e.what());
    return CELTUNE_ERROR_BUFFER_TOO_SMALL;
  } catch (const Error& e) {
    ctx->set_error(e.what());
    return e.status() == Status::usage ? CELTUNE_ERROR_INVALID_ARGUMENT : CELTUNE_ERROR_ENVIRONMENT;
  } catch (const std::bad_alloc&) {
    ctx->set_error("out of host memory");
    return CELTUNE_ERROR_ENVIRONMENT;
  } catch (const std::exception& e) {
    ctx->set_error(std::string("internal error: ") + e.what());
    return CELTUNE_ERROR_INTERNAL;
  }
}

// An enum field filled by a C caller may hold any integer, and loading an
// out-of-range value as the C++ enum type is undefined behaviour: read the bytes
// as the underlying integer, check, then convert.
template <typename E, typename CEnum>
E checked_enum(const CEnum& field, int n, const char* what) {
  std::underlying_type_t<CEnum> v;
  std::memcpy(&v, &field, sizeof v);
  // Said as the C int the caller wrote: -1, not 4294967295 where the enum is unsigned.
  const auto said = static_cast<std::make_signed_t<decltype(v)>>(v);
  if (said < 0 || static_cast<int64_t>(said) >= n) fail_usage(std::string("invalid ") + what + " " + std::to_string(said));
  return static_cast<E>(v);
}

void apply_loss(Problem& p, const celtune_loss_options& o) {
  p.loss.ignore_index = o.ignore_index;
  p.loss.reduction = checked_enum<Reduction>(o.reduction, 3, "reduction");
  p.loss.label_smoothing = o.label_smoothing;
  p.loss.softcap = o.softcap;
  p.loss.z_loss = o.z_loss;
}

Problem flce_problem(const celtune_flce_args& a) {
  Problem p;
  p.family = Family::flce;
  p.tokens = a.tokens, p.hidden = a.hidden, p.vocab = a.vocab;
  p.dtype = checked_enum<DType>(a.dtype, 3, "dtype");
  p.target_type = checked_enum<TargetType>(a.target_dtype, 2, "target dtype");
  apply_loss(p, a.options);
  p.bias = a.bias != nullptr;
  p.mode = checked_enum<Mode>(a.mode, 2, "mode");
  p.validate();
  return p;
}

Problem ce_problem(const celtune_ce_args& a) {
  Problem p;
  p.family = Family::ce;
  p.tokens = a.tokens, p.hidden = 0, p.vocab = a.vocab;
  p.dtype = checked_enum<DType>(a.dtype, 3, "dtype");
  p.target_type = checked_enum<TargetType>(a.target_dtype, 2, "target dtype");
  apply_loss(p, a.options);
  p.mode = checked_enum<Mode>(a.mode, 2, "mode");
  p.validate();
  return p;
}


// The buffers a call reads and writes, as byte ranges. An output may share
// memory with no other buffer of the call: the header allows only ce's dz ==
// logits (in place). A loss pointed at token_loss returned status 0 with the
// loss in token_loss[0] (a helper's C API probe, sixty-second session), and on
// a GPU with vocabulary chunks a dX accumulated over X would be read as X by the
// next chunk's dW GEMM (flce.cu's consume). Sizes within the problem's size rule
// (Problem::validate ran), so the products fit.
struct Span {
  const void* ptr;
  uint64_t bytes;
  const char* name;
  bool output;
};

void refuse_overlaps(const char* call, const std::vector<Span>& spans) {
  auto overlap = [](const Span& a, const Span& b) {
    const auto pa = reinterpret_cast<uintptr_t>(a.ptr), pb = reinterpret_cast<uintptr_t>(b.ptr);
    return pa < pb + b.bytes && pb < pa + a.bytes;
  };
  for (auto a = spans.begin(); a != spans.end(); ++a)
    for (auto b = spans.begin(); b != a; ++b)
      if ((a->output || b->output) && a->ptr && b->ptr && a->bytes && b->bytes && overlap(*a, *b))
        fail_usage(std::string(call) + ": " + a->name + " overlaps " + b->name +
                   ": an output may not share memory with another buffer of the call (only ce's dz may equal "
                   "its logits)");
}

// The buffers both families' args hold under the same names: the targets, the
// upstream gradient the mode reads, and the loss outputs.
template <typename Args>
std::vector<Span> loss_spans(const Problem& p, const Args& a) {
  const uint64_t N = static_cast<uint64_t>(p.tokens), t = p.target_type == TargetType::i32 ? 4 : 8;
  const bool bwd = p.mode == Mode::forward_backward, none = p.loss.reduction == Reduction::none;
  return {{a.targets, N * t, "targets", false},
          {bwd && !none ? a.grad_scale : nullptr, 4, "grad_scale", false},
          {bwd && none ? a.grad_tokens : nullptr, N * 4, "grad_tokens", false},
          {a.loss, 4, "loss", true},
          {a.token_loss, N * 4, "token_loss", true},
          {a.lse, N * 4, "lse", true},
          {a.bad_target, 8, "bad_target", true}};
}

void refuse_overlaps(const Problem& p, const celtune_flce_args& a) {
  const uint64_t N = static_cast<uint64_t>(p.tokens), H = static_cast<uint64_t>(p.hidden),
                 V = static_cast<uint64_t>(p.vocab), e = dtype_bytes(p.dtype);
  const bool bwd = p.mode == Mode::forward_backward;
  std::vector<Span> spans = loss_spans(p, a);
  spans.insert(spans.end(), {{a.x, N * H * e, "x", false},
                             {a.w, V * H * e, "w", false},
                             {a.bias, V * e, "bias", false},
                             {bwd ? a.dx : nullptr, N * H * e, "dx", true},
                             {bwd ? a.dw : nullptr, V * H * e, "dw", true},
                             {bwd && a.bias ? a.db : nullptr, V * e, "db", true}});
  refuse_overlaps("celtune_flce", spans);
}

void refuse_overlaps(const Problem& p, const celtune_ce_args& a) {
  const uint64_t NV = static_cast<uint64_t>(p.tokens) * static_cast<uint64_t>(p.vocab) * dtype_bytes(p.dtype);
  const void* dz = p.mode == Mode::forward_backward ? a.dz : nullptr;
  std::vector<Span> spans = loss_spans(p, a);
  spans.insert(spans.end(), {{dz == a.logits ? nullptr : a.logits, NV, "logits", false},  // in place: dz stands for both
                             {dz, NV, "dz", true}});
  refuse_overlaps("celtune_ce", spans);
}

// celtune_flce_config / celtune_ce_config: resolve without running. A buffer
// too small for the answer is an error, not a silently truncated config.
template <typename Args>
void report_config(celtune_context* ctx, const Args* args, Problem (*problem)(const Args&), char* json,
                   size_t json_size, char* tag, size_t tag_size) {
  if (!args) fail_usage("null args");
  const Problem p = problem(*args);
  const runtime::Resolved r = ctx->resolver->resolve(p, args->config_json);
  ctx->resolver->check_given(p, r, "config_json");  // as the call would refuse it
  // A truncated config would parse as something else or not at all: a buffer
  // too small is its own status, with the sizes needed in the message.
  const std::string t = runtime::to_string(r.source);
  if (json && json_size) std::snprintf(json, json_size, "%s", r.json.c_str());
  if (tag && tag_size) std::snprintf(tag, tag_size, "%s", t.c_str());
  auto fits = [](const char* buf, size_t size, const std::string& text) { return !buf || size > text.size(); };
  if (!fits(json, json_size, r.json) || !fits(tag, tag_size, t))
    throw BufferTooSmall("buffer too small: the config needs " + std::to_string(r.json.size() + 1) +
                         " bytes and the tag " + std::to_string(t.size() + 1) + " (with the terminating NUL); got " +
                         std::to_string(json_size) + " and " + std::to_string(tag_size));
}

// ---- CPU contexts ----------------------------------------------------------
// The caller's host arrays are read into a HostCase (floats, which hold every
// bf16/fp16 value exactly), the CPU backend runs, and its outputs are written
// back in the caller's dtype. The copies cost little next to the CPU kernels.

// Element counts come from the problem's one size rule (Problem::validate ran
// before any of these; the rule bounds each tensor, so the counts fit size_t).
size_t element_count(int64_t a, int64_t b, const char* what) {
  return static_cast<size_t>(checked_tensor_elements(a, b, what));
}

void need_host(const void* ptr, const char* what) {
  if (!ptr) fail_usage(std::string("null host pointer: ") + what);
}

std::vector<float> read_host(const void* ptr, size_t n, DType t, const char* what) {
  need_host(ptr, what);
  std::vector<float> v(n);
  if (t == DType::fp32) {
    std::memcpy(v.data(), ptr, n * sizeof(float));
  } else {
    const auto* bits = static_cast<const uint16_t*>(ptr);
    for (size_t k = 0; k < n; ++k) v[k] = half_bits_to_float(t, bits[k]);
  }
  return v;
}

// The CPU backend's gradients already hold values of the dtype, so the
// conversion to bits is exact.
void write_host(void* ptr, const std::vector<float>& v, DType t, const char* what) {
  need_host(ptr, what);
  if (t == DType::fp32) {
    std::memcpy(ptr, v.data(), v.size() * sizeof(float));
    return;
  }
  auto* bits = static_cast<uint16_t*>(ptr);
  for (size_t k = 0; k < v.size(); ++k) bits[k] = float_to_half_bits(t, v[k]);
}

// Targets, the upstream gradients and n_valid. A target outside [0, V) that
// is not ignore_index is treated as ignored and the first one returned (for
// bad_target), as the CUDA kernels do, so a caller sees the same behaviour on
// either device.
int64_t read_targets_and_grads(const Problem& p, const void* targets, const float* grad_scale,
                               const float* grad_tokens, HostCase& in) {
  need_host(targets, "targets");
  const auto n = static_cast<size_t>(p.tokens);
  in.targets.resize(n);
  for (size_t i = 0; i < n; ++i)
    in.targets[i] = p.target_type == TargetType::i32 ? static_cast<const int32_t*>(targets)[i]
                                                     : static_cast<const int64_t*>(targets)[i];
  int64_t bad = -1;
  in.n_valid = 0;
  for (size_t i = 0; i < n; ++i) {
    int64_t& t = in.targets[i];
    if (t == p.loss.ignore_index) continue;
    if (t < 0 || t >= p.vocab) {
      if (bad < 0) bad = static_cast<int64_t>(i);
      t = p.loss.ignore_index;
      continue;
    }
    ++in.n_valid;
  }
  // The backend reads a per-token scale for every row, forward only too.
  if (p.loss.reduction == Reduction::none) in.grad_tokens.assign(n, 0.0f);
  if (p.mode == Mode::forward_backward) {
    if (p.loss.reduction == Reduction::none) {
      need_host(grad_tokens, "grad_tokens");
      in.grad_tokens.assign(grad_tokens, grad_tokens + n);
    } else {
      need_host(grad_scale, "grad_scale");
      in.grad_scale = *grad_scale;
    }
  }
  return bad;
}

// The outputs every call writes; each family checks its gradients' too, all
// before anything is read or written, so a refused call leaves the caller's
// outputs as they were (loss and bad_target used to be written first).
void need_losses(const float* loss, const float* token_loss, const float* lse) {
  need_host(loss, "loss"), need_host(token_loss, "token_loss"), need_host(lse, "lse");
}

void write_losses(const Problem& p, const HostOutputs& out, float* loss, float* token_loss, float* lse) {
  *loss = out.loss;
  std::copy(out.token_loss.begin(), out.token_loss.end(), token_loss);
  std::copy(out.lse.begin(), out.lse.end(), lse);
  (void)p;
}

// A process forked after this thread ran CPU-backend calls: the child inherits
// the thread's OpenMP pool without its worker threads, and libgomp's next
// parallel region from that thread waits for them forever (a helper's probe:
// the child's first celtune_flce hung in GOMP_parallel, as Python's
// multiprocessing would with its fork start). In the child that one thread
// runs its parallel regions on itself; a thread the child starts makes a pool
// of its own, as any new thread does.
thread_local bool t_ran_openmp = false;
bool g_forked_from_openmp_thread = false;  // written in the forking thread only, between its handlers

HostOutputs run_on_cpu(Backend& cpu, const Problem& p, const KernelConfig& c, const HostCase& in) {
  static std::once_flag at_fork;
  std::call_once(at_fork, [] {
    ::pthread_atfork([] { g_forked_from_openmp_thread = t_ran_openmp; }, nullptr, [] {
      if (g_forked_from_openmp_thread) omp_set_num_threads(1);
    });
  });
  t_ran_openmp = true;
  return cpu.run(p, c, in);
}

void run_flce_cpu(Backend& cpu, const Problem& p, const KernelConfig& c, const celtune_flce_args& a) {
  need_losses(a.loss, a.token_loss, a.lse);
  if (p.mode == Mode::forward_backward) {
    need_host(a.dx, "dx"), need_host(a.dw, "dw");
    if (p.bias) need_host(a.db, "db");
  }
  HostCase in;
  const size_t nh = element_count(p.tokens, p.hidden, "x"), vh = element_count(p.vocab, p.hidden, "w");
  in.x = read_host(a.x, nh, p.dtype, "x");
  in.w = read_host(a.w, vh, p.dtype, "w");
  if (p.bias) in.b = read_host(a.bias, static_cast<size_t>(p.vocab), p.dtype, "bias");
  const int64_t bad = read_targets_and_grads(p, a.targets, a.grad_scale, a.grad_tokens, in);
  const HostOutputs out = run_on_cpu(cpu, p, c, in);
  write_losses(p, out, a.loss, a.token_loss, a.lse);
  if (a.bad_target) *a.bad_target = bad;
  if (p.mode == Mode::forward_backward) {
    write_host(a.dx, out.dx, p.dtype, "dx");
    write_host(a.dw, out.dw, p.dtype, "dw");
    if (p.bias) write_host(a.db, out.db, p.dtype, "db");
  }
}

void run_ce_cpu(Backend& cpu, const Problem& p, const KernelConfig& c, const celtune_ce_args& a) {
  need_losses(a.loss, a.token_loss, a.lse);
  if (p.mode == Mode::forward_backward) need_host(a.dz, "dz");
  HostCase in;
  in.logits = read_host(a.logits, element_count(p.tokens, p.vocab, "logits"), p.dtype, "logits");
  const int64_t bad = read_targets_and_grads(p, a.targets, a.grad_scale, a.grad_tokens, in);
  const HostOutputs out = run_on_cpu(cpu, p, c, in);
  write_losses(p, out, a.loss, a.token_loss, a.lse);
  if (a.bad_target) *a.bad_target = bad;
  // dz may equal logits (in place): the logits were copied into `in` above.
  if (p.mode == Mode::forward_backward) write_host(a.dz, out.grad_logits, p.dtype, "dz");
}

#ifdef CELTUNE_HAVE_CUDA
cuda::Context& device_context(celtune_context* ctx) {
  if (!ctx->cuda) fail_env("no CUDA device was available when this context was created");
  int dev = -1;
  if (cudaGetDevice(&dev) != cudaSuccess || dev != ctx->cuda->device())
    fail_usage("the current CUDA device (" + std::to_string(dev) + ") is not this context's (" +
               std::to_string(ctx->cuda->device()) + "): use one context per device");
  return *ctx->cuda;
}
#endif

}  // namespace

extern "C" {

void celtune_loss_defaults(celtune_loss_options* o) {
  if (!o) return;
  o->ignore_index = -100;
  o->reduction = CELTUNE_MEAN;
  o->label_smoothing = 0;
  o->softcap = 0;
  o->z_loss = 0;
}

const char* celtune_version(void) { return CELTUNE_VERSION; }

size_t celtune_sizeof(const char* type_name) {
  if (!type_name) return 0;
  const std::string_view n(type_name);
  if (n == "celtune_flce_args") return sizeof(celtune_flce_args);
  if (n == "celtune_ce_args") return sizeof(celtune_ce_args);
  if (n == "celtune_loss_options") return sizeof(celtune_loss_options);
  return 0;
}

celtune_status celtune_create(celtune_context** out, const char* db_path) {
  if (!out) return remember_create(CELTUNE_ERROR_INVALID_ARGUMENT, "celtune_create: null output pointer");
  *out = nullptr;
  auto ctx = std::make_unique<celtune_context>();
  const celtune_status st = guarded(ctx.get(), [&] {
#ifdef CELTUNE_HAVE_CUDA
    int dev = -1;
    if (cuda::device_count() > 0 && cudaGetDevice(&dev) == cudaSuccess) {
      ctx->device = cuda::device_info(dev);
      ctx->cuda = std::make_unique<cuda::Context>(dev);
    }
#endif
    runtime::DeviceChecks checks;
#ifdef CELTUNE_HAVE_CUDA
    if (ctx->cuda) {
      checks.supports = [](const Problem& p, const KernelConfig& c) {
        try {
          cuda::check_supported(p, c);
          return std::string();
        } catch (const Error& e) {
          return std::string(e.what());
        }
      };
      checks.scratch_bytes = [](const Problem& p, const KernelConfig& c) { return cuda::scratch_bytes(p, c); };
    }
#endif
    if (ctx->device.name.empty()) {
      // No GPU: lookups answer for the CPU, as `celtune lookup` does, so rows
      // tuned with --device cpu are found (kernel calls still need a GPU).
      auto cpu = std::shared_ptr<const Backend>(open_backend("cpu"));
      ctx->device = cpu->device();
      checks = runtime::backend_checks(cpu);
    }
    ctx->resolver = std::make_unique<runtime::Resolver>(runtime::find_databases(db_path ? db_path : ""), ctx->device,
                                                        kKernelSourceHash, std::cerr, std::move(checks));
  });
  if (st == CELTUNE_OK) *out = ctx.release();
  return remember_create(st, ctx ? ctx->last_error() : "");
}

celtune_status celtune_create_cpu(celtune_context** out, const char* db_path) {
  if (!out) return remember_create(CELTUNE_ERROR_INVALID_ARGUMENT, "celtune_create_cpu: null output pointer");
  *out = nullptr;
  auto ctx = std::make_unique<celtune_context>();
  const celtune_status st = guarded(ctx.get(), [&] {
    ctx->cpu = cpu::make_backend();
    ctx->device = ctx->cpu->device();
    ctx->resolver = std::make_unique<runtime::Resolver>(runtime::find_databases(db_path ? db_path : ""), ctx->device,
                                                        kKernelSourceHash, std::cerr, runtime::backend_checks(ctx->cpu));
  });
  if (st == CELTUNE_OK) *out = ctx.release();
  return remember_create(st, ctx ? ctx->last_error() : "");
}

void celtune_destroy(celtune_context* ctx) { delete ctx; }

int celtune_context_device(const celtune_context* ctx) {
#ifdef CELTUNE_HAVE_CUDA
  if (ctx && ctx->cuda) return ctx->cuda->device();
#endif
  (void)ctx;
  return -1;
}

const char* celtune_last_error(const celtune_context* ctx) {
  if (!ctx) return t_create_error[0] ? t_create_error : "null context";
  return ctx->last_error();
}

celtune_status celtune_flce_config(celtune_context* ctx, const celtune_flce_args* args, char* json, size_t json_size,
                                   char* tag, size_t tag_size) {
  return guarded(ctx, [&] { report_config(ctx, args, flce_problem, json, json_size, tag, tag_size); });
}

celtune_status celtune_ce_config(celtune_context* ctx, const celtune_ce_args* args, char* json, size_t json_size,
                                 char* tag, size_t tag_size) {
  return guarded(ctx, [&] { report_config(ctx, args, ce_problem, json, json_size, tag, tag_size); });
}

celtune_status celtune_flce(celtune_context* ctx, const celtune_flce_args* args, celtune_stream stream) {
  return guarded(ctx, [&] {
    if (!args) fail_usage("null args");
    const Problem p = flce_problem(*args);
    refuse_overlaps(p, *args);
    const runtime::Resolved r = ctx->resolver->resolve(p, args->config_json);
    if (ctx->cpu) return run_flce_cpu(*ctx->cpu, p, r.config, *args);
#ifdef CELTUNE_HAVE_CUDA
    // The GEMMs (cuBLASLt's, and the fused path's TMA) read and write X, W, dX
    // and dW in 16-byte pieces: a pointer off that grid is refused here, by name,
    // before any launch. Before, the call failed part-way through, at the first
    // GEMM: TMA's check, or cuBLASLt's bare "error 15" (not supported).
    auto aligned = [](const void* ptr, const char* what) {
      if (reinterpret_cast<uintptr_t>(ptr) % 16)
        fail_usage(std::string("celtune_flce: ") + what + " must be 16-byte aligned on a GPU (its GEMMs read rows "
                   "in 16-byte pieces): a slice of a buffer can start off that grid; copy it");
    };
    aligned(args->x, "x"), aligned(args->w, "w");
    if (p.mode == Mode::forward_backward) aligned(args->dx, "dx"), aligned(args->dw, "dw");
    cuda::Args a;
    a.x = args->x, a.w = args->w, a.b = args->bias, a.targets = args->targets;
    a.grad_scale = args->grad_scale, a.grad_tokens = args->grad_tokens;
    a.loss = args->loss, a.token_loss = args->token_loss, a.lse = args->lse;
    a.dx = args->dx, a.dw = args->dw, a.db = args->db, a.bad_target = args->bad_target;
    cuda::run_flce(device_context(ctx), p, r.config, a, static_cast<cudaStream_t>(stream));
#else
    (void)stream;
    fail_env("this build of libceltune has no CUDA backend");
#endif
  });
}

celtune_status celtune_ce(celtune_context* ctx, const celtune_ce_args* args, celtune_stream stream) {
  return guarded(ctx, [&] {
    if (!args) fail_usage("null args");
    const Problem p = ce_problem(*args);
    refuse_overlaps(p, *args);
    const runtime::Resolved r = ctx->resolver->resolve(p, args->config_json);
    if (ctx->cpu) return run_ce_cpu(*ctx->cpu, p, r.config, *args);
#ifdef CELTUNE_HAVE_CUDA
    cuda::Args a;
    a.logits = args->logits, a.targets = args->targets, a.grad_scale = args->grad_scale;
    a.grad_tokens = args->grad_tokens, a.loss = args->loss, a.token_loss = args->token_loss, a.lse = args->lse;
    a.dz = args->dz, a.bad_target = args->bad_target;
    cuda::run_ce(device_context(ctx), p, r.config, a, static_cast<cudaStream_t>(stream));
#else
    (void)stream;
    fail_env("this build of libceltune has no CUDA backend");
#endif
  });
}

celtune_status celtune_scale(celtune_context* ctx, void* dst, const void* src, int64_t n, celtune_dtype dtype,
                             const float* scale, celtune_stream stream) {
  return guarded(ctx, [&] {
    const DType t = checked_enum<DType>(dtype, 3, "dtype");
    if (n < 0) fail_usage("celtune_scale: n must be >= 0, got " + std::to_string(n));
    if (n > INT64_MAX / static_cast<int64_t>(dtype_bytes(t)))
      fail_usage("celtune_scale: " + std::to_string(n) + " elements overflow a byte count");
    if (n == 0) return;
    if (!dst || !src || !scale) fail_usage("celtune_scale: null dst, src or scale");
    // In place or apart: an overlap otherwise scaled elements already scaled
    // (dst = src + 1 gave 1 2 4 8 …, status 0).
    const auto d = reinterpret_cast<uintptr_t>(dst), s0 = reinterpret_cast<uintptr_t>(src);
    const auto bytes = static_cast<uintptr_t>(n) * static_cast<uintptr_t>(dtype_bytes(t));
    if (d != s0 && d < s0 + bytes && s0 < d + bytes)
      fail_usage("celtune_scale: dst and src overlap without being equal (in place is dst == src)");
    if (ctx->cpu) {
      // Element by element, no copy: dst may be src (each element is read
      // before it is written), and n may be past what a vector can hold. A zero
      // stays as it is, as in the CUDA kernel (scale.cu says why).
      const float g = *scale;
      if (dst == src && g == 1.0f) return;  // nothing changes (scale.cu)
      auto scaled = [g](float x) { return x == 0.0f ? x : x * g; };
      if (t == DType::fp32) {
        for (int64_t k = 0; k < n; ++k) static_cast<float*>(dst)[k] = scaled(static_cast<const float*>(src)[k]);
        return;
      }
      const auto* in = static_cast<const uint16_t*>(src);
      auto* out = static_cast<uint16_t*>(dst);
      for (int64_t k = 0; k < n; ++k) out[k] = float_to_half_bits(t, scaled(half_bits_to_float(t, in[k])));
      return;
    }
#ifdef CELTUNE_HAVE_CUDA
    device_context(ctx);  // the current device is the context's
    cuda::scale(dst, src, n, t, scale, static_cast<cudaStream_t>(stream));
#else
    (void)stream;
    fail_env("this build of libceltune has no CUDA backend");
#endif
  });
}

}  // extern "C"
