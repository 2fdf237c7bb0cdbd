#include "adaptive.h"

#include <c10/util/SmallVector.h>
#include <torch/csrc/DynamicTypes.h>
#include <torch/csrc/jit/python/pybind_utils.h>
#include <torch/csrc/utils/tensor_memoryformats.h>
#include <torch/csrc/utils/pybind.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <dlfcn.h>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "device.h"
#include "fused_placement.h"
#include "host_aliases.h"
#include "kernel_object.h"
#include "profiler.h"

namespace py = pybind11;

namespace torch_neuronx::adaptive {

namespace {

std::atomic<bool> on{false};
std::atomic<int> compile_after{2};  // a segment seen this many times is compiled
// A segment ends after this many calls (its fused kernel then runs while the host goes on) ...
std::atomic<int> max_calls{32};
std::atomic<int64_t> idle_limit_us{100000};  // ... or when the host sends nothing for this long
// Shorter segments are not compiled: a fused kernel for one or two calls saves less than holding
// them back and calling into Python costs.
constexpr size_t kMinCalls = 3;
constexpr size_t kMaxObservations = 1 << 16;  // segments only observed, kept at most
std::atomic<FusedPlacement::Mode> placement_mode{FusedPlacement::Mode::kAuto};
std::atomic<uint64_t> installs{0};  // fused kernels installed so far

uint64_t mix(uint64_t h, int64_t word) { return (h ^ static_cast<uint64_t>(word)) * 1099511628211ull; }
constexpr uint64_t kSeed = 1469598103934665603ull;

// A storage a segment has seen: an input from before it, or a fresh result of one of its calls.
struct SeenStorage {
  c10::weak_intrusive_ptr<c10::StorageImpl> storage;  // keeps the identity; liveness of results
  int producer = -1;                                  // the call that made it (-1: an input)
  const void* data = nullptr;                         // where its memory is (inputs)
};

// The C++ entry of a segment compiled with Inductor's C++ wrapper (segments.py): it takes the
// host tensors as owned handles (new at::Tensor) and returns an error message or null. It needs
// no interpreter lock, so a fused kernel runs beside the program's Python thread.
using NativeEntry = const char* (*)(void** inputs);

// One compiled segment, installed by Python (torch_neuronx/adaptive/segments.py).
struct Fused {
  std::vector<int64_t> key;                        // the segment's words, checked on a hash match
  std::vector<bool> live;                          // which results it writes (those still held)
  std::vector<int> input_refs;                     // tensor references it reads, in its order
  std::vector<int> outputs;                        // results it writes, in its order
  std::vector<int> runtime_values;                 // scalar values it takes as 0-dim tensors
  std::vector<std::pair<int, c10::IValue>> fixed;  // scalar values compiled in, checked
  std::shared_ptr<KernelObject> kernel;            // kernel(list of host tensors)
  NativeEntry entry = nullptr;                     // the same code's C++ entry, when it has one
  std::string name, replaced;                      // in the queue and the profiler
};

// What Python needs to build a segment's graph (kept for every segment: the one that reaches
// the compile count has it when it ends). Per call, its operator and roles; the calls' arguments
// and returns follow each other in flat lists (a call has as many arguments as roles;
// `returns_end` ends each call's returns), so describing a call adds to lists that keep their
// memory from segment to segment (Segment::clear) instead of making lists of its own.
struct Description {
  std::vector<c10::OperatorHandle> ops;
  std::vector<const std::vector<Role>*> roles;
  std::vector<c10::IValue> args;     // tensors as reference numbers, scalars as value numbers
  std::vector<c10::IValue> returns;  // per return: storage number(s), or None
  std::vector<size_t> returns_end;
  std::vector<int64_t> refs;  // per reference: storage (-1: a CPU scalar), dtype, dim, sizes, strides, offset
  std::vector<int64_t> ref_at;    // where each reference starts in `refs`
  std::vector<int> producers;     // per storage: the call that made it, -1 for inputs
  std::vector<int> results;       // fresh results, by storage number
  std::vector<int64_t> layouts;   // per fresh result: dtype, dim, sizes, strides (as the kernel makes it)
  std::vector<int> reuses;        // per fresh result: the input whose freed memory it got, or -1

