// The CUDA emulator's runtime: device memory, copies, streams, events, the
// device's properties, error state, and the launch of a grid as fibers
// (device.h says what a launch does and what it can and cannot catch).
//
// Device memory. Every cudaMalloc is its own mapping: the buffer ends within
// 255 bytes (its 256-byte alignment) of a guard page that is never
// accessible, so a kernel that reads or writes past the end faults. The
// bytes between the page start and the buffer, and between its end and the
// guard page, are 0xff (NaN as float) and must stay so: a write there is
// reported when the kernel ends and fails the launch. While
// host code runs, every device buffer is inaccessible as well: only kernels,
// copies, memsets and the emulated cuBLASLt open them. A host dereference of
// a device pointer, which would read garbage or crash on a GPU machine,
// faults here. The SIGSEGV handler says which of these happened (or that a
// CUDA thread overflowed its fiber stack).
//
// Streams. Work is queued per stream and runs only where real CUDA would
// have to have run it: a stream, event or device synchronisation, a
// blocking copy (cudaMemcpy; cudaMemcpyAsync to pageable memory, and the
// stream's earlier work before one from pageable memory, which is staged),
// cudaFree (which synchronises the device), a second cudaStreamQuery (the
// first answers cudaErrorNotReady while work is queued). Before a piece of
// work runs, the work it is ordered after on other streams runs (events
// waited for; the legacy default stream's implicit order with the blocking
// streams). So work that a missing synchronisation leaves unordered runs
// late, or never, in the order a GPU is allowed to pick; and when it is
// queued, work on another stream that is not ordered before it and touches
// the same bytes (one of the two writing) is reported as a race
// (emulator.h, enqueue): this catches a stream that does not wait for the
// data it reads, and a buffer written or freed (cudaFreeAsync) while queued
// work on another stream still reads it. Host destinations of asynchronous
// copies into pinned memory (cudaMallocHost) hold 0xff bytes (NaN) until
// the copy runs. An error of queued work is reported, as on a GPU, by the
// synchronisation that runs it and every call after.
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>
#if !defined(__x86_64__)
#include <ucontext.h>
#endif

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <source_location>
#include <string>
#include <vector>

#include "cuda_runtime.h"
#include "emulator.h"

struct CUstream_st;
namespace cuemu {
// For every stream, how many of its pieces of work (counted from 1) come
// before: a vector clock.
using Clock = std::map<CUstream_st*, uint64_t>;
// A piece of queued work.
struct Op {
  uint64_t seq;                                      // its place in its stream, from 1
  const char* what;                                  // a name for race reports
  std::vector<Access> footprint;                     // the bytes it touches
  std::vector<std::pair<CUstream_st*, uint64_t>> after;  // work of other streams that runs first
  std::function<void()> run;
};
}  // namespace cuemu

struct CUstream_st {
  unsigned flags;
  int id;                      // 0: legacy default stream, 1: per-thread default stream, then creation order
  bool destroyed = false;      // its queued work still runs; new work is refused
  bool told_not_ready = false; // cudaStreamQuery answered cudaErrorNotReady for the work queued now
  uint64_t enqueued = 0, done = 0;
  std::deque<cuemu::Op> pending{};
  cuemu::Clock clock{};        // the work of other streams its next piece is ordered after
};
struct CUevent_st {
  std::chrono::steady_clock::time_point t;
  bool recorded;  // cudaEventRecord was called
  unsigned flags;
  bool ran = false;       // and its place in the stream was reached
  cuemu::Clock clock{};   // the work it marks the end of
};

