#include "compiled_graph.h"

#include <c10/core/DeviceGuard.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/utils/pybind.h>
#include <pybind11/stl.h>

#include <map>
#include <mutex>
#include <optional>

#include "allocator.h"
#include "device.h"
#include "host_aliases.h"
#include "launch.h"
#include "kernel_object.h"

namespace py = pybind11;

namespace torch_neuronx {
namespace {

// The allocations of the compiled graph running on this thread: the device buffer (host alias)
// each allocation position computes in, if any, and with `made` every allocation (recording).
struct GraphAllocations {
  const std::vector<at::Tensor>& given;
  std::vector<at::Tensor>* made = nullptr;
  size_t count = 0;
};
thread_local GraphAllocations* tls_allocations = nullptr;

// Runs a compiled graph's generated code with `allocations` as its allocator's state.
py::object run_generated(const py::object& compiled, py::list hosts, GraphAllocations& allocations) {
  struct Scope {
    explicit Scope(GraphAllocations* a) { tls_allocations = a; }
    ~Scope() { tls_allocations = nullptr; }
  } scope(&allocations);
  return compiled(std::move(hosts));  // the boxed call empties the list
}

std::vector<int64_t> int_tuple(PyObject* obj) {
  TORCH_CHECK(PyTuple_Check(obj) || PyList_Check(obj), "empty_strided_cpu: sizes and strides must be tuples");
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(obj);
  std::vector<int64_t> values(n);
  for (Py_ssize_t i = 0; i < n; ++i) values[i] = THPUtils_unpackLong(PySequence_Fast_GET_ITEM(obj, i));
  return values;
}

// The generated code's CPU allocator (`empty_strided_cpu(size, stride, dtype)`), as seen from a
// neuron kernel: allocation k is the device buffer given for it, or a CPU allocation; outside a
// kernel, the plain CPU allocation. Called per buffer of every graph call: raw CPython API.
PyObject* graph_allocate(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  HANDLE_TH_ERRORS
  TORCH_CHECK(nargs == 3 && THPDtype_Check(args[2]), "empty_strided_cpu(size, stride, dtype)");
  const auto size = int_tuple(args[0]);
  const auto stride = int_tuple(args[1]);
  const auto dtype = reinterpret_cast<THPDtype*>(args[2])->scalar_type;
  GraphAllocations* state = tls_allocations;
  at::Tensor buffer;
  if (state && state->count < state->given.size() && state->given[state->count].defined()) {
    buffer = state->given[state->count];
    TORCH_CHECK(buffer.scalar_type() == dtype && buffer.sizes() == c10::IntArrayRef(size) &&
                    buffer.strides() == c10::IntArrayRef(stride),
                "compiled graph: allocation ", state->count, " is ", c10::IntArrayRef(size), ", ",
                c10::IntArrayRef(stride), ", ", dtype, ", but its first call made it ", buffer.sizes(), ", ",
                buffer.strides(), ", ", buffer.scalar_type());
  } else {
    buffer = at::detail::empty_strided_cpu(size, stride, dtype);
  }
  if (state) {
    state->count++;
    if (state->made) state->made->push_back(buffer);
  }
  return THPVariable_Wrap(std::move(buffer));
  END_HANDLE_TH_ERRORS
}

// Where an output's elements are, when the output is not its source tensor itself.
struct View {
  std::vector<int64_t> sizes, strides;
  int64_t offset;
  at::ScalarType dtype;
};

// One output of a compiled graph's call (torch_neuronx/compile/executable.py learns them from
// the first call): a device buffer, an input, a tensor on the memory of either, or a value.
struct Output {
  enum Source { kBuffer, kInput, kValue } source;
  int index = 0;                // of the buffer or input
  std::optional<View> view;     // none: the buffer or input itself
  py::object value;             // kValue: the value returned
};

// A tensor on `base`'s storage with the geometry of `view`, as Inductor's reinterpret_tensor
// makes one: it shares memory but is not an autograd view of `base`.
at::Tensor reinterpret(const at::Tensor& base, const View& view) {
  auto impl = c10::make_intrusive<c10::TensorImpl>(c10::Storage(base.storage()), base.key_set(),
                                                   c10::scalarTypeToTypeMeta(view.dtype));
  impl->set_sizes_and_strides(view.sizes, view.strides, view.offset);
  return at::Tensor(std::move(impl));
}

// Host aliases of the device tensors among `values` (other values pass through).
py::list host_values(const py::list& values, HostAliases& alias) {
  py::list result(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    PyObject* v = values[i].ptr();
    result[i] = THPVariable_Check(v) ? py::cast(alias(THPVariable_Unpack(v))) : values[i];
  }
  return result;
}

// Host aliases of a graph's device tensors (its inputs, then a call's buffers), kept from the
// previous call for every tensor that is where it was — same memory, layout and dtype:
// parameters and optimizer state stay, and the allocator hands a training step's buffers the
// same blocks every step (lowest address first). An alias only names memory, so it serves any
// tensor with that address and layout. Aliases share a CPU storage exactly where the device
// tensors share one.
class AliasCache {
 public:
  std::vector<at::Tensor> of(const std::vector<at::Tensor>& tensors) {
    std::lock_guard<std::mutex> lock(mu_);  // one graph may run on several cores at once
    aliases_.resize(tensors.size());
    std::vector<size_t> stale;
    for (size_t i = 0; i < tensors.size(); ++i)
      if (!serves(aliases_[i], tensors[i])) stale.push_back(i);
    if (!stale.empty()) {
      std::vector<std::pair<const void*, c10::Storage>> storages;  // of the aliases kept
      for (size_t i = 0, j = 0; i < tensors.size(); ++i) {
        if (j < stale.size() && stale[j] == i) {
          ++j;
          continue;
        }
        if (aliases_[i].defined() && aliases_[i].storage().data())
          storages.emplace_back(aliases_[i].storage().data(), aliases_[i].storage());
      }
      for (size_t i : stale) aliases_[i] = make_alias(tensors[i], storages);
    }
    return aliases_;
  }

