#include "core/isa.h"

#include <cstdlib>
#include <map>
#include <mutex>
#include <stdexcept>

namespace metacog {
namespace {

struct Registry {
  std::mutex mu;
  std::map<std::string, void*> fns[4];  // indexed by Isa
};

Registry& registry() {
  static Registry r;
  return r;
}

int isa_index(const std::string& name) {
  if (name == "generic") return 0;
  if (name == "avx2") return 1;
  if (name == "avx512") return 2;
  if (name == "avx512bf16" || name == "avx512_bf16") return 3;
  return -1;
}

bool cpu_supports(Isa isa) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  switch (isa) {
    case Isa::generic:
      return true;
    case Isa::avx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case Isa::avx512:
      return cpu_supports(Isa::avx2) && __builtin_cpu_supports("avx512f") &&
             __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
             __builtin_cpu_supports("avx512dq");
    case Isa::avx512bf16:
      return cpu_supports(Isa::avx512) && __builtin_cpu_supports("avx512bf16");
  }
  return false;
#else
  return isa == Isa::generic;
#endif
}

Isa best_supported() {
  for (int i = 3; i > 0; --i)
    if (cpu_supports(static_cast<Isa>(i))) return static_cast<Isa>(i);
  return Isa::generic;
}

std::atomic<int>& selected_index() {
  static std::atomic<int> sel([] {
    int best = static_cast<int>(best_supported());
    if (const char* env = std::getenv("METACOG_ISA")) {
      int want = isa_index(env);
      if (want >= 0 && want <= best) return want;  // an unusable request keeps the best path
    }
    return best;
  }());
  return sel;
}

std::atomic<std::uint64_t> g_generation{1};

}  // namespace

const char* isa_name(Isa isa) {
  static const char* names[] = {"generic", "avx2", "avx512", "avx512_bf16"};
  return names[static_cast<int>(isa)];
}

std::vector<std::string> compiled_isas() { return {"generic", "avx2", "avx512", "avx512_bf16"}; }

std::vector<std::string> supported_isas() {
  std::vector<std::string> out;
  for (int i = 0; i < 4; ++i)
    if (cpu_supports(static_cast<Isa>(i))) out.emplace_back(isa_name(static_cast<Isa>(i)));
  return out;
}

Isa selected_isa() { return static_cast<Isa>(selected_index().load()); }

void set_isa(const std::string& name) {
  int idx = name == "auto" ? static_cast<int>(best_supported()) : isa_index(name);
  if (idx < 0)
    throw std::invalid_argument("isa: unknown ISA '" + name +
                                "', expected one of auto, generic, avx2, avx512, avx512_bf16");
  if (!cpu_supports(static_cast<Isa>(idx)))
    throw std::invalid_argument("isa: this CPU does not support '" + name + "'");
  selected_index().store(idx);
  g_generation.fetch_add(1);
}

std::uint64_t isa_generation() { return g_generation.load(); }

void isa_register(const char* isa, const char* name, void* fn) {
  int idx = isa_index(isa);
  if (idx < 0) return;
  auto& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.fns[idx][name] = fn;
}

void* isa_lookup_exact(Isa isa, const char* name) {
  auto& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto& m = r.fns[static_cast<int>(isa)];
  auto it = m.find(name);
  return it == m.end() ? nullptr : it->second;
}

void* isa_lookup(const char* name) {
  for (int i = static_cast<int>(selected_isa()); i >= 0; --i)
    if (void* fn = isa_lookup_exact(static_cast<Isa>(i), name)) return fn;
  throw std::runtime_error(std::string("isa: no compiled kernel named '") + name + "'");
}

}  // namespace metacog