namespace cuemu {
namespace {

constexpr size_t kPage = 4096;
constexpr size_t kDeviceBytes = size_t(16) << 30;  // what cudaMemGetInfo calls total

struct Allocation {
  char* map;        // start of the mapping
  size_t data_len;  // accessible part (whole pages), followed by one guard page
  size_t bytes;     // what was asked for
  char* user;       // the buffer; [map, user) and [user + bytes, map + data_len) hold 0xff
  bool freeing = false;  // given to cudaFreeAsync: freed when its stream gets there
};
constexpr unsigned char kFill = 0xff;

// The device state. The runtime serves one host thread at a time (the
// project's CUDA backend runs on one), but a mutex keeps the tables sane
// if tests call from several.
std::recursive_mutex g_mutex;
std::map<uintptr_t, Allocation> g_allocs;  // by the user pointer
size_t g_in_use = 0;
int g_open_depth = 0;       // > 0 while device code runs: buffers accessible
bool g_check_fill = false;  // device code ran since buffers were opened: check_fill on closing
cudaError_t g_last = cudaSuccess, g_sticky = cudaSuccess;
uint64_t g_launches = 0;                       // launches so far (the shuffle's per-launch seed)
const BlockOrder* g_order_override = nullptr;  // set_block_order's, else the environment's

size_t round_up(size_t n, size_t m) { return (n + m - 1) / m * m; }

cudaError_t set_error(cudaError_t e) {
  if (e != cudaSuccess) g_last = e;
  return e;
}

void protect_all(int prot) {
  for (auto& [user, a] : g_allocs) mprotect(a.map, a.data_len, prot);
}

// The allocation holding [p, p + n), or nullptr.
const Allocation* find(const void* p, size_t n = 1) {
  const auto addr = reinterpret_cast<uintptr_t>(p);
  auto it = g_allocs.upper_bound(addr);
  if (it == g_allocs.begin()) return nullptr;
  --it;
  const uintptr_t user = it->first;
  if (addr < user || addr + std::max<size_t>(n, 1) > user + it->second.bytes) return nullptr;
  return &it->second;
}

bool in_stack_guard(uintptr_t addr);  // the fibers' stacks, below

// A fault inside a mapping of ours: say whose, then die as the signal would.
void on_segv(int sig, siginfo_t* info, void*) {
  const auto addr = reinterpret_cast<uintptr_t>(info->si_addr);
  char msg[256];
  int len = 0;
  for (const auto& [user, a] : g_allocs) {
    const auto map = reinterpret_cast<uintptr_t>(a.map);
    if (addr < map || addr >= map + a.data_len + kPage) continue;
    if (addr >= map + a.data_len)
      len = std::snprintf(msg, sizeof msg,
                          "cuda emulator: access %zu bytes past the end of a device buffer of %zu bytes "
                          "(out of bounds)\n",
                          size_t(addr - (user + a.bytes)), a.bytes);
    else if (g_open_depth == 0)
      len = std::snprintf(msg, sizeof msg,
                          "cuda emulator: host code touched device memory (offset %zd of a buffer of %zu bytes); "
                          "use cudaMemcpy\n",
                          static_cast<ssize_t>(addr - user), a.bytes);
    break;
  }
  if (len == 0 && in_stack_guard(addr))
    len = std::snprintf(msg, sizeof msg, "cuda emulator: a CUDA thread overflowed its 256 KiB stack\n");
  if (len > 0) {
    if (write(STDERR_FILENO, msg, static_cast<size_t>(len)) < 0) {
    }
  }
  signal(sig, SIG_DFL);
  raise(sig);
}

void install_handler() {
  static std::once_flag once;
  std::call_once(once, [] {
    // Its own stack, so that a fiber's stack overflow still gets its message.
    static char alt[64 << 10];
    stack_t ss{};
    ss.ss_sp = alt;
    ss.ss_size = sizeof alt;
    sigaltstack(&ss, nullptr);
    struct sigaction sa {};
    sa.sa_sigaction = on_segv;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, nullptr);
  });
}

cudaError_t device_malloc(void** ptr, size_t bytes) {
  if (!ptr) return set_error(cudaErrorInvalidValue);
  if (g_sticky != cudaSuccess) return g_sticky;
  install_handler();
  const size_t user_len = round_up(std::max<size_t>(bytes, 1), 256);
  const size_t data_len = round_up(user_len, kPage);
  if (g_in_use + data_len > kDeviceBytes) return set_error(cudaErrorMemoryAllocation);
  void* map = mmap(nullptr, data_len + kPage, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (map == MAP_FAILED) return set_error(cudaErrorMemoryAllocation);
  char* base = static_cast<char*>(map);
  char* user = base + data_len - user_len;
  mprotect(base, data_len, PROT_READ | PROT_WRITE);
  std::memset(base, kFill, static_cast<size_t>(user - base));
  std::memset(user + bytes, kFill, data_len - static_cast<size_t>(user - base) - bytes);
  if (g_open_depth == 0) mprotect(base, data_len, PROT_NONE);
  g_allocs[reinterpret_cast<uintptr_t>(user)] = Allocation{base, data_len, bytes, user};
  g_in_use += data_len;
  *ptr = user;
  return cudaSuccess;
}

cudaError_t device_free(void* ptr) {
  if (!ptr) return cudaSuccess;
  auto it = g_allocs.find(reinterpret_cast<uintptr_t>(ptr));
  if (it == g_allocs.end()) return set_error(cudaErrorInvalidDevicePointer);
  munmap(it->second.map, it->second.data_len + kPage);
  g_in_use -= it->second.data_len;
  g_allocs.erase(it);
  return g_sticky != cudaSuccess ? g_sticky : cudaSuccess;
}

// ---- streams -----------------------------------------------------------------------------

// Never destroyed (a backend freed by a static destructor at exit still
// synchronises through them), and reachable (no leak reported).
CUstream_st& g_legacy = *new CUstream_st{cudaStreamDefault, 0};
CUstream_st& g_per_thread = *new CUstream_st{cudaStreamDefault, 1};
// Every stream ever made (never freed: clocks and queued work point at them).
std::vector<CUstream_st*>& g_streams = *new std::vector<CUstream_st*>{&g_legacy, &g_per_thread};
std::vector<CUevent_st*>& g_events = *new std::vector<CUevent_st*>;  // likewise (a queued record writes to its event)
std::map<uintptr_t, size_t>& g_pinned = *new std::map<uintptr_t, size_t>;  // cudaMallocHost's buffers: start, bytes

bool blocking(const CUstream_st* s) { return (s->flags & cudaStreamNonBlocking) == 0; }

// The stream a handle names; nullptr for a destroyed one.
CUstream_st* stream_of(const void* handle) {
  if (handle == nullptr || handle == cudaStreamLegacy) return &g_legacy;
  if (handle == cudaStreamPerThread) return &g_per_thread;
  auto* s = static_cast<CUstream_st*>(const_cast<void*>(handle));
  return s->destroyed ? nullptr : s;
}

std::string stream_name(const CUstream_st* s) {
  if (s == &g_legacy) return "the legacy default stream";
  if (s == &g_per_thread) return "the per-thread default stream";
  return std::string(blocking(s) ? "stream " : "non-blocking stream ") + std::to_string(s->id);
}

void merge(Clock& into, const Clock& from) {
  for (const auto& [t, n] : from) into[t] = std::max(into[t], n);
}
// Everything queued on s so far, and what that is ordered after.
void merge_stream(Clock& into, CUstream_st* s) {
  merge(into, s->clock);
  into[s] = std::max(into[s], s->enqueued);
}

// The legacy default stream's implicit order: its work waits for the work
// queued before on every blocking stream, and theirs for its.
void order_implicitly(CUstream_st* s) {
  if (!blocking(s)) return;
  if (s == &g_legacy) {
    for (CUstream_st* t : g_streams)
      if (t != s && blocking(t)) merge_stream(s->clock, t);
  } else {
    merge_stream(s->clock, &g_legacy);
  }
}

bool conflict(const Access& a, const Access& b) {
  const auto a0 = reinterpret_cast<uintptr_t>(a.p), b0 = reinterpret_cast<uintptr_t>(b.p);
  return (a.write || b.write) && a0 < b0 + b.bytes && b0 < a0 + a.bytes;
}

std::string address(const void* p) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%p", p);
  return buf;
}

bool fail_queue(const std::string& why) {
  std::fprintf(stderr, "cuda emulator: %s\n", why.c_str());
  g_sticky = cudaErrorLaunchFailure;
  set_error(g_sticky);
  return false;
}

// Queues `run` on s after the race and use-after-free checks.
bool enqueue_on(CUstream_st* s, const char* what, std::vector<Access> footprint, std::function<void()> run) {
  order_implicitly(s);
  for (const Access& a : footprint) {
    const Allocation* al = find(a.p);
    if (al && al->freeing)
      return fail_queue(std::string(what) + " on " + stream_name(s) + " uses a device buffer of " +
                        std::to_string(al->bytes) + " bytes already given to cudaFreeAsync");
  }
  for (CUstream_st* t : g_streams) {
    if (t == s) continue;
    const auto known = s->clock.find(t);
    const uint64_t before = known == s->clock.end() ? 0 : known->second;
    for (const Op& op : t->pending) {
      if (op.seq <= before) continue;
      for (const Access& x : op.footprint)
        for (const Access& y : footprint)
          if (conflict(x, y))
            return fail_queue(
                "stream race: " + std::string(what) + " on " + stream_name(s) + (y.write ? " writes" : " reads") +
                " the bytes at " + address(y.p) + " that " + op.what +
                ", queued before on " + stream_name(t) + (x.write ? ", writes" : ", reads") +
                ", and nothing orders the two (no event waited for, no synchronisation in between)");
    }
  }
  Op op{++s->enqueued, what, std::move(footprint), {}, std::move(run)};
  for (const auto& [t, n] : s->clock)
    if (t != s && n > t->done) op.after.emplace_back(t, n);
  s->pending.push_back(std::move(op));
  return true;
}

// Runs s's queued work up to its piece `upto`, each piece after the work it
// is ordered after on other streams. After an error nothing more runs.
void run_until(CUstream_st* s, uint64_t upto) {
  while (s->done < upto && !s->pending.empty()) {
    Op op = std::move(s->pending.front());
    s->pending.pop_front();
    for (const auto& [t, n] : op.after) run_until(t, n);
    if (g_sticky == cudaSuccess) op.run();
    s->done = op.seq;
  }
  if (s->pending.empty()) s->told_not_ready = false;
}
void run_clock(const Clock& c) {
  for (const auto& [t, n] : c) run_until(t, n);
}
void run_all() {
  for (CUstream_st* s : g_streams) run_until(s, s->enqueued);
}

// [p, p + n) lies in one cudaMallocHost buffer.
bool pinned(const void* p, size_t n) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  auto it = g_pinned.upper_bound(a);
  if (it == g_pinned.begin()) return false;
  --it;
  return a >= it->first && a + n <= it->first + it->second;
}