 private:
  static bool serves(const at::Tensor& alias, const at::Tensor& t) {
    if (!t.defined() || !alias.defined()) return t.defined() == alias.defined();
    return alias.storage().data() == t.storage().data() && alias.storage().nbytes() == t.storage().nbytes() &&
           alias.scalar_type() == t.scalar_type() && alias.storage_offset() == t.storage_offset() &&
           alias.sizes() == t.sizes() && alias.strides() == t.strides();
  }

  static at::Tensor make_alias(const at::Tensor& t, std::vector<std::pair<const void*, c10::Storage>>& storages) {
    if (!t.defined()) return at::Tensor();
    const void* data = t.storage().data();
    for (const auto& [d, storage] : storages)
      if (data && d == data && storage.nbytes() == t.storage().nbytes())
        return tensor_on(storage, c10::DispatchKey::CPU, t);
    at::Tensor alias = host_alias(t);
    if (data) storages.emplace_back(data, alias.storage());
    return alias;
  }

  std::mutex mu_;
  std::vector<at::Tensor> aliases_;
};

// A compiled graph after its first call: the generated code, and how a call produces its
// outputs on the device — the device buffers it allocates (the generated code computes in
// them, or results are copied into them) and, per output, a buffer, an input, a tensor on the
// memory of either, or a non-tensor value.
// The device a compiled graph's call runs on: its first device tensor's, or the graph's own
// (`graph_device`) when it takes none (create_block_mask(..., device="neuron") makes its tensors).
int call_device(const py::list& args, int graph_device) {
  for (const auto& arg : args)
    if (THPVariable_Check(arg.ptr()))
      if (const int device = THPVariable_Unpack(arg.ptr()).get_device(); device >= 0) return device;
  TORCH_CHECK(graph_device >= 0, "a neuron executable was called without a neuron tensor on a graph that makes none");
  return graph_device;
}

class CompiledGraph {
 public:
  // `buffer_of_allocation`: allocation position -> the buffer it computes in; `copies`:
  // (result, buffer it is copied into).
  CompiledGraph(py::object compiled, std::string name, std::vector<at::Tensor> buffer_specs,
                std::vector<Output> outputs, const std::map<int, int>& buffer_of_allocation,
                std::vector<std::pair<int, int>> copies)
      : code_(std::make_shared<Code>(std::move(compiled), std::move(name), buffer_of_allocation, std::move(copies))),
        buffer_specs_(std::move(buffer_specs)),
        outputs_(std::move(outputs)) {}

