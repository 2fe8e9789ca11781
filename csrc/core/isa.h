// Run-time ISA dispatch. Files in csrc/cpu/isa/ are compiled once per ISA
// (generic, avx2, avx512, avx512bf16) with METACOG_ISA naming the namespace;
// each registers its functions by name, and callers fetch the pointer for the
// ISA selected from the CPU's flags (or forced with METACOG_ISA=... / set_isa).
#pragma once
#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

namespace metacog {

// Ordered from least to most capable.
enum class Isa : int { generic = 0, avx2 = 1, avx512 = 2, avx512bf16 = 3 };

const char* isa_name(Isa isa);
std::vector<std::string> compiled_isas();
std::vector<std::string> supported_isas();  // compiled and supported by this CPU
Isa selected_isa();
// Force a path (for tests and benchmarks); throws std::invalid_argument if unknown or unsupported.
void set_isa(const std::string& name);
std::uint64_t isa_generation();

void isa_register(const char* isa, const char* name, void* fn);
// Function compiled for the selected ISA; falls back to lower ISAs if a name
// exists only there. Throws std::runtime_error if the name is unknown.
void* isa_lookup(const char* name);
// Function for a given ISA exactly (nullptr if absent).
void* isa_lookup_exact(Isa isa, const char* name);

struct IsaRegistrar {
  IsaRegistrar(const char* isa, const char* name, void* fn) { isa_register(isa, name, fn); }
};

// Cached pointer that refreshes when set_isa changes the selection.
template <class F>
class IsaFn {
 public:
  explicit IsaFn(const char* name) : name_(name) {}
  F get() {
    auto gen = isa_generation();
    if (fn_ == nullptr || gen != gen_) {
      fn_ = reinterpret_cast<F>(isa_lookup(name_));
      gen_ = gen;
    }
    return fn_;
  }

 private:
  const char* name_;
  F fn_ = nullptr;
  std::uint64_t gen_ = 0;
};

}  // namespace metacog

#define METACOG_STR2(x) #x
#define METACOG_STR(x) METACOG_STR2(x)
#define METACOG_CAT2(a, b) a##b
#define METACOG_CAT(a, b) METACOG_CAT2(a, b)
// Inside an isa/ file, at namespace scope of metacog::METACOG_ISA:
//   METACOG_ISA_EXPORT(linear_f32, &linear_f32)
#define METACOG_ISA_EXPORT(name, fn)                                                     \
  static ::metacog::IsaRegistrar METACOG_CAT(metacog_isa_reg_, name)(                    \
      METACOG_STR(METACOG_ISA), #name, reinterpret_cast<void*>(fn));