// ---- fibers ------------------------------------------------------------------------------
// A fiber's saved context. On x86-64 a switch saves the callee-saved
// registers on the old stack and swaps stack pointers (a few nanoseconds;
// glibc's swapcontext also makes a signal-mask system call each time, which
// made emulated training spend half its time in the kernel). Elsewhere,
// ucontext. The MXCSR and x87 control words are not switched: no kernel
// changes the rounding mode or the exception masks.

#if defined(__x86_64__)
extern "C" void cuemu_switch(void** save_sp, void* load_sp);
asm(R"(
.text
.globl cuemu_switch
.type cuemu_switch, @function
cuemu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
.size cuemu_switch, .-cuemu_switch
.section .note.GNU-stack,"",@progbits
.text
)");

struct Context {
  void* sp = nullptr;
};
// A context that starts entry() on the stack [base, base + size).
void make_context(Context& c, char* base, size_t size, void (*entry)()) {
  auto* top = reinterpret_cast<uintptr_t*>(reinterpret_cast<uintptr_t>(base + size) & ~uintptr_t(15));
  *--top = 0;                                   // entry's return address: it never returns
  *--top = reinterpret_cast<uintptr_t>(entry);  // where cuemu_switch's ret goes
  for (int i = 0; i < 6; ++i) *--top = 0;       // rbp rbx r12 r13 r14 r15
  c.sp = top;
}
void switch_context(Context& from, Context& to) { cuemu_switch(&from.sp, to.sp); }
#else
struct Context {
  ucontext_t uc;
};
void make_context(Context& c, char* base, size_t size, void (*entry)()) {
  if (getcontext(&c.uc) != 0) std::abort();
  c.uc.uc_stack.ss_sp = base;
  c.uc.uc_stack.ss_size = size;
  c.uc.uc_link = nullptr;
  makecontext(&c.uc, entry, 0);
}
void switch_context(Context& from, Context& to) {
  if (swapcontext(&from.uc, &to.uc) != 0) std::abort();
}
#endif

constexpr size_t kStackBytes = size_t(256) << 10;
constexpr unsigned kMaxThreads = 1024;

enum class State { Ready, AtBarrier, AtShuffle, Done };

struct Fiber {
  Context ctx;
  ThreadIds ids;
  State state;
  unsigned wait_gen;  // generation of the barrier or shuffle it waits at
  unsigned warp, lane;
};

struct Warp {
  unsigned live = 0, arrived = 0, gen = 0;
  uint64_t bits[2][32];
  unsigned deposited[2][32];  // generation each lane last deposited in
  const char* op[2][32];      // the warp instruction it deposited for
};

// What a lane gives a warp collective (mma, ldmatrix): its operand
// registers. Kept apart from Warp, which every block resets.
constexpr size_t kCollectiveBytes = 48;
struct CollectiveSlots {
  unsigned char lane[2][32][kCollectiveBytes];
};

constexpr size_t kSharedBytes = 48 << 10;  // static shared memory a block may use

struct Block {
  std::vector<Fiber> fibers;
  std::vector<Warp> warps;
  unsigned live = 0, arrived = 0, gen = 0;
  std::source_location barrier_site;  // where the threads of this generation wait
  std::string error;
  // Shared memory: arrays by declaration, carved from `shared`.
  std::vector<std::pair<const void*, void*>> arrays;
  size_t shared_used = 0;
  std::vector<CollectiveSlots> collective;  // one per warp
  unsigned first_stack = 0;                 // its threads' fiber stacks: stack_for(first_stack + t)
  alignas(64) char shared[kSharedBytes];
};

Context g_scheduler;
Fiber* g_current = nullptr;
// The blocks in flight (more than one when blocks interleave at their
// barriers: BlockOrder::interleave) and the one whose thread runs now.
std::vector<std::unique_ptr<Block>> g_blocks;
Block* g_blk = nullptr;
bool g_interleaving = false;  // several blocks in flight (step_block yields at barriers)
const std::function<void()>* g_body = nullptr;
std::vector<char*> g_stacks;  // one per thread slot, each above a guard page

char* stack_for(unsigned i) {
  while (g_stacks.size() <= i) {
    void* m =
        mmap(nullptr, kStackBytes + kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) {
      std::fprintf(stderr, "cuda emulator: no memory for fiber stacks\n");
      std::abort();
    }
    mprotect(m, kPage, PROT_NONE);  // stacks grow down: an overflow faults
    g_stacks.push_back(static_cast<char*>(m) + kPage);
  }
  return g_stacks[i];
}

bool in_stack_guard(uintptr_t addr) {
  for (char* s : g_stacks) {
    const auto top = reinterpret_cast<uintptr_t>(s);
    if (addr >= top - kPage && addr < top) return true;
  }
  return false;
}

void yield_to_scheduler() { switch_context(g_current->ctx, g_scheduler); }

// The calling lane, whose data for its warp's instruction `op` is already
// in slot gen & 1 of the current generation, arrives there and waits until
// every live lane of the warp has (a shuffle, mma, ldmatrix).
void arrive_at_warp(Fiber& f, Warp& w, const char* op) {
  const unsigned gen = w.gen, slot = gen & 1u;
  w.deposited[slot][f.lane] = gen;
  w.op[slot][f.lane] = op;
  if (++w.arrived == w.live) {
    w.arrived = 0;
    ++w.gen;
  } else {
    f.wait_gen = gen;
    f.state = State::AtShuffle;
    yield_to_scheduler();
  }
}

// A thread that returned no longer holds up barriers or shuffles.
void thread_exited(Fiber& f) {
  f.state = State::Done;
  Block& b = *g_blk;
  --b.live;
  if (b.arrived > 0 && b.arrived == b.live) {
    b.arrived = 0;
    ++b.gen;
  }
  Warp& w = b.warps[f.warp];
  --w.live;
  if (w.arrived > 0 && w.arrived == w.live) {
    w.arrived = 0;
    ++w.gen;
  }
}

[[noreturn]] void fiber_entry() {
  (*g_body)();
  thread_exited(*g_current);
  yield_to_scheduler();  // never resumed
  std::abort();
}

std::string describe(const Fiber& f) {
  const ThreadIds& i = f.ids;
  return "block (" + std::to_string(i.block_idx.x) + "," + std::to_string(i.block_idx.y) + "," +
         std::to_string(i.block_idx.z) + ") thread (" + std::to_string(i.thread_idx.x) + "," +
         std::to_string(i.thread_idx.y) + "," + std::to_string(i.thread_idx.z) + ")";
}

// Sets up block `block_idx` in b, its threads ready at the kernel's start.
void start_block(Block& b, dim3 grid, dim3 block, uint3 block_idx) {
  const unsigned n = block.x * block.y * block.z;
  const unsigned nwarps = (n + 31) / 32;
  b.fibers.resize(n);
  b.warps.assign(nwarps, Warp{});
  b.live = n;
  b.arrived = 0;
  b.gen = 0;
  b.error.clear();
  b.arrays.clear();
  b.shared_used = 0;
  for (unsigned t = 0; t < n; ++t) {
    Fiber& f = b.fibers[t];
    f.ids.thread_idx = uint3{t % block.x, (t / block.x) % block.y, t / (block.x * block.y)};
    f.ids.block_idx = block_idx;
    f.ids.block_dim = block;
    f.ids.grid_dim = grid;
    f.state = State::Ready;
    f.wait_gen = 0;
    f.warp = t / 32;
    f.lane = t % 32;
    ++b.warps[f.warp].live;
    std::memset(b.warps[f.warp].deposited, 0xff, sizeof b.warps[f.warp].deposited);
    make_context(f.ctx, stack_for(b.first_stack + t), kStackBytes, fiber_entry);
  }
}

