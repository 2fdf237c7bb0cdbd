#include "float_controls.h"

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

namespace neuron_rt {

#if defined(__x86_64__) || defined(__i386__)
namespace {
constexpr unsigned kStatusFlags = 0x3F;  // MXCSR's exception flags: state, not control
}
uint64_t float_controls() { return _mm_getcsr() & ~kStatusFlags; }
void set_float_controls(uint64_t controls) {
  _mm_setcsr((_mm_getcsr() & kStatusFlags) | static_cast<unsigned>(controls));
}
#elif defined(__aarch64__)
uint64_t float_controls() { return __builtin_aarch64_get_fpcr(); }
void set_float_controls(uint64_t controls) { __builtin_aarch64_set_fpcr(static_cast<unsigned>(controls)); }
#else
uint64_t float_controls() { return 0; }
void set_float_controls(uint64_t) {}
#endif

}  // namespace neuron_rt