  void clear() {
    ops.clear(), roles.clear(), args.clear(), returns.clear(), returns_end.clear(), refs.clear(), ref_at.clear();
    producers.clear(), results.clear(), layouts.clear(), reuses.clear();
  }
};

struct Segment {
  int stream = -1;
  std::thread::id thread;
  std::chrono::steady_clock::time_point last;
  uint64_t hash = kSeed;
  std::vector<uint64_t> chain;  // hash after each call
  std::vector<int64_t> key;
  std::vector<c10::IValue> values;
  std::vector<SeenStorage> storages;
  std::unordered_map<const c10::StorageImpl*, int> storage_index;
  Description desc;
  bool matching = false;          // calls are held back: it may become a compiled segment
  std::vector<Call> held;
  // While held: per reference and per fresh result, its record (held call, index in its records)
  std::vector<std::pair<int, int64_t>> ref_records, result_records;
  size_t calls() const { return chain.size(); }

  // Empty again, for the core's next segment: the containers keep their memory, which the
  // program's next segments, alike, reuse instead of growing new containers call by call.
  void clear() {
    stream = -1, hash = kSeed, matching = false;
    chain.clear(), key.clear(), values.clear(), storages.clear(), storage_index.clear(), desc.clear();
    held.clear(), ref_records.clear(), result_records.clear();
  }
};

struct Observation {
  int count = 0;
  enum State { kObserving, kCompiling, kInstalled, kFailed } state = kObserving;
  std::vector<c10::IValue> first_values;
  // Of the observation that asked for the compile:
  std::vector<c10::IValue> values;
  std::vector<int64_t> key;
  std::vector<bool> live;
  std::vector<uint64_t> chain;
};

struct Counters {
  int64_t segments_seen = 0, segments_compiled = 0, compile_failures = 0, fused_launches = 0, calls_fused = 0,
          calls_held_then_single = 0, fused_refused = 0;
};

std::mutex tables_mu;  // everything below
std::unordered_map<uint64_t, Observation> observations;
std::unordered_map<uint64_t, std::shared_ptr<const Fused>> fused_by_hash;
std::unordered_set<uint64_t> prefixes;
Counters counters;
std::shared_ptr<KernelObject> compiler;  // Python: compiler(segment_id, description)

struct CoreSegment {
  std::mutex mu;
  Segment seg;
  FusedPlacement placement;
};
std::array<CoreSegment, 64> cores;

CoreSegment& core_segment(c10::DeviceIndex device) { return cores.at(static_cast<size_t>(device)); }

bool is_device_tensor(const at::Tensor& t) { return t.defined() && t.device().type() == kNeuron; }

// The words of a tensor reference and its entry in the description.
int add_ref(Segment& s, const at::Tensor& t) {
  auto& d = s.desc;
  const int ref = static_cast<int>(d.ref_at.size());
  d.ref_at.push_back(static_cast<int64_t>(d.refs.size()));
  if (!is_device_tensor(t)) {  // a CPU scalar (0-dim): its value is a scalar of the segment
    d.refs.push_back(-1 - static_cast<int64_t>(s.values.size()));
    s.values.push_back(t.item());
    d.refs.push_back(static_cast<int64_t>(t.scalar_type()));
    d.refs.push_back(t.unsafeGetTensorImpl()->is_wrapped_number());
    return ref;
  }
  const c10::Storage& storage = t.unsafeGetTensorImpl()->unsafe_storage();
  auto [it, fresh] = s.storage_index.emplace(storage.unsafeGetStorageImpl(), static_cast<int>(s.storages.size()));
  if (fresh) {
    s.storages.push_back({storage.getWeakStorageImpl(), -1, storage.data()});
    d.producers.push_back(-1);
  }
  d.refs.push_back(it->second);
  d.refs.push_back(static_cast<int64_t>(t.scalar_type()));
  d.refs.push_back(t.dim());
  d.refs.insert(d.refs.end(), t.sizes().begin(), t.sizes().end());
  d.refs.insert(d.refs.end(), t.strides().begin(), t.strides().end());
  d.refs.push_back(t.storage_offset());
  return ref;
}

// The input of the segment whose memory a fresh result got from the allocator once the program
// had freed the input (its reads all came before), or -1. The compiled kernel writes such a
// result into that input; a partial overlap is refused at launch (memory_hazard).
int reused_input(const Segment& s, const at::Tensor& result) {
  const void* data = result.unsafeGetTensorImpl()->unsafe_storage().data();
  for (size_t i = 0; i < s.storages.size(); ++i)
    if (s.storages[i].producer < 0 && s.storages[i].data == data && s.storages[i].storage.use_count() == 0)
      return static_cast<int>(i);
  return -1;
}

int add_result(Segment& s, const at::Tensor& t, int call, int64_t reuse) {
  const int index = static_cast<int>(s.storages.size());
  const c10::Storage& storage = t.unsafeGetTensorImpl()->unsafe_storage();
  s.storage_index[storage.unsafeGetStorageImpl()] = index;
  s.storages.push_back({storage.getWeakStorageImpl(), call});
  auto& d = s.desc;
  d.producers.push_back(call);
  d.results.push_back(index);
  d.reuses.push_back(static_cast<int>(reuse));
  d.layouts.push_back(static_cast<int64_t>(t.scalar_type()));
  d.layouts.push_back(t.dim());
  d.layouts.insert(d.layouts.end(), t.sizes().begin(), t.sizes().end());
  d.layouts.insert(d.layouts.end(), t.strides().begin(), t.strides().end());
  return index;
}

// Calls every tensor argument of `call` with it, in the order the segment numbers them.
template <typename F>
void for_each_tensor(const Call& call, const std::vector<c10::IValue>& args, F&& f) {
  const auto& r = *call.roles;
  for (size_t i = 0; i < r.size(); ++i) {
    const c10::IValue& v = args[i];
    if (r[i] == Role::Tensor) {
      if (v.isTensor() && v.toTensor().defined()) f(v.toTensor());
    } else if (r[i] == Role::TensorList) {
      for (const at::Tensor& t : v.toTensorList()) f(t);
    } else if (r[i] == Role::OptTensorList) {
      for (const std::optional<at::Tensor>& t : v.toOptionalTensorList())
        if (t.has_value() && t->defined()) f(*t);
    }
  }
}

// The words `call` adds to the segment's key: its plan (operator and signature) and where each
// tensor comes from (which storage the segment has seen, at which offset). Results add only the
// input whose freed memory each got (the plan fixes the rest).
struct CallWords {
  c10::SmallVector<int64_t, 24> words;  // on the stack for a call's usual handful of tensors
  size_t reuses_at = 0;                 // the results' words: one per result tensor, in order
};

CallWords call_words(const Segment& s, const Call& call) {
  CallWords cw{{static_cast<int64_t>(call.plan)}};
  auto& words = cw.words;
  c10::SmallVector<const c10::StorageImpl*, 8> unseen;  // numbered after the seen ones, as record() will
  for_each_tensor(call, call.args, [&](const at::Tensor& t) {
    if (!is_device_tensor(t)) return words.push_back(-2);
    const c10::StorageImpl* impl = t.unsafeGetTensorImpl()->unsafe_storage().unsafeGetStorageImpl();
    int64_t index;
    if (auto it = s.storage_index.find(impl); it != s.storage_index.end()) {
      index = it->second;
    } else {
      auto u = std::find(unseen.begin(), unseen.end(), impl);
      index = static_cast<int64_t>(s.storages.size() + (u - unseen.begin()));
      if (u == unseen.end()) unseen.push_back(impl);
    }
    words.push_back(index);
    words.push_back(t.storage_offset());
  });
  cw.reuses_at = words.size();
  for (const c10::IValue& out : call.outputs) {  // results in the memory of freed inputs
    if (out.isTensor() && out.toTensor().defined()) words.push_back(reused_input(s, out.toTensor()));
    else if (out.isTensorList())
      for (const at::Tensor& t : out.toTensorList()) words.push_back(t.defined() ? reused_input(s, t) : -1);
  }
  return cw;
}

uint64_t hash_after(const Segment& s, c10::ArrayRef<int64_t> words) {
  uint64_t h = s.hash;
  for (int64_t w : words) h = mix(h, w);
  return h;
}

// Records a call into the segment: its words, its description, its values — and, for a call the
// segment holds, where a fused kernel would find its tensors: the call's records, numbered as its
// references and results are (`held`: its index among the held calls, or -1).
void record(Segment& s, const Call& call, const CallWords& cw, int held) {
  const int index = static_cast<int>(s.calls());
  s.key.insert(s.key.end(), cw.words.begin(), cw.words.end());
  auto& d = s.desc;
  d.ops.push_back(call.op);
  d.roles.push_back(call.roles);
  auto& args = d.args;
  auto keep_ref = [&](int64_t record) {
    if (held >= 0) s.ref_records.emplace_back(held, record);
  };
  const auto& r = *call.roles;
  for (size_t i = 0; i < r.size(); ++i) {
    const c10::IValue& v = call.args[i];
    const c10::IValue& k = call.kernel_args[i];  // tensors as indices of the call's records
    switch (r[i]) {
      case Role::Tensor:
        if (v.isTensor() && v.toTensor().defined()) {
          args.emplace_back(add_ref(s, v.toTensor()));
          keep_ref(k.toInt());
        } else {
          args.emplace_back();
        }
        break;
      case Role::TensorList: {
        std::vector<int64_t> refs;
        for (const at::Tensor& t : v.toTensorList()) refs.push_back(add_ref(s, t));
        if (held >= 0)
          for (int64_t record : k.toIntVector()) keep_ref(record);
        args.emplace_back(refs);
        break;
      }
      case Role::OptTensorList: {
        c10::List<std::optional<int64_t>> refs;
        for (const std::optional<at::Tensor>& t : v.toOptionalTensorList())
          refs.push_back(t.has_value() && t->defined() ? std::optional<int64_t>(add_ref(s, *t)) : std::nullopt);
        if (held >= 0)
          for (int64_t record : k.toIntVector())
            if (record >= 0) keep_ref(record);
        args.emplace_back(refs);
        break;
      }
      case Role::Scalar:
        if (v.isList()) {
          std::vector<int64_t> numbers;
          for (const c10::IValue& x : v.toListRef()) {
            numbers.push_back(static_cast<int64_t>(s.values.size()));
            s.values.push_back(x);
          }
          args.emplace_back(numbers);
        } else if (v.isNone()) {
          args.emplace_back();
        } else {
          args.emplace_back(static_cast<int64_t>(s.values.size()));
          s.values.push_back(v);
        }
        break;
      case Role::Value: args.push_back(v); break;
    }
  }
  auto& returns = d.returns;
  const int64_t* reuse = cw.words.data() + cw.reuses_at;
  for (size_t j = 0; j < call.outputs.size(); ++j) {  // undefined results (unrequested gradients) are None
    const c10::IValue& out = call.outputs[j];
    const c10::IValue& k = call.kernel_outputs[j];
    if (out.isTensor() && out.toTensor().defined()) {
      returns.emplace_back(static_cast<int64_t>(add_result(s, out.toTensor(), index, *reuse++)));
      if (held >= 0) s.result_records.emplace_back(held, k.toInt());
    } else if (out.isTensorList()) {
      std::vector<int64_t> numbers;
      const auto list = out.toTensorList();
      for (size_t i = 0; i < list.size(); ++i) {
        const int64_t reused = *reuse++;
        if (!list.get(i).defined()) {
          numbers.push_back(-1);
          continue;
        }
        numbers.push_back(add_result(s, list.get(i), index, reused));
        if (held >= 0) s.result_records.emplace_back(held, k.toIntList().get(i));
      }
      returns.emplace_back(numbers);
    } else {
      returns.emplace_back();
    }
  }
  d.returns_end.push_back(returns.size());
  s.hash = hash_after(s, cw.words);
  s.chain.push_back(s.hash);
}

// Which fresh results the program still holds, and the segment's identity with them: a compiled
// segment writes only those.
struct Liveness {
  std::vector<bool> live;
  uint64_t id = 0;
};

Liveness liveness(const Segment& s) {
  Liveness l;
  for (int index : s.desc.results) l.live.push_back(s.storages[index].storage.use_count() > 0);
  l.id = mix(s.hash, static_cast<int64_t>(l.live.size()));
  for (bool b : l.live) l.id = mix(l.id, b);
  return l;
}

using Actions = std::vector<std::function<void()>>;

void launch_alone(c10::DeviceIndex device, Call& call, Actions& actions) {
  call.how.ends_segment = false;
  actions.push_back([device, kernel = std::move(call.kernel), how = std::move(call.how)]() mutable {
    launch(device, std::move(kernel), std::move(how));
  });
}

// Whether two tensors a fused kernel reads or writes share memory without being one storage
// the segment knows (an input's memory, freed, now holds a result): then only the calls in
// order are right.
bool memory_hazard(std::vector<std::tuple<uintptr_t, uintptr_t, int>> ranges) {
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i)
    if (std::get<0>(ranges[i]) < std::get<1>(ranges[i - 1]) && std::get<2>(ranges[i]) != std::get<2>(ranges[i - 1]))
      return true;
  return false;
}

// The compiled kernel that replaces the held calls, or nullptr.
std::shared_ptr<const Fused> find_fused(const Segment& s, const Liveness& l) {
  std::lock_guard<std::mutex> lock(tables_mu);
  auto it = fused_by_hash.find(l.id);
  if (it == fused_by_hash.end()) return nullptr;
  const auto& f = it->second;
  if (f->key != s.key || f->live != l.live) return nullptr;
  for (const auto& [index, value] : f->fixed)
    if (!(s.values[index] == value)) return nullptr;
  return f;
}

// A fused kernel's arguments: host tensors of its inputs and outputs (held call, index in that
// call's records), then its runtime scalars as 0-dim tensors.
std::vector<at::Tensor> fused_arguments(const std::vector<TensorRecords>& records,
                                        const std::vector<std::pair<int, int64_t>>& ins,
                                        const std::vector<std::pair<int, int64_t>>& outs,
                                        const std::vector<c10::IValue>& values) {
  std::vector<HostAliases> aliases;  // per held call, over its records
  aliases.reserve(records.size());
  for (const auto& r : records) aliases.emplace_back(/*resizable=*/false, &r);
  std::vector<at::Tensor> hosts;
  hosts.reserve(ins.size() + outs.size() + values.size());
  for (const auto& [call, index] : ins) hosts.push_back(aliases[call](c10::IValue(index)));
  for (const auto& [call, index] : outs) hosts.push_back(aliases[call](c10::IValue(index)));
  for (const auto& v : values)
    hosts.push_back(v.isDouble() ? at::scalar_tensor(v.toDouble(), at::kDouble)
                    : v.isBool() ? at::scalar_tensor(v.toBool(), at::kBool)
                                 : at::scalar_tensor(v.toInt(), at::kLong));
  return hosts;
}

// Runs a fused kernel on its arguments (host tensors of its inputs, outputs and scalars).
void run_fused(const Fused& fused, std::vector<at::Tensor> hosts) {
  if (fused.entry) {
    std::vector<void*> handles;
    handles.reserve(hosts.size());
    for (auto& t : hosts) handles.push_back(new at::Tensor(std::move(t)));  // the entry takes them
    if (const char* error = fused.entry(handles.data()))
      throw std::runtime_error(fused.name + " (fused " + fused.replaced + "): " + error);
    return;
  }
  py::gil_scoped_acquire gil;
  try {
    fused.kernel->object(py::cast(hosts));
  } catch (py::error_already_set& e) {
    throw std::runtime_error(fused.name + " (fused " + fused.replaced + "): " + e.what());
  }
}

// Launches what the segment holds: one fused kernel when one matches, else each call.
bool launch_held(c10::DeviceIndex device, Segment& s, const Liveness& l, Actions& actions) {
  if (s.held.empty()) return false;
  auto fused = find_fused(s, l);
  std::vector<std::pair<int, int64_t>> inputs, outputs;  // records: (held call, index)
  std::vector<int> written_after;                        // positions in outputs
  if (fused) {
    std::vector<std::tuple<uintptr_t, uintptr_t, int>> touched;
    auto touch = [&](const std::pair<int, int64_t>& at, int storage) {
      const auto [begin, end] = s.held[at.first].records.memory(at.second);
      touched.emplace_back(begin, end, storage);
    };
    for (int ref : fused->input_refs) {
      inputs.push_back(s.ref_records[ref]);
      touch(inputs.back(), static_cast<int>(s.desc.refs[s.desc.ref_at[ref]]));
    }
    for (size_t i = 0; i < fused->outputs.size(); ++i) {
      const int result = fused->outputs[i];
      outputs.push_back(s.result_records[result]);
      // A result in the memory of a freed input is written after the kernel has read the input
      // (written inside it, the kernel's loops could store elements they have yet to read).
      if (s.desc.reuses[result] >= 0) written_after.push_back(static_cast<int>(i));
      else touch(outputs.back(), s.desc.results[result]);
    }
    if (memory_hazard(std::move(touched))) {
      fused = nullptr;
      std::lock_guard<std::mutex> lock(tables_mu);
      ++counters.fused_refused;
    }
  }
  if (!fused) {
    {
      std::lock_guard<std::mutex> lock(tables_mu);
      counters.calls_held_then_single += static_cast<int64_t>(s.held.size());
    }
    for (auto& call : s.held) launch_alone(device, call, actions);
    s.held.clear();
    return false;
  }
  std::vector<c10::IValue> scalars;
  for (int index : fused->runtime_values) scalars.push_back(s.values[index]);
  {
    std::lock_guard<std::mutex> lock(tables_mu);
    ++counters.fused_launches;
    counters.calls_fused += static_cast<int64_t>(s.held.size());
  }
  std::vector<TensorRecords> records;  // the held calls' records, which the fused kernel reads
  records.reserve(s.held.size());
  for (auto& call : s.held) records.push_back(std::move(call.records));
  // The profiler's record of the kernel names the operators it replaced (the host tensors have
  // the shapes and dtypes it describes).
  std::string described;
  if (profiler::recording()) {
    const auto hosts = fused_arguments(records, inputs, outputs, {});
    described = profiler::describe_launch(std::vector<c10::IValue>(hosts.begin(), hosts.begin() + inputs.size()),
                                          std::vector<c10::IValue>(hosts.begin() + inputs.size(), hosts.end()));
    if (!described.empty()) described.insert(described.size() - 1, ", \"replaces\": \"" + fused->replaced + "\"");
  }
  Launch how{.name = fused->name,
             .host = core_segment(device).placement.place(fused.get(), installs.load(), placement_mode.load()),
             .described = std::move(described),
             .ends_segment = false};
  actions.push_back([device, fused, records = std::move(records), inputs = std::move(inputs),
                     outputs = std::move(outputs), written_after = std::move(written_after),
                     scalars = std::move(scalars), how = std::move(how)]() mutable {
    launch(device,
           [fused, records = std::move(records), inputs = std::move(inputs), outputs = std::move(outputs),
            written_after = std::move(written_after), scalars = std::move(scalars)] {
      std::vector<at::Tensor> hosts = fused_arguments(records, inputs, outputs, scalars);
      std::vector<std::pair<at::Tensor, at::Tensor>> after;  // (result's memory, what the kernel wrote)
      for (int i : written_after) {
        at::Tensor& out = hosts[inputs.size() + i];
        after.emplace_back(out, at::empty_strided(out.sizes(), out.strides(), out.options()));
        out = after.back().second;
      }
      run_fused(*fused, std::move(hosts));
      for (auto& [result, written] : after) result.copy_(written);
    },
           std::move(how));
  });
  s.held.clear();
  return true;
}

py::object dtype_object(c10::ScalarType dtype) {
  return py::reinterpret_borrow<py::object>(reinterpret_cast<PyObject*>(torch::getTHPDtype(dtype)));
}

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

// A compile request for a segment seen often enough: the description as Python objects.
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

// Ends the segment: launches what it holds, counts it, asks for its compile.
void close(c10::DeviceIndex device, Segment& s, Actions& actions) {
  if (s.calls() == 0) return;
  const bool observed = s.calls() >= kMinCalls;
  if (s.held.empty() && !observed) {  // nothing to launch or count: the live mask is not needed
    s.clear();
    return;
  }
  const Liveness l = liveness(s);
  const bool fused = launch_held(device, s, l, actions);
  if (!fused && observed) {
    const uint64_t id = l.id;
    bool ask = false;
    std::vector<c10::IValue> first;
    {
      std::lock_guard<std::mutex> lock(tables_mu);
      ++counters.segments_seen;
      // A program whose segments never repeat (shapes changing every step) would grow the table
      // without end: past the limit, the segments only observed so far are forgotten.
      if (observations.size() >= kMaxObservations)
        std::erase_if(observations, [](const auto& entry) { return entry.second.state == Observation::kObserving; });
      auto& o = observations[id];
      if (o.count++ == 0) o.first_values = s.values;
      if (o.state == Observation::kObserving && o.count >= compile_after.load() && compiler) {
        o.state = Observation::kCompiling;
        ask = true;
        first = o.first_values;
        o.values = s.values;
        o.key = s.key;
        o.live = l.live;
        o.chain = s.chain;
      }
    }
    if (ask)
      request_compile(id, std::make_shared<Description>(std::move(s.desc)), std::move(s.values), std::move(first),
                      l.live, actions);
  }
  s.clear();
}

void run(Actions& actions) {
  for (auto& a : actions) a();
}

bool any_prefix(uint64_t h) {
  std::lock_guard<std::mutex> lock(tables_mu);
  return prefixes.count(h) > 0;
}

}  // namespace