enum class Step { Done, AtBarrier, Failed };

// Runs block b until it ends (Done), fails (Failed, b.error set) or, with
// `yield_at_barrier`, until one of its barriers opens (AtBarrier: every
// thread has arrived, none has gone on yet), so that another block can run
// its part in between.
Step step_block(Block& b, bool yield_at_barrier) {
  g_blk = &b;
  const unsigned n = static_cast<unsigned>(b.fibers.size());
  const unsigned nwarps = static_cast<unsigned>(b.warps.size());
  const uint3 block_idx = n ? b.fibers[0].ids.block_idx : uint3{0, 0, 0};
  const unsigned gen0 = b.gen;
  // Warp by warp, each as far as it goes (to a block barrier or its end)
  // before the next one starts: a warp that runs ahead into the next phase
  // of the kernel overwrites shared data the later warps have not read yet,
  // and reads data they have not written, whenever a barrier is missing.
  // (Going round all threads at every shuffle would hide such races.)
  auto runnable = [&](const Fiber& f) {
    return f.state == State::Ready || (f.state == State::AtBarrier && b.gen != f.wait_gen) ||
           (f.state == State::AtShuffle && b.warps[f.warp].gen != f.wait_gen);
  };
  // Odd blocks take the warps, and the lanes of a warp, in reverse order,
  // so that a race needs no particular order of writer and reader to show.
  const bool reverse = ((block_idx.x + block_idx.y + block_idx.z) & 1u) != 0;
  for (;;) {
    bool ran = false;
    for (unsigned wi = 0; wi < nwarps; ++wi) {
      const unsigned w = reverse ? nwarps - 1 - wi : wi;
      const unsigned first = w * 32, count = std::min(n, first + 32) - first;
      for (bool progress = true; progress;) {
        progress = false;
        for (unsigned li = 0; li < count; ++li) {
          Fiber& f = b.fibers[first + (reverse ? count - 1 - li : li)];
          if (!runnable(f)) continue;
          f.state = State::Ready;
          g_current = &f;
          switch_context(g_scheduler, f.ctx);
          g_current = nullptr;
          progress = ran = true;
          if (!b.error.empty()) return Step::Failed;
          if (yield_at_barrier && b.gen != gen0 && b.live > 0) return Step::AtBarrier;
        }
      }
    }
    if (b.live == 0) return Step::Done;
    if (!ran) {
      unsigned at_barrier = 0, at_shuffle = 0;
      const Fiber* example = nullptr;
      for (const Fiber& f : b.fibers) {
        if (f.state == State::AtBarrier) ++at_barrier;
        if (f.state == State::AtShuffle) {
          ++at_shuffle;
          example = &f;
        }
      }
      b.error = "deadlock in block (" + std::to_string(block_idx.x) + "," + std::to_string(block_idx.y) + "," +
                std::to_string(block_idx.z) + "): " + std::to_string(at_barrier) + " threads wait at __syncthreads, " +
                std::to_string(at_shuffle) + " at a warp shuffle" +
                (example ? " (e.g. " + describe(*example) + ")" : std::string()) +
                ": the threads do not all reach the same barrier";
      return Step::Failed;
    }
  }
}

}  // namespace

const ThreadIds& ids() {
  if (!g_current) {
    std::fprintf(stderr, "cuda emulator: threadIdx/blockIdx read outside a kernel\n");
    std::abort();
  }
  return g_current->ids;
}

void fail(const char* what) {
  if (!g_current) {
    std::fprintf(stderr, "cuda emulator: %s\n", what);
    std::abort();
  }
  g_blk->error = std::string(what) + " (" + describe(*g_current) + ")";
  yield_to_scheduler();  // never resumed
  std::abort();
}

void block_bound(unsigned long long n, const char* kernel) {
  if (!g_current) fail("GPT_BLOCK_BOUND outside a kernel");
  const dim3& b = g_current->ids.block_dim;
  const unsigned long long threads = static_cast<unsigned long long>(b.x) * b.y * b.z;
  if (threads > n) {
    const std::string what = std::string("kernel ") + kernel + " is launched with " + std::to_string(threads) +
                             " threads per block, above its __launch_bounds__(" + std::to_string(n) +
                             "); a GPU refuses such a launch";
    fail(what.c_str());
  }
}

void* shared_memory(size_t bytes, size_t align, const void* key) {
  if (!g_current) fail("shared memory declared outside a kernel");
  Block& b = *g_blk;
  for (const auto& [k, p] : b.arrays)
    if (k == key) return p;
  const size_t at = round_up(b.shared_used, std::max<size_t>(align, 1));
  if (at + bytes > kSharedBytes) {
    const std::string what = "the block declares " + std::to_string(at + bytes) +
                             " bytes of shared memory, more than the 48 KiB a block may have statically";
    fail(what.c_str());
  }
  void* p = b.shared + at;
  std::memset(p, 0xff, bytes);
  b.shared_used = at + bytes;
  b.arrays.emplace_back(key, p);
  return p;
}

void syncthreads(const std::source_location& site) {
  if (!g_current) fail("__syncthreads outside a kernel");
  Block& b = *g_blk;
  if (b.arrived == 0) {
    b.barrier_site = site;
  } else if (site.line() != b.barrier_site.line() || std::strcmp(site.file_name(), b.barrier_site.file_name()) != 0) {
    const std::string what = std::string("threads wait at different __syncthreads: ") + b.barrier_site.file_name() +
                             ":" + std::to_string(b.barrier_site.line()) + " and " + site.file_name() + ":" +
                             std::to_string(site.line());
    fail(what.c_str());
  }
  if (++b.arrived == b.live) {
    b.arrived = 0;
    ++b.gen;
    if (!g_interleaving) return;
    // Blocks interleave at their barriers: the last thread to arrive waits
    // too, so that another block runs before any thread goes on.
    g_current->wait_gen = b.gen - 1;
    g_current->state = State::AtBarrier;
    yield_to_scheduler();
    return;
  }
  g_current->wait_gen = b.gen;
  g_current->state = State::AtBarrier;
  yield_to_scheduler();
}

uint64_t shfl_xor_bits(unsigned mask, uint64_t bits, int lane_mask, int width) {
  if (!g_current) fail("__shfl_xor_sync outside a kernel");
  if (width <= 0 || width > 32 || (width & (width - 1)) != 0) fail("__shfl_xor_sync: width must be a power of 2 <= 32");
  Fiber& f = *g_current;
  if (!(mask >> f.lane & 1u)) fail("__shfl_xor_sync called by a lane outside its mask");
  Warp& w = g_blk->warps[f.warp];
  const unsigned gen = w.gen, slot = gen & 1u;
  w.bits[slot][f.lane] = bits;
  arrive_at_warp(f, w, "__shfl_xor_sync");
  unsigned src = f.lane ^ static_cast<unsigned>(lane_mask);
  // Outside the lane's group of `width`: the lane keeps its own value.
  if ((src & ~unsigned(width - 1)) != (f.lane & ~unsigned(width - 1))) src = f.lane;
  if (!(mask >> src & 1u)) fail("__shfl_xor_sync reads a lane outside the mask");
  if (w.deposited[slot][src] != gen)
    fail("__shfl_xor_sync reads a lane that did not take part (it returned or diverged)");
  return w.bits[slot][src];
}

