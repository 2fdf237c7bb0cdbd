#include "compiled_graph.h"

#include <torch/csrc/autograd/python_variable.h>

#include "device.h"

namespace py = pybind11;

namespace torch_neuronx {
namespace {

// Device tensors with the sizes, strides and dtypes of `specs` (meta tensors): a graph's outputs.
std::vector<at::Tensor> empty_outputs(const std::vector<at::Tensor>& specs, int device) {
  const c10::Device target(kNeuron, static_cast<c10::DeviceIndex>(device));
  std::vector<at::Tensor> outputs;
  outputs.reserve(specs.size());
  for (const at::Tensor& s : specs)
    outputs.push_back(at::empty_strided(s.sizes(), s.strides(), s.options().device(target)));
  return outputs;
}

// Host aliases of the device tensors in `values` (other values pass through), sharing one CPU
// storage per device storage so the compiled code sees arguments that alias as aliasing.
py::list host_aliases(const py::list& values) {
  HostAliases alias;
  py::list result(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    PyObject* v = values[i].ptr();
    result[i] = THPVariable_Check(v) ? py::cast(alias(THPVariable_Unpack(v))) : values[i];
  }
  return result;
}

}  // namespace

void bind_compiled_graph(py::module_& m) {
  m.def("_empty_outputs", &empty_outputs);
  m.def("_host_aliases", &host_aliases);
}

}  // namespace torch_neuronx
