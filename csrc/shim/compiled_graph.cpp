#include "compiled_graph.h"

#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/utils/pybind.h>

#include <optional>

#include "device.h"

namespace py = pybind11;

namespace torch_neuronx {
namespace {

// Where an output's elements are, when the output is not its source tensor itself.
struct View {
  std::vector<int64_t> sizes, strides;
  int64_t offset;
  at::ScalarType dtype;
};

// A tensor on `base`'s storage with the geometry of `view`, as Inductor's reinterpret_tensor
// makes one: it shares memory but is not an autograd view of `base`.
at::Tensor reinterpret(const at::Tensor& base, const View& view) {
  auto impl = c10::make_intrusive<c10::TensorImpl>(c10::Storage(base.storage()), base.key_set(),
                                                   c10::scalarTypeToTypeMeta(view.dtype));
  impl->set_sizes_and_strides(view.sizes, view.strides, view.offset);
  return at::Tensor(std::move(impl));
}

// How one call of a compiled graph produces its outputs on the device: the device buffers it
// allocates (the generated code computes in them, or results are copied into them) and, per
// output, a buffer, an input, a tensor on the memory of either, or a non-tensor value.
class OutputPlan {
 public:
  // `outputs`: per output (source, index, view, value), source "buffer", "input" or "value";
  // view None (the source itself) or (sizes, strides, storage offset, dtype).
  OutputPlan(std::vector<at::Tensor> buffer_specs, const py::list& outputs)
      : buffer_specs_(std::move(buffer_specs)) {
    for (const auto& item : outputs) {
      const auto entry = item.cast<py::tuple>();
      const auto source = entry[0].cast<std::string>();
      Output out{source == "buffer" ? kBuffer : source == "input" ? kInput : kValue,
                 entry[1].cast<int>(), std::nullopt, entry[3]};
      if (!entry[2].is_none()) {
        const auto v = entry[2].cast<py::tuple>();
        out.view = View{v[0].cast<std::vector<int64_t>>(), v[1].cast<std::vector<int64_t>>(),
                        v[2].cast<int64_t>(), v[3].cast<at::ScalarType>()};
      }
      outputs_.push_back(std::move(out));
    }
  }

  // (outputs, buffers) of a call with the device tensors `inputs` on `device`. The buffers
  // are for the kernel: other tensors than the outputs, on the same memory, so that a queued
  // kernel does not add a reference to an output (autograd steals a gradient only when nothing
  // else references it, and clones it otherwise).
  py::tuple make(const py::list& inputs, int device) const {
    const c10::Device target(kNeuron, static_cast<c10::DeviceIndex>(device));
    std::vector<at::Tensor> buffers;
    buffers.reserve(buffer_specs_.size());
    for (const at::Tensor& s : buffer_specs_)
      buffers.push_back(at::empty_strided(s.sizes(), s.strides(), s.options().device(target)));
    py::list outputs(outputs_.size());
    for (size_t i = 0; i < outputs_.size(); ++i) {
      const Output& o = outputs_[i];
      if (o.source == kValue) {
        outputs[i] = o.value;
      } else if (o.source == kBuffer) {
        outputs[i] = py::cast(o.view ? reinterpret(buffers[o.index], *o.view) : buffers[o.index]);
      } else {
        py::object input = inputs[o.index];
        outputs[i] = o.view ? py::cast(reinterpret(THPVariable_Unpack(input.ptr()), *o.view)) : input;
      }
    }
    for (at::Tensor& b : buffers) b = snapshot(b);
    return py::make_tuple(outputs, py::cast(buffers));
  }

 private:
  enum Source { kBuffer, kInput, kValue };
  struct Output {
    Source source;
    int index;
    std::optional<View> view;
    py::object value;
  };
  std::vector<at::Tensor> buffer_specs_;  // meta tensors
  std::vector<Output> outputs_;
};

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
  py::class_<OutputPlan>(m, "_OutputPlan")
      .def(py::init<std::vector<at::Tensor>, const py::list&>())
      .def("make", &OutputPlan::make);
  m.def("_host_aliases", &host_aliases);
}

}  // namespace torch_neuronx