namespace {

// A warp-wide instruction (.sync.aligned): the calling lane deposits its
// `bytes` for `op`, waits until every live lane of its warp has arrived,
// and gets the deposits of all 32 lanes (lane l's at l·kCollectiveBytes).
// Every lane must take part, at the same instruction.
const unsigned char* warp_collective(const char* op, const void* mine, size_t bytes) {
  if (!g_current) fail("a warp matrix instruction outside a kernel");
  Fiber& f = *g_current;
  Block& b = *g_blk;
  if (b.fibers.size() < (f.warp + 1) * 32) {
    const std::string what = std::string(op) + " needs a full warp of 32 lanes, but this block of " +
                             std::to_string(b.fibers.size()) + " threads ends inside warp " + std::to_string(f.warp);
    fail(what.c_str());
  }
  if (b.collective.size() < b.warps.size()) b.collective.resize(b.warps.size());
  Warp& w = b.warps[f.warp];
  const unsigned gen = w.gen, slot = gen & 1u;
  std::memcpy(b.collective[f.warp].lane[slot][f.lane], mine, bytes);
  arrive_at_warp(f, w, op);
  for (unsigned l = 0; l < 32; ++l) {
    if (w.deposited[slot][l] != gen) {
      const std::string what = std::string(op) + ": lane " + std::to_string(l) +
                               " of the warp did not take part (it returned or diverged); the instruction is "
                               ".aligned: every lane must execute it";
      fail(what.c_str());
    }
    if (std::strcmp(w.op[slot][l], op) != 0) {
      const std::string what = std::string("lanes of one warp at different warp instructions: ") + op + " and " +
                               w.op[slot][l] + " (lane " + std::to_string(l) + ")";
      fail(what.c_str());
    }
  }
  return &b.collective[f.warp].lane[slot][0][0];
}

float bf16_bits_to_float(uint32_t bits) { return std::bit_cast<float>((bits & 0xffffu) << 16); }

}  // namespace

// The layouts below are the PTX ISA's (mma.m16n8k16 with .bf16 operands,
// ldmatrix .m8n8 .b16), written here register by register, apart from
// kernels/cuda/mma_layout.h: lane l, g = l / 4, t = l % 4.
void mma_m16n8k16_bf16(float d[4], const uint32_t a[4], const uint32_t b[2], const float c[4]) {
  struct Operands {
    uint32_t a[4], b[2];
    float c[4];
  } mine;
  static_assert(sizeof(Operands) <= kCollectiveBytes);
  std::memcpy(mine.a, a, sizeof mine.a);
  std::memcpy(mine.b, b, sizeof mine.b);
  std::memcpy(mine.c, c, sizeof mine.c);
  const unsigned char* all = warp_collective("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32", &mine, sizeof mine);
  float A[16][16], B[16][8], C[16][8];
  for (unsigned l = 0; l < 32; ++l) {
    Operands o;
    std::memcpy(&o, all + l * kCollectiveBytes, sizeof o);
    const unsigned g = l / 4, t = l % 4;
    // A: register j holds row g (j even) or g + 8 (j odd), columns
    // 2t and 2t + 1, plus 8 for j >= 2.
    for (unsigned j = 0; j < 4; ++j)
      for (unsigned h = 0; h < 2; ++h)
        A[g + 8 * (j % 2)][2 * t + h + 8 * (j / 2)] = bf16_bits_to_float(o.a[j] >> (16 * h));
    // B: register j holds rows 2t and 2t + 1 (plus 8 for j = 1) of column g.
    for (unsigned j = 0; j < 2; ++j)
      for (unsigned h = 0; h < 2; ++h) B[2 * t + h + 8 * j][g] = bf16_bits_to_float(o.b[j] >> (16 * h));
    // C: c0 c1 in row g, c2 c3 in row g + 8, columns 2t and 2t + 1.
    for (unsigned i = 0; i < 4; ++i) C[g + 8 * (i / 2)][2 * t + i % 2] = o.c[i];
  }
  // Products of bf16 values are exact in float32; the sum is rounded once
  // here (a tensor core may round its partial sums differently, within a
  // few float32 ulps).
  const unsigned l = g_current->lane, g = l / 4, t = l % 4;
  for (unsigned i = 0; i < 4; ++i) {
    const unsigned row = g + 8 * (i / 2), col = 2 * t + i % 2;
    double s = C[row][col];
    for (unsigned k = 0; k < 16; ++k) s += double(A[row][k]) * double(B[k][col]);
    d[i] = static_cast<float>(s);
  }
}

void ldmatrix_b16(uint32_t* r, int num, bool trans, const void* row) {
  static const char* const kNames[2][3] = {
      {"ldmatrix.sync.aligned.m8n8.x1.shared.b16", "ldmatrix.sync.aligned.m8n8.x2.shared.b16",
       "ldmatrix.sync.aligned.m8n8.x4.shared.b16"},
      {"ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16", "ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16",
       "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16"}};
  if (num != 1 && num != 2 && num != 4) fail("ldmatrix: .x1, .x2 or .x4 only");
  const char* op = kNames[trans][num == 4 ? 2 : num - 1];
  const uint64_t mine = reinterpret_cast<uintptr_t>(row);
  const unsigned char* all = warp_collective(op, &mine, sizeof mine);
  // Lanes 0 .. 8·num - 1 give the row addresses: 16 bytes each, aligned,
  // inside the block's shared memory.
  const Block& b = *g_blk;
  const auto lo = reinterpret_cast<uintptr_t>(b.shared), hi = lo + b.shared_used;
  const char* rows[32];
  for (int q = 0; q < 8 * num; ++q) {
    uint64_t a;
    std::memcpy(&a, all + q * kCollectiveBytes, sizeof a);
    if (a % 16 != 0 || a < lo || a + 16 > hi) {
      const std::string what = std::string(op) + ": lane " + std::to_string(q) +
                               (a % 16 != 0 ? " gives an address that is not 16-byte aligned"
                                            : " gives an address outside the block's shared memory");
      fail(what.c_str());
    }
    rows[q] = reinterpret_cast<const char*>(a);
  }
  auto element = [&](int q, unsigned col) {
    uint16_t e;
    std::memcpy(&e, rows[q] + 2 * col, sizeof e);
    return uint32_t(e);
  };
  const unsigned l = g_current->lane, g = l / 4, t = l % 4;
  for (int m = 0; m < num; ++m) {
    // Without .trans the lane gets row g, columns 2t and 2t + 1; with it,
    // column g of rows 2t and 2t + 1.
    r[m] = trans ? element(8 * m + 2 * t, g) | element(8 * m + 2 * t + 1, g) << 16
                 : element(8 * m + g, 2 * t) | element(8 * m + g, 2 * t + 1) << 16;
  }
}

namespace {
void execute_grid(dim3 grid, dim3 block, const char* name, const std::function<void()>& body);
}

