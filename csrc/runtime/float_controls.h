// The floating-point control state of a thread: rounding mode, flush-to-zero and
// denormals-are-zero (x86's MXCSR control bits, AArch64's FPCR). Kernels run on the core's worker
// with the state of the thread that launched them, as they would on that thread: a program that
// calls torch.set_flush_denormal(True) gets flushed results on the device as on the CPU.
#pragma once

#include <cstdint>

namespace neuron_rt {

// The calling thread's control state (0 where the architecture has none we read).
uint64_t float_controls();

// Gives the calling thread `controls` (from float_controls()); its status flags stay as they are.
void set_float_controls(uint64_t controls);

}  // namespace neuron_rt