  // (outputs, buffers) of a call with the device tensors `inputs` on `device`: the device
  // buffers the generated code computes in, and the outputs on them (or on the inputs).
  std::pair<py::list, std::vector<at::Tensor>> make(const py::list& inputs, int device) const {
    std::vector<at::Tensor> buffers;
    buffers.reserve(buffer_specs_.size());
    {
      const c10::DeviceGuard on(c10::Device(kNeuron, static_cast<c10::DeviceIndex>(device)));  // the allocator's
      for (const at::Tensor& s : buffer_specs_)
        buffers.push_back(at::detail::empty_strided_generic(s.sizes(), s.strides(), allocator(),
                                                            c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                                            s.scalar_type()));
    }
    py::list outputs(outputs_.size());
    for (size_t i = 0; i < outputs_.size(); ++i) {
      const Output& o = outputs_[i];
      if (o.source == Output::kValue) {
        outputs[i] = o.value;
      } else if (o.source == Output::kBuffer) {
        outputs[i] = py::cast(o.view ? reinterpret(buffers[o.index], *o.view) : buffers[o.index]);
      } else {
        py::object input = inputs[o.index];
        outputs[i] = o.view ? py::cast(reinterpret(THPVariable_Unpack(input.ptr()), *o.view)) : input;
      }
    }
    return {std::move(outputs), std::move(buffers)};
  }

  // One call with AOTAutograd's boxed convention: takes the inputs out of `args` (so the caller's
  // list no longer keeps them alive) and returns the outputs, on the device of the first tensor
  // (`graph_device`, if not -1, for a graph that takes no tensor).
  py::list call_boxed(py::list& args, int graph_device) const {
    const int device = call_device(args, graph_device);
    py::list inputs(args.size());
    for (size_t i = 0; i < args.size(); ++i) inputs[i] = args[i];
    if (PyList_SetSlice(args.ptr(), 0, PY_SSIZE_T_MAX, nullptr) != 0) throw py::error_already_set();
    return call(inputs, device);
  }

  // One call on `device`: its outputs. The kernel runs on the calling thread when the core is
  // idle, with the compute threads (HostWork::kClaim), else it is queued.
  py::list call(const py::list& inputs, int device) const {
    auto [outputs, buffers] = make(inputs, device);
    const auto on = static_cast<c10::DeviceIndex>(device);
    bool ran;
    {
      py::gil_scoped_release nogil;
      ran = launch(on, [&] { run(*code_, inputs, buffers); },
                   {.name = code_->name, .host = neuron_rt::HostWork::kClaim, .completion = Launch::kInlineOnly});
    }
    if (ran) return outputs;
    // Queued, the kernel gets tensors of its own on the buffers' memory, so that it does not add
    // a reference to an output (autograd steals a gradient only when nothing else references
    // it, and clones it otherwise), and owns the inputs until it has run.
    for (at::Tensor& b : buffers) b = snapshot(b);
    std::function<void()> kernel = [code = code_, held = std::make_shared<KernelObject>(inputs),
                                    buffers = std::move(buffers)] {
      run(*code, py::reinterpret_borrow<py::list>(held->object), buffers);
    };
    py::gil_scoped_release nogil;
    launch(on, std::move(kernel), {.name = code_->name});
    return outputs;
  }

 private:
  // What a queued kernel needs after the executable may be gone.
  struct Code {
    Code(py::object compiled, std::string name, const std::map<int, int>& buffer_of_allocation,
         std::vector<std::pair<int, int>> copies)
        : compiled(std::move(compiled)), name(std::move(name)), copies(std::move(copies)) {
      for (const auto& [k, b] : buffer_of_allocation) {
        if (static_cast<size_t>(k) >= buffer_of_allocation_.size()) buffer_of_allocation_.resize(k + 1, -1);
        buffer_of_allocation_[k] = b;
      }
    }

    // On the core (holding the interpreter lock): the generated code on host aliases,
    // computing in the call's buffers.
    void run(const py::list& inputs, const std::vector<at::Tensor>& buffers) const {
      const size_t n = inputs.size();
      std::vector<at::Tensor> tensors(n);  // undefined: a value other than a tensor
      for (size_t i = 0; i < n; ++i)
        if (THPVariable_Check(inputs[i].ptr())) tensors[i] = THPVariable_Unpack(inputs[i].ptr());
      tensors.insert(tensors.end(), buffers.begin(), buffers.end());
      const std::vector<at::Tensor> aliases = aliases_.of(tensors);
      py::list hosts(n);
      for (size_t i = 0; i < n; ++i) hosts[i] = tensors[i].defined() ? py::cast(aliases[i]) : inputs[i];
      std::vector<at::Tensor> given(buffer_of_allocation_.size());
      for (size_t k = 0; k < given.size(); ++k)
        if (buffer_of_allocation_[k] >= 0) given[k] = aliases[n + buffer_of_allocation_[k]];
      GraphAllocations allocations{given};
      const py::object results = run_generated(compiled.object, std::move(hosts), allocations);
      for (const auto& [i, b] : copies) aliases[n + b].copy_(THPVariable_Unpack(py::sequence(results)[i].ptr()));
    }