bool run_grid(dim3 grid, dim3 block, void* stream, const char* name, std::vector<Access> footprint,
              std::function<void()> body) {
  std::lock_guard lock(g_mutex);
  if (g_sticky != cudaSuccess) {
    set_error(g_sticky);
    return false;
  }
  const unsigned long long threads = 1ull * block.x * block.y * block.z;
  if (threads == 0 || threads > kMaxThreads || block.x > 1024 || block.y > 1024 || block.z > 64 || grid.x == 0 ||
      grid.x > 0x7fffffffu || grid.y == 0 || grid.y > 65535 || grid.z == 0 || grid.z > 65535) {
    set_error(cudaErrorInvalidConfiguration);
    return false;
  }
  if (g_current) {
    std::fprintf(stderr, "cuda emulator: launch of %s from inside a kernel\n", name);
    std::abort();
  }
  CUstream_st* s = stream_of(stream);
  if (!s) {
    set_error(cudaErrorInvalidResourceHandle);
    return false;
  }
  return enqueue_on(s, name, std::move(footprint),
                    [grid, block, name, body = std::move(body)] { execute_grid(grid, block, name, body); });
}

namespace {
void execute_grid(dim3 grid, dim3 block, const char* name, const std::function<void()>& body) {
  DeviceAccess open(true);
  g_body = &body;
  // The blocks in the order GPT_EMU_BLOCK_ORDER asks (block_order): a
  // kernel whose result depends on it has blocks that race through global
  // memory, which a GPU running them in any order would show.
  const unsigned long long nblocks = 1ull * grid.x * grid.y * grid.z;
  const BlockOrder order = block_order();
  std::vector<unsigned long long> perm;
  if (order.kind == BlockOrder::Shuffle) {
    perm.resize(nblocks);
    for (unsigned long long i = 0; i < nblocks; ++i) perm[i] = i;
    // Fisher-Yates with splitmix64 of (seed, launch count): each launch its own order.
    uint64_t state = order.seed * 0x9e3779b97f4a7c15ull + ++g_launches;
    for (unsigned long long i = nblocks; i > 1; --i) {
      state += 0x9e3779b97f4a7c15ull;
      uint64_t z = state;
      z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
      z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
      z ^= z >> 31;
      std::swap(perm[i - 1], perm[z % i]);
    }
  }
  // `interleave` blocks at a time (in that order), each run up to its next
  // barrier in turn: two blocks that use the same global memory between
  // their barriers (scratch meant to be a block's own) see each other's
  // writes, which blocks run one after the other never show.
  const unsigned k = static_cast<unsigned>(std::max<unsigned long long>(1, std::min<unsigned long long>(order.interleave, nblocks)));
  while (g_blocks.size() < k) {
    g_blocks.push_back(std::make_unique<Block>());
    g_blocks.back()->first_stack = static_cast<unsigned>(g_blocks.size() - 1) * kMaxThreads;
  }
  auto failed = [&](const Block& b) {
    g_interleaving = false;
    std::fprintf(stderr, "cuda emulator: %s failed: %s\n", name, b.error.c_str());
    g_sticky = cudaErrorLaunchFailure;
    set_error(g_sticky);
    g_body = nullptr;
    g_blk = nullptr;
  };
  for (unsigned long long i0 = 0; i0 < nblocks; i0 += k) {
    const unsigned group = static_cast<unsigned>(std::min<unsigned long long>(k, nblocks - i0));
    for (unsigned j = 0; j < group; ++j) {
      const unsigned long long i = i0 + j;
      const unsigned long long b = order.kind == BlockOrder::Reverse   ? nblocks - 1 - i
                                   : order.kind == BlockOrder::Shuffle ? perm[i]
                                                                       : i;
      const unsigned x = static_cast<unsigned>(b % grid.x), y = static_cast<unsigned>(b / grid.x % grid.y),
                     z = static_cast<unsigned>(b / (1ull * grid.x * grid.y));
      start_block(*g_blocks[j], grid, block, uint3{x, y, z});
    }
    g_interleaving = group > 1;
    if (group == 1) {
      if (step_block(*g_blocks[0], false) == Step::Failed) return failed(*g_blocks[0]);
      continue;
    }
    std::vector<bool> done(group, false);
    for (unsigned left = group; left > 0;)
      for (unsigned j = 0; j < group; ++j) {
        if (done[j]) continue;
        const Step st = step_block(*g_blocks[j], true);
        if (st == Step::Failed) return failed(*g_blocks[j]);
        if (st == Step::Done) done[j] = true, --left;
      }
  }
  g_interleaving = false;
  g_body = nullptr;
  g_blk = nullptr;
}
}  // namespace

bool enqueue(const void* stream, const char* what, std::vector<Access> footprint, std::function<void()> run) {
  std::lock_guard lock(g_mutex);
  if (g_sticky != cudaSuccess) return set_error(g_sticky), false;
  CUstream_st* s = stream_of(stream);
  if (!s) return set_error(cudaErrorInvalidResourceHandle), false;
  return enqueue_on(s, what, std::move(footprint), std::move(run));
}

BlockOrder block_order() {
  static const BlockOrder order = [] {
    BlockOrder o;
    const char* env = std::getenv("GPT_EMU_BLOCK_ORDER");
    const std::string v = env ? env : "";
    if (v == "reverse") {
      o.kind = BlockOrder::Reverse;
      return o;
    }
    if (const char* il = std::getenv("GPT_EMU_INTERLEAVE"); il && *il) {
      o.interleave = static_cast<unsigned>(std::strtoul(il, nullptr, 10));
      if (o.interleave < 1 || o.interleave > 8) {
        std::fprintf(stderr, "cuda emulator: GPT_EMU_INTERLEAVE=%s is not a number of blocks from 1 to 8\n", il);
        std::abort();
      }
    }
    if (v.empty() || v == "forward") return o;
    if (v.rfind("shuffle", 0) == 0) {
      o.kind = BlockOrder::Shuffle;
      if (v.size() > 8 && v[7] == ':') o.seed = std::strtoull(v.c_str() + 8, nullptr, 10);
      return o;
    }
    std::fprintf(stderr, "cuda emulator: GPT_EMU_BLOCK_ORDER=%s is not forward, reverse or shuffle[:SEED]\n",
                 v.c_str());
    std::abort();
  }();
  return g_order_override ? *g_order_override : order;
}

void set_block_order(const BlockOrder* order) {
  std::lock_guard lock(g_mutex);
  static BlockOrder held;
  if (order) held = *order;
  g_order_override = order ? &held : nullptr;
}

DeviceAccess::DeviceAccess(bool device_code) {
  std::lock_guard lock(g_mutex);
  if (g_open_depth++ == 0) protect_all(PROT_READ | PROT_WRITE);
  g_check_fill = g_check_fill || device_code;
}
// The 0xff bytes around every buffer: a kernel (or the emulated cuBLASLt)
// that wrote there wrote out of bounds; the launch counts as failed.
void check_fill() {
  auto dirty = [](const char* p, size_t n) {
    for (size_t i = 0; i < n; ++i)
      if (static_cast<unsigned char>(p[i]) != kFill) return true;
    return false;
  };
  for (auto& [key, a] : g_allocs) {
    const size_t before = static_cast<size_t>(a.user - a.map), after = a.data_len - before - a.bytes;
    const bool under = dirty(a.map, before), over = dirty(a.user + a.bytes, after);
    if (!under && !over) continue;
    std::fprintf(stderr, "cuda emulator: device code wrote %s a device buffer of %zu bytes (out of bounds)\n",
                 under ? "before the start of" : "past the end of", a.bytes);
    std::memset(a.map, kFill, before);
    std::memset(a.user + a.bytes, kFill, after);
    g_sticky = cudaErrorLaunchFailure;
    set_error(g_sticky);
  }
}

