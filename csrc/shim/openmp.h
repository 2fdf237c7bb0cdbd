// The OpenMP teams of the threads that run kernels. libgomp's only: other OpenMP runtimes are
// left alone.
#pragma once

namespace torch_neuronx {

// Called by host threads about to wait for a core: releases the calling thread's idle OpenMP
// threads, so kernels on the core's worker run at full speed.
void release_host_openmp_threads();

// The worker's counterpart, run when a host thread claims the compute threads (HostWork::kClaim).
void release_worker_openmp_threads();

// Run by the worker before a kernel: gives it the launching thread's intra-op thread count.
void use_compute_threads(int threads);

}  // namespace torch_neuronx