bool enabled() { return on.load(std::memory_order_relaxed); }

namespace {
void end_all_segments() {
  for (size_t i = 0; i < cores.size(); ++i)
    if (neuron_rt::Runtime::get().core_initialized(static_cast<int>(i))) end_segment(static_cast<c10::DeviceIndex>(i));
}
}  // namespace

void set_enabled(bool enable) {
  if (!enable) end_all_segments();
  on = enable;
}

void submit(c10::DeviceIndex device, Call call) {
  Actions actions;
  {
    auto& cs = core_segment(device);
    std::lock_guard<std::mutex> lock(cs.mu);
    Segment& s = cs.seg;
    const int stream = static_cast<int>(current_stream(device).id());
    const auto now = std::chrono::steady_clock::now();
    if (s.calls() && (stream != s.stream || std::this_thread::get_id() != s.thread ||
                      s.calls() >= static_cast<size_t>(max_calls.load()) ||
                      now - s.last > std::chrono::microseconds(idle_limit_us.load())))
      close(device, s, actions);
    while (true) {
      if (!s.calls()) {
        s.stream = stream;
        s.thread = std::this_thread::get_id();
        std::lock_guard<std::mutex> lock(tables_mu);
        s.matching = !prefixes.empty();
      }
      s.last = now;
      const CallWords words = call_words(s, call);
      if (s.matching && any_prefix(hash_after(s, words.words))) {  // may still become a compiled segment
        record(s, call, words, static_cast<int>(s.held.size()));
        call.args.clear();  // the caller's tensors: holding them would keep its results alive
        call.outputs.clear();
        s.held.push_back(std::move(call));
        break;
      }
      // It leaves every compiled segment: the calls held so far may be one by themselves, and
      // this call starts the next segment.
      if (s.matching && !s.held.empty() && launch_held(device, s, liveness(s), actions)) {
        s.clear();
        continue;
      }
      s.matching = false;  // the held calls went one by one: the segment goes on, observed
      record(s, call, words, /*held=*/-1);
      launch_alone(device, call, actions);
      break;
    }
  }
  run(actions);
}

