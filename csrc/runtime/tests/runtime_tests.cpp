// Tests of the simulated NeuronCore runtime on its own: no PyTorch, only the runtime's API
// (runtime.h). A plain runner: each test is a function, a failed CHECK records its line, and the
// process exits non-zero when any test failed. tests/runtime/test_runtime_library.py builds
// and runs it as part of the test command.
#include <chrono>
#include <cstdio>
#include <functional>
#include <future>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../float_controls.h"
#include "../runtime.h"
#include "../shared_link.h"

using namespace neuron_rt;

namespace {

int failures = 0;

#define CHECK(cond)                                                          \
  do {                                                                       \
    if (!(cond)) {                                                           \
      std::printf("  %s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #cond); \
      ++failures;                                                            \
    }                                                                        \
  } while (0)

// Whether `f()` throws an E.
template <class E, class F>
bool throws(F&& f) {
  try {
    f();
  } catch (const E&) {
    return true;
  }
  return false;
}

// A kernel that holds the queue until released (or 10 s have passed, so a broken test fails
// instead of hanging).
struct Gate {
  std::promise<void> open;
  std::shared_future<void> opened = open.get_future().share();
  std::function<void()> kernel() {
    auto f = opened;
    return [f] { f.wait_for(std::chrono::seconds(10)); };
  }
  void release() { open.set_value(); }
};

uint64_t launch(HardwareQueue& q, int stream, std::function<void()> fn, const std::string& name = "k") {
  return q.launch(stream, std::move(fn), LaunchInfo{name, "", 0});
}

std::string pending_error(HardwareQueue& q) {
  try {
    q.raise_pending_error();
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

void stream_keeps_launch_order() {
  HardwareQueue q(0, 256, false);
  std::vector<int> order;
  for (int i = 0; i < 100; ++i) launch(q, 0, [&order, i] { order.push_back(i); });
  q.synchronize_stream(0);
  CHECK(order.size() == 100);
  for (int i = 0; i < static_cast<int>(order.size()); ++i) CHECK(order[i] == i);
}

void stream_keeps_launch_order_as_its_list_grows() {
  HardwareQueue q(0, 256, false);
  std::vector<int> order;
  for (int i = 0; i < 10; ++i) launch(q, 0, [&order, i] { order.push_back(i); });
  q.synchronize_stream(0);  // the list's head has moved on from its first slot
  Gate gate;
  launch(q, 0, gate.kernel());
  for (int i = 10; i < 110; ++i) launch(q, 0, [&order, i] { order.push_back(i); });  // held: the list grows
  gate.release();
  q.synchronize_stream(0);
  CHECK(order.size() == 110);
  for (int i = 0; i < static_cast<int>(order.size()); ++i) CHECK(order[i] == i);
}

void higher_priority_stream_runs_first() {
  HardwareQueue q(0, 256, false);
  const int low = q.create_stream(0), high = q.create_stream(-1);
  Gate gate;
  std::vector<std::string> order;
  launch(q, 0, gate.kernel());
  launch(q, low, [&] { order.push_back("low"); });
  launch(q, high, [&] { order.push_back("high"); });
  gate.release();
  q.synchronize();
  CHECK((order == std::vector<std::string>{"high", "low"}));
}

void earliest_deferred_error_wins_and_is_cleared() {
  HardwareQueue q(3, 256, false);
  launch(q, 0, [] { throw std::runtime_error("first failure"); }, "op_a");
  launch(q, 0, [] { throw std::runtime_error("second failure"); }, "op_b");
  bool ran_after = false;
  launch(q, 0, [&] { ran_after = true; });
  q.synchronize();
  const std::string error = pending_error(q);
  CHECK(error.find("first failure") != std::string::npos);
  CHECK(error.find("'op_a'") != std::string::npos && error.find("neuron:3") != std::string::npos);
  CHECK(error.find("second failure") == std::string::npos);
  CHECK(ran_after);  // later kernels still run
  CHECK(pending_error(q).empty());
}

void captured_error_is_not_deferred() {
  HardwareQueue q(0, 256, false);
  auto capture = std::make_shared<std::exception_ptr>();
  const uint64_t seq = q.launch(0, [] { throw std::runtime_error("mine"); }, LaunchInfo{"k", "", 0}, capture);
  q.wait_item(0, seq);
  CHECK(*capture != nullptr);
  CHECK(pending_error(q).empty());
}

void events_order_streams_and_complete() {
  HardwareQueue q(0, 256, false);
  const int other = q.create_stream(0);
  Gate gate;
  std::vector<std::string> order;
  auto event = std::make_shared<Event>(0, true);
  launch(q, 0, gate.kernel());
  launch(q, 0, [&] { order.push_back("producer"); });
  q.record(0, event);
  q.wait(other, event);
  launch(q, other, [&] { order.push_back("consumer"); });
  CHECK(!event->query());
  gate.release();
  q.wait_event(*event);
  CHECK(event->query() && event->timestamp.load() > 0);
  q.synchronize();
  CHECK((order == std::vector<std::string>{"producer", "consumer"}));
}

void pool_accounts_exactly() {
  HbmPool pool(0, size_t(1) << 30);
  Block* b = pool.allocate(1000);
  PoolStats s = pool.stats();
  CHECK(s.allocated_bytes.all.current == 1024 && s.requested_bytes.all.current == 1000);
  CHECK(s.reserved_bytes.all.current == 1024 && s.segment.all.current == 1 && s.allocation.all.current == 1);
  CHECK(s.allocated_bytes.small_pool.current == 1024 && s.allocated_bytes.large_pool.current == 0);
  void* ptr = b->ptr;
  pool.free(b);
  s = pool.stats();
  CHECK(s.allocated_bytes.all.current == 0 && s.reserved_bytes.all.current == 1024);
  CHECK(s.allocated_bytes.all.freed == 1024 && s.allocated_bytes.all.peak == 1024);
  Block* again = pool.allocate(900);  // the cached block serves it
  CHECK(again->ptr == ptr && pool.stats().num_device_alloc == 1);
  pool.free(again);
  pool.empty_cache();
  s = pool.stats();
  CHECK(s.reserved_bytes.all.current == 0 && s.num_device_free == 1);
}

void pool_cache_keeps_best_fit_through_reuse() {
  HbmPool pool(0, size_t(1) << 30);
  Block* a = pool.allocate(4096);
  Block* b = pool.allocate(8192);
  void *pa = a->ptr, *pb = b->ptr;
  for (int i = 0; i < 100; ++i) {  // the cache's entries come and go: each block keeps its size's place
    pool.free(b);
    pool.free(a);
    a = pool.allocate(4096);
    b = pool.allocate(8192);
    CHECK(a->ptr == pa && b->ptr == pb);
  }
  CHECK(pool.stats().num_device_alloc == 2);
  pool.free(a);
  pool.free(b);
  pool.empty_cache();
  CHECK(pool.stats().reserved_bytes.all.current == 0 && pool.stats().num_device_free == 2);
}

void pool_enforces_capacity() {
  HbmPool pool(0, 4096);
  Block* full = pool.allocate(4096);
  bool refused = false;
  try {
    pool.allocate(512);
  } catch (const OutOfMemory& e) {
    refused = std::string(e.what()).find("out of memory") != std::string::npos;
  }
  CHECK(refused && pool.stats().num_ooms == 1);
  CHECK(pool.stats().allocated_bytes.all.current == 4096);  // the failure changed nothing else
  pool.free(full);
  Block* small = pool.allocate(512);  // releases the cached 4 KiB block to make room
  CHECK(small != nullptr && pool.stats().reserved_bytes.all.current == 512);
  pool.free(small);
}

void frees_are_stream_ordered() {
  HardwareQueue q(0, 256, false);
  HbmPool pool(0, size_t(1) << 30);
  pool.set_progress(&q);
  const int side = q.create_stream(0);
  Gate gate;
  launch(q, 0, gate.kernel());
  Block* b = pool.allocate(4096, 0);
  void* ptr = b->ptr;
  launch(q, 0, [] {});  // a queued kernel that uses the block
  pool.free(b);
  CHECK(pool.stats().allocated_bytes.all.current == 0);  // freed at once
  Block* same_stream = pool.allocate(4096, 0);
  CHECK(same_stream->ptr == ptr);  // its stream's later kernels run after the queued ones
  pool.free(same_stream);
  Block* other_stream = pool.allocate(4096, side);
  CHECK(other_stream->ptr != ptr);  // another stream's kernels could run first
  Block* in_kernel = pool.allocate(4096, kNoStream);
  CHECK(in_kernel->ptr != ptr);
  gate.release();
  q.synchronize();
  Block* after = pool.allocate(4096, side);  // the kernels queued before the free have run
  CHECK(after->ptr == ptr);
  // A block another stream used waits for that stream even on its own.
  Gate second;
  launch(q, side, second.kernel());
  pool.note_use(after, 0);  // allocated for `side`, used on stream 0 too: shared
  launch(q, 0, [] {});
  pool.free(after);
  Block* own = pool.allocate(4096, side);
  CHECK(own->ptr != ptr);
  second.release();
  q.synchronize();
  for (Block* x : {other_stream, in_kernel, own}) pool.free(x);
}

void allocation_waits_for_blocks_queued_kernels_use() {
  HardwareQueue q(0, 256, false);
  HbmPool pool(0, 8192);
  pool.set_progress(&q);
  const int side = q.create_stream(0);
  Gate gate;
  launch(q, 0, gate.kernel());
  Block* b = pool.allocate(8192, 0);
  pool.free(b);
  CHECK(pool.allocate(8192, side, /*may_wait=*/true) == nullptr);  // wait, then ask again
  CHECK(pool.stats().num_ooms == 0);
  pool.empty_cache();  // the pending block stays
  CHECK(pool.stats().reserved_bytes.all.current == 8192);
  gate.release();
  q.synchronize();
  Block* after = pool.allocate(8192, side, true);
  CHECK(after != nullptr);
  pool.free(after);
}

void idle_core_runs_inline_and_busy_core_refuses() {
  HardwareQueue q(0, 256, true);
  const uint64_t seq = q.begin_inline(0, HostWork::kSerial);
  CHECK(seq != 0);
  bool ran = false;
  q.finish_inline(0, seq, [&] { ran = true; }, LaunchInfo{"k", "", 0});
  CHECK(ran && q.kernel_counts().second == 1);
  Gate gate;
  launch(q, 0, gate.kernel());
  CHECK(q.pending() == 1);
  CHECK(q.begin_inline(0, HostWork::kSerial) == 0);  // a kernel is queued: launch instead
  CHECK(q.begin_inline(0, HostWork::kNever) == 0);
  gate.release();
  q.synchronize();
}

void injected_faults_fail_their_kernels_fault_points_count_times() {
  FaultInjector faults;
  int thrown = 0;
  auto point = [&](const std::string& kernel) { thrown += throws<InjectedFault>([&] { faults.check(kernel); }); };
  point("k");
  CHECK(thrown == 0 && !faults.pending("k"));
  faults.inject("k", 2);
  CHECK(faults.pending("k") && !faults.pending("other"));
  point("other");
  point("k");
  point("k");
  point("k");
  CHECK(thrown == 2 && !faults.pending("k"));
  faults.inject("k", 5);
  faults.inject("k", 0);  // cleared
  point("k");
  CHECK(thrown == 2);
}

void the_runtime_has_no_cores_until_configured() {
  CHECK(Runtime::get().device_count() == 0);
  CHECK(throws<std::out_of_range>([] { Runtime::get().core(0); }));
}

void cores_run_side_by_side() {
  Topology t;
  t.visible_cores = {0, 1};
  t.hbm_bytes_per_core = size_t(1) << 20;
  Runtime::get().configure(t);
  Core& a = Runtime::get().core(0);
  Core& b = Runtime::get().core(1);
  CHECK(&a != &b && Runtime::get().device_count() == 2);
  // Core 0's kernel waits for core 1's: with one worker for both, this would time out.
  std::promise<void> from_b;
  auto seen = from_b.get_future().share();
  bool a_saw_b = false;
  launch(a.queue, 0, [&] { a_saw_b = seen.wait_for(std::chrono::seconds(10)) == std::future_status::ready; });
  launch(b.queue, 0, [&] { from_b.set_value(); });
  a.queue.synchronize();
  b.queue.synchronize();
  CHECK(a_saw_b);
  Block* blk = a.pool.allocate(1000, 0);
  CHECK(a.pool.stats().allocated_bytes.all.current == 1024 && b.pool.stats().allocated_bytes.all.current == 0);
  a.pool.free(blk);
  CHECK(throws<std::runtime_error>([&] { Runtime::get().configure(t); }));  // reconfiguring is refused
  CHECK(throws<std::out_of_range>([] { Runtime::get().core(2); }));
}

// A shared page as the link tests' segment: the control block, then one int per rank.
struct SharedPage {
  SharedPage() : base(mmap(nullptr, 8192, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0)) {}
  ~SharedPage() { munmap(base, 8192); }
  void* base;
  int* slots() { return reinterpret_cast<int*>(static_cast<char*>(base) + 4096); }
};

// Whether `f()` throws a runtime_error whose message contains `part`.
template <class F>
bool throws_saying(F&& f, const std::string& part) {
  try {
    f();
  } catch (const std::runtime_error& e) {
    return std::string(e.what()).find(part) != std::string::npos;
  }
  return false;
}

// Three processes (this one and two forked) pass 200 barriers; after each, every rank sees the
// values the others wrote before it. Runs before any core thread exists (fork).
void link_barrier_orders_processes() {
  SharedPage page;
  constexpr int kRanks = 3, kRounds = 200;
  auto run = [&](int rank) {
    link_join(page.base, rank);
    bool ok = true;
    for (int i = 0; i < kRounds; ++i) {
      page.slots()[rank] = i;
      link_barrier(page.base, rank, kRanks, 10.0);
      for (int r = 0; r < kRanks; ++r) ok &= page.slots()[r] == i;
      link_barrier(page.base, rank, kRanks, 10.0);  // before anyone writes the next round
    }
    return ok;
  };
  std::vector<pid_t> children;
  for (int rank = 1; rank < kRanks; ++rank) {
    pid_t pid = fork();
    if (pid == 0) _exit(run(rank) ? 0 : 1);
    children.push_back(pid);
  }
  CHECK(run(0));
  for (pid_t pid : children) {
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
}

void link_barrier_names_a_rank_that_exited() {
  SharedPage page;
  pid_t pid = fork();
  if (pid == 0) {
    link_join(page.base, 1);
    _exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  link_join(page.base, 0);
  CHECK(throws_saying([&] { link_barrier(page.base, 0, 2, 10.0); }, "rank(s) 1 (pid " + std::to_string(pid) + ")"));
}

void link_barrier_times_out_naming_the_late_rank_then_stays_broken() {
  SharedPage page;
  link_join(page.base, 0);  // rank 1 never comes
  auto start = std::chrono::steady_clock::now();
  CHECK(throws_saying([&] { link_barrier(page.base, 0, 2, 0.2); }, "waiting for rank(s) 1"));
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));
  CHECK(throws_saying([&] { link_barrier(page.base, 0, 2, 0.2); }, "broken since rank 0"));
}

void kernels_run_with_their_launching_threads_float_controls() {
  HardwareQueue q(0, 256, false);
  const uint64_t mine = float_controls();
#if defined(__x86_64__) || defined(__i386__)
  const uint64_t flush = mine | 0x8040;  // flush-to-zero and denormals-are-zero
#elif defined(__aarch64__)
  const uint64_t flush = mine | (1u << 24);  // FZ
#else
  const uint64_t flush = mine;
#endif
  std::vector<uint64_t> seen;
  for (uint64_t controls : {flush, mine, flush}) {
    set_float_controls(controls);
    launch(q, 0, [&seen] { seen.push_back(float_controls()); });
    q.synchronize();
  }
  set_float_controls(mine);
  CHECK((seen == std::vector<uint64_t>{flush, mine, flush}));
}

}  // namespace

int main() {
  const std::vector<std::pair<const char*, void (*)()>> tests = {
      {"link_barrier_orders_processes", link_barrier_orders_processes},  // first: it forks
      {"link_barrier_names_a_rank_that_exited", link_barrier_names_a_rank_that_exited},
      {"link_barrier_times_out_naming_the_late_rank_then_stays_broken",
       link_barrier_times_out_naming_the_late_rank_then_stays_broken},
      {"stream_keeps_launch_order", stream_keeps_launch_order},
      {"stream_keeps_launch_order_as_its_list_grows", stream_keeps_launch_order_as_its_list_grows},
      {"higher_priority_stream_runs_first", higher_priority_stream_runs_first},
      {"earliest_deferred_error_wins_and_is_cleared", earliest_deferred_error_wins_and_is_cleared},
      {"captured_error_is_not_deferred", captured_error_is_not_deferred},
      {"events_order_streams_and_complete", events_order_streams_and_complete},
      {"pool_accounts_exactly", pool_accounts_exactly},
      {"pool_cache_keeps_best_fit_through_reuse", pool_cache_keeps_best_fit_through_reuse},
      {"pool_enforces_capacity", pool_enforces_capacity},
      {"frees_are_stream_ordered", frees_are_stream_ordered},
      {"allocation_waits_for_blocks_queued_kernels_use", allocation_waits_for_blocks_queued_kernels_use},
      {"idle_core_runs_inline_and_busy_core_refuses", idle_core_runs_inline_and_busy_core_refuses},
      {"injected_faults_fail_their_kernels_fault_points_count_times",
       injected_faults_fail_their_kernels_fault_points_count_times},
      {"the_runtime_has_no_cores_until_configured", the_runtime_has_no_cores_until_configured},
      {"kernels_run_with_their_launching_threads_float_controls",
       kernels_run_with_their_launching_threads_float_controls},
      {"cores_run_side_by_side", cores_run_side_by_side},  // last: it configures the process's runtime
  };
  int failed = 0;
  for (const auto& [name, test] : tests) {
    const int before = failures;
    test();
    const bool ok = failures == before;
    failed += !ok;
    std::printf("%s %s\n", ok ? "ok" : "FAILED", name);
  }
  std::printf("%zu tests, %d failed\n", tests.size(), failed);
  return failed ? 1 : 0;
}
