// A Python object owned by a queued kernel.
#pragma once

#include <torch/csrc/utils/pybind.h>

namespace torch_neuronx {

// Kernels are destroyed by whichever thread drains the queue, holding the interpreter lock or
// not, so the release takes it.
struct KernelObject {
  explicit KernelObject(pybind11::object o) : object(std::move(o)) {}
  ~KernelObject() {
    pybind11::gil_scoped_acquire gil;
    object = pybind11::object();
  }
  pybind11::object object;
};

}  // namespace torch_neuronx