DeviceAccess::~DeviceAccess() {
  std::lock_guard lock(g_mutex);
  if (--g_open_depth == 0) {
    if (g_check_fill) check_fill();
    g_check_fill = false;
    protect_all(PROT_NONE);
  }
}

bool argument_ok(const void* p, int index, const char* kernel) {
  std::lock_guard lock(g_mutex);
  if (!p || find(p) || g_sticky != cudaSuccess) return true;  // a sticky error stops the launch anyway
  std::fprintf(stderr, "cuda emulator: %s: argument %d (%p) is not device memory: a GPU cannot read a host pointer\n",
               kernel, index, p);
  g_sticky = cudaErrorLaunchFailure;
  set_error(g_sticky);
  return false;
}

bool is_device(const void* p, size_t bytes) {
  std::lock_guard lock(g_mutex);
  return find(p, bytes) != nullptr;
}

bool sticky_error() { return g_sticky != cudaSuccess; }

}  // namespace cuemu

// ---- the runtime API ---------------------------------------------------------------------

using namespace cuemu;

const char* cudaGetErrorName(cudaError_t e) {
  switch (e) {
    case cudaSuccess:
      return "cudaSuccess";
    case cudaErrorInvalidValue:
      return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation:
      return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration:
      return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevicePointer:
      return "cudaErrorInvalidDevicePointer";
    case cudaErrorInvalidMemcpyDirection:
      return "cudaErrorInvalidMemcpyDirection";
    case cudaErrorNoDevice:
      return "cudaErrorNoDevice";
    case cudaErrorInvalidDevice:
      return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle:
      return "cudaErrorInvalidResourceHandle";
    case cudaErrorNotReady:
      return "cudaErrorNotReady";
    case cudaErrorLaunchFailure:
      return "cudaErrorLaunchFailure";
  }
  return "cudaErrorUnknown";
}

const char* cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess:
      return "no error";
    case cudaErrorInvalidValue:
      return "invalid argument";
    case cudaErrorMemoryAllocation:
      return "out of memory";
    case cudaErrorInvalidConfiguration:
      return "invalid configuration argument";
    case cudaErrorInvalidDevicePointer:
      return "invalid device pointer";
    case cudaErrorInvalidMemcpyDirection:
      return "invalid copy direction for memcpy";
    case cudaErrorNoDevice:
      return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice:
      return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle:
      return "invalid resource handle";
    case cudaErrorNotReady:
      return "device not ready";
    case cudaErrorLaunchFailure:
      return "unspecified launch failure (the emulator printed why)";
  }
  return "unknown error";
}

cudaError_t cudaGetLastError() {
  std::lock_guard lock(g_mutex);
  const cudaError_t e = g_last;
  g_last = g_sticky;
  return e;
}

cudaError_t cudaPeekAtLastError() { return g_last; }

cudaError_t cudaGetDeviceCount(int* count) {
  if (!count) return set_error(cudaErrorInvalidValue);
  *count = 1;
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int* device) {
  if (!device) return set_error(cudaErrorInvalidValue);
  *device = 0;
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) { return device == 0 ? cudaSuccess : set_error(cudaErrorInvalidDevice); }

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (!prop) return set_error(cudaErrorInvalidValue);
  if (device != 0) return set_error(cudaErrorInvalidDevice);
  *prop = cudaDeviceProp{};
  std::snprintf(prop->name, sizeof prop->name, "CUDA emulator (CPU)");
  prop->totalGlobalMem = kDeviceBytes;
  prop->multiProcessorCount = 1;
  prop->major = 9;
  prop->minor = 0;
  prop->warpSize = 32;
  prop->maxThreadsPerBlock = static_cast<int>(kMaxThreads);
  prop->sharedMemPerBlock = 48 << 10;
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize() {
  std::lock_guard lock(g_mutex);
  run_all();
  return g_sticky;
}

cudaError_t cudaMemGetInfo(size_t* free, size_t* total) {
  std::lock_guard lock(g_mutex);
  if (!free || !total) return set_error(cudaErrorInvalidValue);
  *total = kDeviceBytes;
  *free = kDeviceBytes - g_in_use;
  return g_sticky;
}

cudaError_t cudaMalloc(void** ptr, size_t bytes) {
  std::lock_guard lock(g_mutex);
  return device_malloc(ptr, bytes);
}
cudaError_t cudaMallocAsync(void** ptr, size_t bytes, cudaStream_t) { return cudaMalloc(ptr, bytes); }
// cudaFree synchronises the device, as CUDA's does.
cudaError_t cudaFree(void* ptr) {
  std::lock_guard lock(g_mutex);
  if (!ptr) return cudaSuccess;
  run_all();
  return device_free(ptr);
}
// Freed when the stream gets there; work on other streams that may still
// use the buffer is a race (enqueue_on), and so is later use of it.
cudaError_t cudaFreeAsync(void* ptr, cudaStream_t stream) {
  std::lock_guard lock(g_mutex);
  if (!ptr) return cudaSuccess;
  auto it = g_allocs.find(reinterpret_cast<uintptr_t>(ptr));
  if (it == g_allocs.end() || it->second.freeing) return set_error(cudaErrorInvalidDevicePointer);
  CUstream_st* s = stream_of(stream);
  if (!s) return set_error(cudaErrorInvalidResourceHandle);
  if (!enqueue_on(s, "cudaFreeAsync", {{ptr, it->second.bytes, true}}, [ptr] { device_free(ptr); }))
    return g_sticky;
  it->second.freeing = true;
  return g_sticky;
}

cudaError_t cudaMallocHost(void** ptr, size_t bytes) {
  std::lock_guard lock(g_mutex);
  if (!ptr) return set_error(cudaErrorInvalidValue);
  *ptr = std::aligned_alloc(256, round_up(std::max<size_t>(bytes, 1), 256));
  if (!*ptr) return set_error(cudaErrorMemoryAllocation);
  g_pinned[reinterpret_cast<uintptr_t>(*ptr)] = bytes;
  return cudaSuccess;
}
// Synchronises the device first (queued copies may still use the buffer).
cudaError_t cudaFreeHost(void* ptr) {
  std::lock_guard lock(g_mutex);
  if (!ptr) return cudaSuccess;
  auto it = g_pinned.find(reinterpret_cast<uintptr_t>(ptr));
  if (it == g_pinned.end()) return set_error(cudaErrorInvalidValue);
  run_all();
  g_pinned.erase(it);
  std::free(ptr);
  return cudaSuccess;
}