    KernelObject compiled;
    std::string name;
    std::vector<std::pair<int, int>> copies;
    std::vector<int> buffer_of_allocation_;  // per allocation position: its buffer, or -1
    mutable AliasCache aliases_;
  };

  // The kernel, on the core (the calling thread or the worker): takes the interpreter lock.
  static void run(const Code& code, const py::list& inputs, const std::vector<at::Tensor>& buffers) {
    py::gil_scoped_acquire gil;
    try {
      code.run(inputs, buffers);
    } catch (py::error_already_set& e) {
      // Ctrl-C while the graph ran on the main thread (an idle core's launching thread): the
      // kernel failed like any other, and the caller is interrupted again right after.
      std::runtime_error failure(e.what());  // before the interrupt: formatting runs Python
      if (e.matches(PyExc_KeyboardInterrupt)) PyErr_SetInterrupt();
      throw failure;
    }
  }

  std::shared_ptr<const Code> code_;
  std::vector<at::Tensor> buffer_specs_;  // meta tensors
  std::vector<Output> outputs_;
};

// The first call of a compiled graph (on the core): its results and every allocation it made.
py::tuple record(const py::object& compiled, const py::list& hosts) {
  const std::vector<at::Tensor> none;
  std::vector<at::Tensor> made;
  GraphAllocations allocations{none, &made};
  py::object results = run_generated(compiled, hosts, allocations);
  return py::make_tuple(results, py::cast(made));
}

PyMethodDef allocate_def = {"_graph_allocate",
                            reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(graph_allocate)), METH_FASTCALL,
                            "empty_strided_cpu of compiled graphs running on a neuron core"};

}  // namespace

void bind_compiled_graph(py::module_& m) {
  py::class_<View>(m, "_OutputView")
      .def(py::init([](std::vector<int64_t> sizes, std::vector<int64_t> strides, int64_t offset, at::ScalarType dtype) {
    return View{std::move(sizes), std::move(strides), offset, dtype};
  }),
           py::kw_only(), py::arg("sizes"), py::arg("strides"), py::arg("offset"), py::arg("dtype"));
  py::class_<Output> output(m, "_GraphOutput");
  py::enum_<Output::Source>(output, "Source")
      .value("buffer", Output::kBuffer)
      .value("input", Output::kInput)
      .value("value", Output::kValue);
  output.def(py::init([](Output::Source source, int index, std::optional<View> view, py::object value) {
    return Output{source, index, std::move(view), std::move(value)};
  }),
             py::kw_only(), py::arg("source"), py::arg("index") = 0, py::arg("view") = py::none(),
             py::arg("value") = py::none());
  py::class_<CompiledGraph>(m, "_CompiledGraph")
      .def(py::init<py::object, std::string, std::vector<at::Tensor>, std::vector<Output>, const std::map<int, int>&,
                    std::vector<std::pair<int, int>>>())
      .def("make", [](const CompiledGraph& g, const py::list& inputs, int device) {
    auto [outputs, buffers] = g.make(inputs, device);
    for (at::Tensor& b : buffers) b = snapshot(b);  // for a queued kernel (see call)
    return py::make_tuple(outputs, py::cast(buffers));
  }).def("call_boxed", &CompiledGraph::call_boxed, py::arg("args"), py::arg("graph_device"));
  m.def("_compiled_graph_device", &call_device, py::arg("args"), py::arg("graph_device"));
  m.def("_record_compiled_graph", &record);
  m.def("_host_aliases", [](const py::list& values) {
    HostAliases alias;
    return host_values(values, alias);
  });
  m.add_object("_graph_allocate", py::reinterpret_steal<py::object>(PyCFunction_New(&allocate_def, nullptr)));
}

}  // namespace torch_neuronx
