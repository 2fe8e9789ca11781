// Self-registration of Python bindings, so that each kernel file binds itself
// and csrc/core/module.cpp never has to list them.
#pragma once
#include <pybind11/pybind11.h>

#include <utility>
#include <vector>

namespace metacog {

using BindFn = void (*)(pybind11::module_&);

inline std::vector<std::pair<const char*, BindFn>>& binding_registry() {
  static std::vector<std::pair<const char*, BindFn>> fns;  // function-local: no init-order fiasco
  return fns;
}

struct BindingRegistrar {
  BindingRegistrar(const char* name, BindFn fn) { binding_registry().emplace_back(name, fn); }
};

}  // namespace metacog

// Usage (at namespace scope in a .cpp):  METACOG_BIND(rssm) { m.def(...); }
#define METACOG_BIND(name)                                                           \
  static void metacog_bind_##name(pybind11::module_& m);                             \
  static ::metacog::BindingRegistrar metacog_bind_reg_##name(#name, &metacog_bind_##name); \
  static void metacog_bind_##name(pybind11::module_& m)
