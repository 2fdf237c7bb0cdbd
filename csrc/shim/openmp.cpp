#include "openmp.h"

#include <ATen/Parallel.h>
#include <dlfcn.h>

#include "../runtime/runtime.h"

namespace torch_neuronx {

// Kernels run on the core's worker thread, which keeps its own OpenMP team; a host thread that
// ever ran a parallel CPU op (model initialization, data preparation) keeps another for good.
// With more OpenMP threads than cores, libgomp throttles every team: threads spin ~100 times
// before sleeping, so each barrier of a kernel becomes futex round trips (measured: compiled
// TinyGPT graphs ran 2x slower). A host thread waiting for a core has no use for its team, so it
// releases it (omp_pause_resource_all); its next parallel CPU op re-creates it. Other OpenMP
// runtimes than libgomp are left alone.
// A kernel runs with its launching thread's intra-op thread count (torch.set_num_threads): some
// CPU kernels round differently with another count (a full sum, a small matmul), and a kernel
// must give the bits it gives on the CPU, wherever it runs.
namespace {
void pause_openmp_threads() {
  using Pause = int (*)(int);
  static const Pause pause = [] {
    void* gomp = dlopen("libgomp.so.1", RTLD_LAZY | RTLD_NOLOAD);
    return gomp ? reinterpret_cast<Pause>(dlsym(gomp, "omp_pause_resource_all")) : nullptr;
  }();
  constexpr int kPauseSoft = 1;  // omp_pause_soft
  if (pause) pause(kPauseSoft);
}

}  // namespace

void release_host_openmp_threads() {
  if (!neuron_rt::on_worker_thread()) pause_openmp_threads();
}

void release_worker_openmp_threads() { pause_openmp_threads(); }

void use_compute_threads(int threads) {
  // at::set_num_threads also sets MKL's count and clears oneDNN's convolution cache: only on a change.
  if (at::get_num_threads() != threads) at::set_num_threads(threads);
}


}  // namespace torch_neuronx
