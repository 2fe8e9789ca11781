// Checks for raw numpy buffers handed to the core. The Python layer converts
// and validates first; these checks keep a bad call from ever reaching a
// kernel (a ValueError naming the argument, never a segfault).
#pragma once
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <initializer_list>
#include <sstream>
#include <string>

namespace metacog {

namespace py = pybind11;

inline std::string shape_str(const py::array& a) {
  std::ostringstream os;
  os << "[";
  for (py::ssize_t i = 0; i < a.ndim(); ++i) os << (i ? ", " : "") << a.shape(i);
  os << "]";
  return os.str();
}

// Checks float32, C-contiguous and the shape (-1 = any size on that axis).
template <class T = float>
inline void check_array(const py::array& a, const char* name, std::initializer_list<py::ssize_t> shape) {
  if (!py::isinstance<py::array_t<T>>(a) || !a.dtype().is(py::dtype::of<T>()))
    throw py::value_error(std::string(name) + ": expected dtype " +
                          std::string(py::str(py::dtype::of<T>())) + ", got " +
                          std::string(py::str(a.dtype())));
  if (!(a.flags() & py::array::c_style))
    throw py::value_error(std::string(name) + ": expected a C-contiguous array");
  if (static_cast<size_t>(a.ndim()) != shape.size())
    throw py::value_error(std::string(name) + ": expected " + std::to_string(shape.size()) +
                          " dimensions, got shape " + shape_str(a));
  py::ssize_t i = 0;
  for (auto s : shape) {
    if (s >= 0 && a.shape(i) != s) {
      std::ostringstream os;
      os << name << ": axis " << i << " must have size " << s << ", got shape " << shape_str(a);
      throw py::value_error(os.str());
    }
    ++i;
  }
}

template <class T = float>
inline const T* cptr(const py::array& a) { return static_cast<const T*>(a.data()); }
template <class T = float>
inline T* mptr(py::array& a) { return static_cast<T*>(a.mutable_data()); }

}  // namespace metacog