namespace {
// Queues a memset of device memory on s.
cudaError_t queue_memset(CUstream_st* s, void* ptr, int value, size_t bytes) {
  if (g_sticky != cudaSuccess) return set_error(g_sticky);
  if (!s) return set_error(cudaErrorInvalidResourceHandle);
  if (bytes == 0) return cudaSuccess;
  if (!find(ptr, bytes)) return set_error(cudaErrorInvalidValue);
  enqueue_on(s, "cudaMemset", {{ptr, bytes, true}}, [=] {
    DeviceAccess open;
    std::memset(ptr, value, bytes);
  });
  return g_sticky;
}

// Queues a copy on s; `sync`: returns when it has run (cudaMemcpy).
// Pageable host memory (not cudaMallocHost's) makes an asynchronous copy
// behave as CUDA documents: from the host, the source is staged at the call
// (after the stream's earlier work); to the host, the call returns once the
// copy is done. A pinned destination holds 0xff bytes until the copy runs.
cudaError_t queue_copy(CUstream_st* s, void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, bool sync) {
  if (g_sticky != cudaSuccess) return set_error(g_sticky);
  if (!s) return set_error(cudaErrorInvalidResourceHandle);
  if (bytes == 0) return cudaSuccess;
  const bool dst_dev = find(dst, bytes) != nullptr, src_dev = find(src, bytes) != nullptr;
  bool ok = false;
  switch (kind) {
    case cudaMemcpyHostToHost:
      ok = !dst_dev && !src_dev;
      break;
    case cudaMemcpyHostToDevice:
      ok = dst_dev && !src_dev;
      break;
    case cudaMemcpyDeviceToHost:
      ok = !dst_dev && src_dev;
      break;
    case cudaMemcpyDeviceToDevice:
      ok = dst_dev && src_dev;
      break;
    case cudaMemcpyDefault:
      ok = true;
      break;
  }
  if (!ok) return set_error(cudaErrorInvalidValue);
  std::vector<Access> footprint;
  if (dst_dev) footprint.push_back({dst, bytes, true});
  if (src_dev) footprint.push_back({src, bytes, false});
  const char* what = sync ? "cudaMemcpy" : "cudaMemcpyAsync";
  std::function<void()> run = [=] {
    DeviceAccess open;
    std::memmove(dst, src, bytes);
  };
  if (!sync && !src_dev && !pinned(src, bytes)) {
    run_until(s, s->enqueued);
    auto staged = std::make_shared<std::vector<char>>(static_cast<const char*>(src),
                                                      static_cast<const char*>(src) + bytes);
    run = [=] {
      DeviceAccess open;
      std::memcpy(dst, staged->data(), bytes);
    };
  }
  const bool host_dst = !dst_dev;
  if (!sync && host_dst && pinned(dst, bytes)) std::memset(dst, 0xff, bytes);
  if (!enqueue_on(s, what, std::move(footprint), std::move(run))) return g_sticky;
  if (sync || (host_dst && !pinned(dst, bytes))) run_until(s, s->enqueued);
  return g_sticky != cudaSuccess ? set_error(g_sticky) : cudaSuccess;
}
}  // namespace

cudaError_t cudaMemset(void* ptr, int value, size_t bytes) {
  std::lock_guard lock(g_mutex);
  return queue_memset(&g_legacy, ptr, value, bytes);
}
cudaError_t cudaMemsetAsync(void* ptr, int value, size_t bytes, cudaStream_t stream) {
  std::lock_guard lock(g_mutex);
  return queue_memset(stream_of(stream), ptr, value, bytes);
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  std::lock_guard lock(g_mutex);
  return queue_copy(&g_legacy, dst, src, bytes, kind, true);
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t stream) {
  std::lock_guard lock(g_mutex);
  return queue_copy(stream_of(stream), dst, src, bytes, kind, false);
}

cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* attr, const void* ptr) {
  std::lock_guard lock(g_mutex);
  if (!attr) return set_error(cudaErrorInvalidValue);
  *attr = cudaPointerAttributes{};
  attr->device = -2;
  if (find(ptr)) {
    attr->type = cudaMemoryTypeDevice;
    attr->device = 0;
    attr->devicePointer = const_cast<void*>(ptr);
  } else if (pinned(ptr, 1)) {
    attr->type = cudaMemoryTypeHost;
    attr->device = 0;
  }
  return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t* stream) { return cudaStreamCreateWithFlags(stream, cudaStreamDefault); }
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned flags) {
  std::lock_guard lock(g_mutex);
  if (!stream) return set_error(cudaErrorInvalidValue);
  *stream = new CUstream_st{flags, static_cast<int>(g_streams.size())};
  g_streams.push_back(*stream);
  return cudaSuccess;
}
// Its queued work still runs (CUDA releases a stream when its work is done).
cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  std::lock_guard lock(g_mutex);
  if (!stream || stream == cudaStreamLegacy || stream == cudaStreamPerThread || stream->destroyed)
    return set_error(cudaErrorInvalidResourceHandle);
  stream->destroyed = true;
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  std::lock_guard lock(g_mutex);
  CUstream_st* s = stream_of(stream);
  if (!s) return set_error(cudaErrorInvalidResourceHandle);
  run_until(s, s->enqueued);
  return g_sticky;
}
// With work queued: cudaErrorNotReady the first time, so that a caller's
// polling loop turns; the next query runs it.
cudaError_t cudaStreamQuery(cudaStream_t stream) {
  std::lock_guard lock(g_mutex);
  CUstream_st* s = stream_of(stream);
  if (!s) return set_error(cudaErrorInvalidResourceHandle);
  if (g_sticky == cudaSuccess && s->done < s->enqueued && !s->told_not_ready) {
    s->told_not_ready = true;
    return cudaErrorNotReady;
  }
  run_until(s, s->enqueued);
  return g_sticky;
}
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned) {
  std::lock_guard lock(g_mutex);
  CUstream_st* s = stream_of(stream);
  if (!event || !s) return set_error(cudaErrorInvalidResourceHandle);
  if (event->recorded) merge(s->clock, event->clock);
  return g_sticky;
}

cudaError_t cudaEventCreate(cudaEvent_t* event) { return cudaEventCreateWithFlags(event, cudaEventDefault); }
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned flags) {
  std::lock_guard lock(g_mutex);
  if (!event) return set_error(cudaErrorInvalidValue);
  *event = new CUevent_st{{}, false, flags};
  g_events.push_back(*event);
  return cudaSuccess;
}
// Kept (a queued record may still write to it), but no longer usable.
cudaError_t cudaEventDestroy(cudaEvent_t event) {
  std::lock_guard lock(g_mutex);
  if (!event || event->flags == ~0u) return set_error(cudaErrorInvalidResourceHandle);
  event->flags = ~0u;
  return cudaSuccess;
}
// The event marks the stream's work queued so far; it takes its time when
// the stream gets there.
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  std::lock_guard lock(g_mutex);
  CUstream_st* s = stream_of(stream);
  if (!event || event->flags == ~0u || !s) return set_error(cudaErrorInvalidResourceHandle);
  if (g_sticky != cudaSuccess) return g_sticky;
  event->recorded = true;
  event->ran = false;
  if (!enqueue_on(s, "cudaEventRecord", {}, [event] {
        event->t = std::chrono::steady_clock::now();
        event->ran = true;
      }))
    return g_sticky;
  event->clock = s->clock;
  event->clock[s] = s->enqueued;
  return g_sticky;
}
cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  std::lock_guard lock(g_mutex);
  if (!event || event->flags == ~0u) return set_error(cudaErrorInvalidResourceHandle);
  if (event->recorded) run_clock(event->clock);
  return g_sticky;
}
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  std::lock_guard lock(g_mutex);
  if (!ms || !start || !end) return set_error(cudaErrorInvalidValue);
  if (start->flags == ~0u || end->flags == ~0u) return set_error(cudaErrorInvalidResourceHandle);
  if ((start->flags | end->flags) & cudaEventDisableTiming) return set_error(cudaErrorInvalidResourceHandle);
  if (!start->recorded || !end->recorded) return set_error(cudaErrorInvalidResourceHandle);
  if (!start->ran || !end->ran) return set_error(cudaErrorNotReady);
  *ms = std::chrono::duration<float, std::milli>(end->t - start->t).count();
  return cudaSuccess;
}
