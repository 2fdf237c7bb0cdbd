// Launching what a segment holds: the compiled kernel that replaces the held calls when one
// matches the whole segment (and no memory hazard forbids it), else each call as plain eager.
#include <algorithm>
#include <tuple>

#include "parts.h"
#include "../profiler/profiler.h"

namespace py = pybind11;

namespace torch_neuronx::adaptive {

namespace {

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

}  // namespace

void launch_alone(c10::DeviceIndex device, Call& call, Actions& actions) {
  call.how.ends_segment = false;
  actions.push_back([device, kernel = std::move(call.kernel), how = std::move(call.how)]() mutable {
    launch(device, std::move(kernel), std::move(how));
  });
}

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

}  // namespace torch_neuronx::adaptive
