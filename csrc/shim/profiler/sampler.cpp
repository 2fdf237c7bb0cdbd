#include "sampler.h"

#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>

namespace torch_neuronx::profiler {

namespace {
int64_t parse_field(const std::string& text, size_t index) {
  std::istringstream in(text);
  std::string word;
  for (size_t i = 0; i <= index && in >> word; ++i) {
  }
  return std::stoll(word);
}
}  // namespace

Sample take_sample() {
  Sample s{neuron_rt::now_ns(), 0, 0, 0, 0, {}, {}};
  std::ifstream stat("/proc/self/stat"), system("/proc/stat"), statm("/proc/self/statm");
  std::string line;
  // /proc/self/stat: the command may contain spaces; utime and stime are fields 14 and 15.
  if (std::getline(stat, line)) {
    const std::string rest = line.substr(line.rfind(')') + 2);
    s.process_cpu_ticks = parse_field(rest, 11) + parse_field(rest, 12);
  }
  // /proc/stat "cpu user nice system idle iowait irq softirq steal": idle and iowait are not busy.
  if (std::getline(system, line)) {
    std::istringstream in(line.substr(3));
    int64_t v;
    for (int i = 0; i < 8 && in >> v; ++i) {
      s.system_total_ticks += v;
      if (i != 3 && i != 4) s.system_busy_ticks += v;
    }
  }
  int64_t size = 0, resident = 0;
  if (statm >> size >> resident) s.rss_bytes = resident * sysconf(_SC_PAGESIZE);
  auto& rt = neuron_rt::Runtime::get();
  for (int i = 0; i < rt.device_count(); ++i) {
    const bool used = rt.core_initialized(i);
    s.hbm_allocated_bytes.push_back(used ? rt.core(i).pool.stats().allocated_bytes.all.current : 0);
    s.hbm_reserved_bytes.push_back(used ? rt.core(i).pool.stats().reserved_bytes.all.current : 0);
  }
  return s;
}

}  // namespace torch_neuronx::profiler
