// Compiled segments: the description of a segment seen often enough sent to Python's compiler
// (torch_neuronx/adaptive/segments.py), and the kernels it installs — or its failures.
#include <torch/csrc/DynamicTypes.h>
#include <torch/csrc/jit/python/pybind_utils.h>
#include <torch/csrc/utils/tensor_memoryformats.h>

#include <algorithm>
#include <dlfcn.h>

#include "parts.h"

namespace py = pybind11;

namespace torch_neuronx::adaptive {

namespace {

// A non-tensor argument as Python sees it: dtypes, layouts and memory formats travel as ints.
py::object argument_object(const c10::IValue& v, const c10::Argument& arg) {
  if (!v.isInt()) return torch::jit::toPyObject(v);
  auto type = arg.real_type();
  if (auto opt = type->cast<c10::OptionalType>()) type = opt->getElementType();
  switch (type->kind()) {
    case c10::TypeKind::ScalarTypeType: return dtype_object(static_cast<c10::ScalarType>(v.toInt()));
    case c10::TypeKind::LayoutType:
      return py::reinterpret_borrow<py::object>(
          reinterpret_cast<PyObject*>(torch::getTHPLayout(static_cast<c10::Layout>(v.toInt()))));
    case c10::TypeKind::MemoryFormatType:
      return py::reinterpret_steal<py::object>(
          Py_NewRef(torch::utils::getTHPMemoryFormat(static_cast<c10::MemoryFormat>(v.toInt()))));
    default: return torch::jit::toPyObject(v);
  }
}

// The exported entry of a loaded library (`library`: its path), or null.
NativeEntry find_entry(const std::string& library) {
  if (library.empty()) return nullptr;
  void* handle = dlopen(library.c_str(), RTLD_NOW | RTLD_NOLOAD);  // Python has loaded it; kept open
  return handle ? reinterpret_cast<NativeEntry>(dlsym(handle, "neuron_segment_entry")) : nullptr;
}

}  // namespace

py::object dtype_object(c10::ScalarType dtype) {
  return py::reinterpret_borrow<py::object>(reinterpret_cast<PyObject*>(torch::getTHPDtype(dtype)));
}

void request_compile(uint64_t id, std::shared_ptr<Description> d, std::vector<c10::IValue> values,
                     std::vector<c10::IValue> first_values, std::vector<bool> live, Actions& actions) {
  std::shared_ptr<KernelObject> callback;
  {
    std::lock_guard<std::mutex> lock(tables_mu);
    callback = compiler;
  }
  if (!callback) return;
  actions.push_back([=] {
    py::gil_scoped_acquire gil;
    py::list ops, args, roles, returns;
    size_t arg = 0, ret = 0;
    for (size_t i = 0; i < d->ops.size(); ++i) {
      const auto& name = d->ops[i].operator_name();
      ops.append(py::make_tuple(name.name, name.overload_name));
      py::list a, kinds;
      const auto& schema = d->ops[i].schema();
      for (size_t j = 0; j < d->roles[i]->size(); ++j, ++arg) {
        const Role role = (*d->roles[i])[j];
        a.append(role == Role::Value ? argument_object(d->args[arg], schema.arguments()[j])
                                     : torch::jit::toPyObject(d->args[arg]));
        kinds.append(static_cast<int>(role));
      }
      args.append(a);
      roles.append(kinds);
      py::list r;
      for (; ret < d->returns_end[i]; ++ret) r.append(torch::jit::toPyObject(d->returns[ret]));
      returns.append(r);
    }
    auto to_list = [](const std::vector<c10::IValue>& vs) {
      py::list l;
      for (const auto& v : vs) l.append(torch::jit::toPyObject(v));
      return l;
    };
    py::dict description;
    description["ops"] = ops;
    description["args"] = args;
    description["roles"] = roles;
    description["returns"] = returns;
    description["refs"] = py::cast(d->refs);
    description["ref_at"] = py::cast(d->ref_at);
    description["producers"] = py::cast(d->producers);
    description["results"] = py::cast(d->results);
    description["layouts"] = py::cast(d->layouts);
    description["reuses"] = py::cast(d->reuses);
    description["values"] = to_list(values);
    description["first_values"] = to_list(first_values);
    description["live"] = py::cast(live);
    try {
      callback->object(id, description);
    } catch (py::error_already_set& e) {
      e.restore();
      PyErr_WriteUnraisable(nullptr);  // a compiler bug must not break the user's program
    }
  });
}

void install(uint64_t id, py::object kernel, const std::string& library, std::vector<int> input_refs,
             std::vector<int> outputs, std::vector<int> runtime_values, std::string name, std::string replaced) {
  auto f = std::make_shared<Fused>();
  f->kernel = std::make_shared<KernelObject>(std::move(kernel));
  f->entry = find_entry(library);
  f->input_refs = std::move(input_refs);
  f->outputs = std::move(outputs);
  f->runtime_values = std::move(runtime_values);
  f->name = std::move(name);
  f->replaced = std::move(replaced);
  std::lock_guard<std::mutex> lock(tables_mu);
  auto it = observations.find(id);
  TORCH_CHECK(it != observations.end() && it->second.state == Observation::kCompiling, "adaptive eager: segment ", id,
              " was not asked for");
  auto& o = it->second;
  f->key = o.key;
  f->live = o.live;
  for (size_t i = 0; i < o.values.size(); ++i)
    if (std::find(f->runtime_values.begin(), f->runtime_values.end(), static_cast<int>(i)) == f->runtime_values.end())
      f->fixed.emplace_back(static_cast<int>(i), o.values[i]);
  prefixes.insert(o.chain.begin(), o.chain.end());
  fused_by_hash[id] = std::move(f);
  o.state = Observation::kInstalled;
  ++counters.segments_compiled;
  ++installs;
}

void fail(uint64_t id) {
  std::lock_guard<std::mutex> lock(tables_mu);
  auto it = observations.find(id);
  if (it == observations.end()) return;
  it->second.state = Observation::kFailed;
  ++counters.compile_failures;
}

}  // namespace torch_neuronx::adaptive