void end_segment(c10::DeviceIndex device) {
  if (!enabled() || device < 0) return;
  Actions actions;
  {
    auto& cs = core_segment(device);
    std::lock_guard<std::mutex> lock(cs.mu);
    close(device, cs.seg, actions);
  }
  run(actions);
}

namespace {

// The exported entry of a loaded library (`library`: its path), or null.
NativeEntry find_entry(const std::string& library) {
  if (library.empty()) return nullptr;
  void* handle = dlopen(library.c_str(), RTLD_NOW | RTLD_NOLOAD);  // Python has loaded it; kept open
  return handle ? reinterpret_cast<NativeEntry>(dlsym(handle, "neuron_segment_entry")) : nullptr;
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

// Forgets every segment, compiled or observed, and the counters (tests; a new compiler).
void reset() {
  end_all_segments();
  std::unordered_map<uint64_t, std::shared_ptr<const Fused>> dropped;  // released without the lock
  {
    std::lock_guard<std::mutex> lock(tables_mu);
    observations.clear();
    dropped.swap(fused_by_hash);
    prefixes.clear();
    counters = Counters();
  }
  for (auto& cs : cores) {
    std::lock_guard<std::mutex> lock(cs.mu);
    cs.placement = FusedPlacement();
  }
}

const std::array<std::pair<const char*, FusedPlacement::Mode>, 3> kPlacementModes{{
    {"auto", FusedPlacement::Mode::kAuto},
    {"worker", FusedPlacement::Mode::kWorker},
    {"program", FusedPlacement::Mode::kProgram},
}};

}  // namespace

void bind(py::module_& m) {
  m.def("_adaptive_set_enabled", &set_enabled, py::call_guard<py::gil_scoped_release>());
  m.def("_adaptive_enabled", &enabled);
  m.def("_adaptive_configure", [](int after, int calls, int64_t idle_us) {
    compile_after = std::max(1, after);
    max_calls = std::max(1, calls);
    idle_limit_us = std::max<int64_t>(0, idle_us);
  });
  m.def("_adaptive_set_compiler", [](py::object f) {
    auto holder = f.is_none() ? nullptr : std::make_shared<KernelObject>(std::move(f));
    py::gil_scoped_release nogil;  // the old one is released under the lock it takes
    std::lock_guard<std::mutex> lock(tables_mu);
    compiler.swap(holder);
  });
  m.def("_adaptive_install", &install);
  m.def("_adaptive_dtype", [](int64_t scalar_type) { return dtype_object(static_cast<c10::ScalarType>(scalar_type)); });
  m.def("_adaptive_failed", &fail);
  m.def("_adaptive_reset", &reset, py::call_guard<py::gil_scoped_release>());
  m.def("_adaptive_set_placement", [](const std::string& name) {
    for (const auto& [known, mode] : kPlacementModes)
      if (name == known) return placement_mode.store(mode);
    TORCH_CHECK_VALUE(false, "adaptive eager: fused placement must be 'auto', 'worker' or 'program', got '", name, "'");
  });
  m.def("_adaptive_placement", [] {
    for (const auto& [name, mode] : kPlacementModes)
      if (mode == placement_mode.load()) return std::string(name);
    return std::string();
  });
  // Per core that launched fused kernels: where they run now and what the last timing found.
  m.def("_adaptive_placements", [] {
    std::map<int, FusedPlacement::Report> reports;
    {
      py::gil_scoped_release nogil;  // a core's lock is held by launches that may wait for the interpreter
      for (size_t i = 0; i < cores.size(); ++i) {
        std::lock_guard<std::mutex> lock(cores[i].mu);
        if (cores[i].placement.placed_any())
          reports[static_cast<int>(i)] = cores[i].placement.report(placement_mode.load());
      }
    }
    py::dict out;
    for (const auto& [core, r] : reports)
      out[py::int_(core)] = py::dict(py::arg("state") = r.state, py::arg("loop_launches") = r.loop_launches,
                                     py::arg("program_vs_worker") = r.program_vs_worker);
    return out;
  });
  m.def("_adaptive_counters", [] {
    std::lock_guard<std::mutex> lock(tables_mu);
    const Counters& c = counters;
    return std::map<std::string, int64_t>{{"segments_seen", c.segments_seen},
                                          {"segments_compiled", c.segments_compiled},
                                          {"compile_failures", c.compile_failures},
                                          {"fused_launches", c.fused_launches},
                                          {"calls_fused", c.calls_fused},
                                          {"calls_held_then_single", c.calls_held_then_single},
                                          {"fused_refused", c.fused_refused}};
  });
}

}  // namespace torch_neuronx::adaptive
