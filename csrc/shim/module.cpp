// torch_neuronx._C: the Python surface of the runtime and the shim.
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/Generator.h>
#include <torch/extension.h>

#include "adaptive/adaptive.h"
#include "attention.h"
#include "compiled_graph.h"
#include "device.h"
#include "launch.h"
#include "openmp.h"
#include "generator.h"
#include "host_aliases.h"
#include "kernel_object.h"
#include "fallback.h"
#include "native_kernel/native_kernel.h"
#include "nested_tensor.h"
#include "op_tracking.h"
#include "scaled_matmul.h"
#include "profiler/profiler.h"
#include "../runtime/shared_link.h"

namespace py = pybind11;
using namespace torch_neuronx;

namespace {

void configure(const std::string& generation, int logical_nc_config, int num_chips,
               const std::vector<int>& visible_cores, size_t hbm_bytes_per_core, bool launch_blocking,
               bool capture_stack, size_t max_inflight, bool inline_kernels) {
  neuron_rt::Topology t;
  t.generation = generation;
  t.logical_nc_config = logical_nc_config;
  t.num_chips = num_chips;
  t.visible_cores = visible_cores;
  t.hbm_bytes_per_core = hbm_bytes_per_core;
  t.launch_blocking = launch_blocking;
  t.max_inflight = std::max<size_t>(1, max_inflight);
  t.inline_kernels = inline_kernels;
  try {
    neuron_rt::Runtime::get().configure(std::move(t));
  } catch (const std::runtime_error& e) {
    TORCH_CHECK(false, e.what());
  }
  set_capture_stack(capture_stack);
}

// Runs a Python function as a kernel on the current stream of `device` (kernel-language
// kernels). Its exception becomes the kernel's error: deferred, or raised here when `wait`.
// `described`: the kernel's description for the profiler (a JSON object; collectives describe
// their message), kept only while a profiler records.
void launch_python_kernel(int device, py::object fn, const std::string& name, bool wait, std::string described) {
  auto callable = std::make_shared<KernelObject>(std::move(fn));
  auto body = [callable] {
    py::gil_scoped_acquire gil;
    try {
      callable->object();
    } catch (py::error_already_set& e) {
      throw std::runtime_error(e.what());
    }
  };
  track_python_kernel();
  py::gil_scoped_release nogil;
  launch(static_cast<c10::DeviceIndex>(device), std::move(body),
         {.name = name, .completion = wait ? Launch::kWaited : Launch::kQueued, .described = std::move(described)});
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "Simulated NeuronCore runtime and PyTorch shim of torch_neuronx";
  auto& rt = neuron_rt::Runtime::get();
  const auto nogil = py::call_guard<py::gil_scoped_release>();

  m.def("_configure", &configure, py::kw_only(), py::arg("generation"), py::arg("logical_nc_config"),
        py::arg("num_chips"), py::arg("visible_cores"), py::arg("hbm_bytes_per_core"), py::arg("launch_blocking"),
        py::arg("capture_stack"), py::arg("max_inflight"), py::arg("inline_kernels"));
  m.def("_set_tensor_engine_formats", &set_tensor_engine_formats, py::arg("generation"), py::arg("float8"),
        py::arg("mx"));
  m.def("_device_count", [&rt] { return rt.device_count(); });
  m.def("_is_initialized", [&rt] { return rt.is_initialized(); });
  m.def("_in_bad_fork", [&rt] { return rt.in_bad_fork(); });
  m.def("_init", [](int device) { core(device); });
  m.def("_set_calling_thread_backward", &set_calling_thread_backward);
  m.def("_current_device", [] { return current_device(); });
  m.def("_set_device", [](int device) { set_current_device(device); });
  // Kernel warnings delivered by the synchronization become Python warnings (as in torch's own
  // bindings), raised once the interpreter lock is back.
  m.def("_synchronize", [](int device) {
    HANDLE_TH_ERRORS {
      py::gil_scoped_release no_gil;
      synchronize_device(device);
    }
    END_HANDLE_TH_ERRORS_PYBIND
  });

  m.def("_hbm_capacity", [](int device) { return core(device).pool.capacity(); });
  m.def("_set_hbm_capacity", [](int device, size_t bytes) { core(device).pool.set_capacity(bytes); });

  m.def("_stream_priority", [](int device, int stream) { return core(device).queue.stream_priority(stream); });

  m.def("_default_generator", [](int device) {
    return py::reinterpret_steal<py::object>(THPGenerator_initDefaultGenerator(default_generator(device)));
  });

  m.def("_launch_python_kernel", &launch_python_kernel, py::arg("device"), py::arg("fn"), py::arg("name"),
        py::kw_only(), py::arg("wait"), py::arg("described") = "");
  m.def("_profiler_recording", [] { return profiler::recording(); });
  m.def("_kernel_counts", [](int device) { return core(device).queue.kernel_counts(); });
  // What a live view shows of a core, without starting it: (executed by the worker, executed on
  // launching threads, queued or running), or None for a core this process has not used.
  m.def("_core_activity", [&rt](int device) -> py::object {
    if (!rt.core_initialized(device)) return py::none();
    const auto [worker, host] = core(device).queue.kernel_counts();
    return py::make_tuple(worker, host, core(device).queue.pending());
  });
  neuron_rt::set_idle_release(&release_worker_openmp_threads);
  // A full queue is waited on without the interpreter lock: the kernels it waits for may be
  // Python kernels (compiled graphs, kernel-language ops, collectives) that need it.
  neuron_rt::set_host_wait(&without_gil);
  neuron_rt::set_worker_start(&setup_worker_thread);
  neuron_rt::set_compute_threads(&use_compute_threads);
  // The shared-memory link of a process group (torch_neuronx/distributed/shared_memory.py); the
  // control block's address comes from the Python mapping of the segment.
  m.def("_process_exited", &neuron_rt::process_exited);
  m.def("_link_join",
        [](uintptr_t control, int rank) { neuron_rt::link_join(reinterpret_cast<void*>(control), rank); });
  m.def("_link_barrier", [](uintptr_t control, int rank, int size, double timeout_seconds) {
    neuron_rt::link_barrier(reinterpret_cast<void*>(control), rank, size, timeout_seconds);
  }, nogil);
  m.def("_host_alias", [](const at::Tensor& t) { return host_alias(t); });
  bind_compiled_graph(m);
  bind_attention(m);
  adaptive::bind(m);
  m.def("_register_native_op", &register_native_op, py::arg("op"), py::kw_only(), py::arg("sync"),
        py::arg("out_overload"), py::arg("bool_index_sync"));
  m.def("_register_nested_kernels", &register_nested_kernels);
  m.def("_executed_ops", &executed_ops);
  m.def("_fallback_ops", &fallback_ops, py::arg("kernels_only") = false);
  m.def("_start_op_tracking", &start_op_tracking);
  m.def("_clear_op_tracking", &clear_op_tracking);
  m.def("_set_strict_fallback", &set_strict_fallback);
  m.def("_set_retry_failed_kernels_on_cpu", &set_retry_failed_kernels_on_cpu);
  m.def("_inject_fault", &inject_fault);

  // The last finished profiler session's kernel arguments and host samples (torch_neuronx.profiling).
  m.def("_profiler_kernel_args", [] {
    py::dict out;
    for (const auto& k : profiler::last_kernel_args()) out[py::make_tuple(k.device, k.start)] = k.args;
    return out;
  });
  m.def("_profiler_samples", [] {
    py::list out;
    for (const auto& s : profiler::last_samples()) {
      py::dict d;
      d["time_ns"] = s.time;
      d["process_cpu_ticks"] = s.process_cpu_ticks;
      d["system_busy_ticks"] = s.system_busy_ticks;
      d["system_total_ticks"] = s.system_total_ticks;
      d["rss_bytes"] = s.rss_bytes;
      d["hbm_allocated_bytes"] = s.hbm_allocated_bytes;
      d["hbm_reserved_bytes"] = s.hbm_reserved_bytes;
      out.append(d);
    }
    return out;
  });
}
