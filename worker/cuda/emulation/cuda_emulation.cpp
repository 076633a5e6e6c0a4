// The CPU side of cuda_emulation.hpp: a block's threads as fibers of the launching host thread,
// switched at barriers, and the few runtime calls the kernel files make.
#include "cuda/emulation/cuda_emulation.hpp"

#include <xmmintrin.h>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif
#if defined(DLBENCH_EMULATION_RACECHECK)
#include <sanitizer/tsan_interface.h>
#endif

#include <algorithm>
#include <cstdint>
#include <exception>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

// Saves the callee-saved registers, the SSE and x87 control words and the stack pointer (into
// *save), then resumes the stack `load` saved the same way. ucontext's swapcontext did this with a
// system call each switch (the signal mask), and a block's reduction switches millions of times.
// x86-64 System V only, as dlbench is.
extern "C" void dlbench_emulation_switch(void** save, void* load);
asm(R"(
  .text
  .globl dlbench_emulation_switch
  .type dlbench_emulation_switch, @function
dlbench_emulation_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size dlbench_emulation_switch, .-dlbench_emulation_switch
  .section .note.GNU-stack, "", @progbits
  .text
)");

namespace dlbench::cuda_emulation {
namespace {

constexpr int kWarpSize = 32;
// Each fiber's stack, allocated and never touched ahead: the kernels keep a few packs and small
// arrays in locals.
constexpr std::size_t kStackBytes = 128 * 1024;
constexpr int kMaxThreadsPerBlock = 1024;

enum class FiberState { runnable, at_block_barrier, at_warp_barrier, finished };

// The race check (DLBENCH_EMULATION_RACECHECK: this file built without ThreadSanitizer, the kernel
// files and tests with it). Each emulated thread is a ThreadSanitizer fiber, switched to without
// synchronising, so that the only happens-before edges between a block's threads are the ones a
// GPU gives: __syncthreads and __syncwarp (a shuffle gives none), and a launch's start and end. A
// block's accesses happen before the next block's (they run one after another here, and the
// static __shared__ variables are each block's own shared memory on a GPU), so what it reports is
// a race inside a block: shared or global memory that two of its threads touch, one writing, with
// no barrier between them, whatever order the threads take here.
#if defined(DLBENCH_EMULATION_RACECHECK)
void* new_race_fiber() { return __tsan_create_fiber(0); }
void drop_race_fiber(void* fiber) { __tsan_destroy_fiber(fiber); }
void* current_race_fiber() { return __tsan_get_current_fiber(); }
void enter_race_fiber(void* fiber) { __tsan_switch_to_fiber(fiber, __tsan_switch_to_fiber_no_sync); }
void release_to(void* token) { __tsan_release(token); }
void acquire_from(void* token) { __tsan_acquire(token); }
#else
void* new_race_fiber() { return nullptr; }
void drop_race_fiber(void*) {}
void* current_race_fiber() { return nullptr; }
void enter_race_fiber(void*) {}
void release_to(void*) {}
void acquire_from(void*) {}
#endif

// Two barrier generations' happens-before tokens (a thread past one barrier may reach the next
// before the last of its block has left the first; it cannot reach a third).
struct BarrierTokens {
  char token[2]{};
  int generation = 0;
  void* current() { return &token[generation % 2]; }
};

struct Fiber {
  void* stack_pointer = nullptr;  // where dlbench_emulation_switch left it
  char* stack = nullptr;
  void* race_fiber = nullptr;
  ThreadPlace place;
  int lane = 0;
  int warp = 0;
  FiberState state = FiberState::runnable;
};

struct Warp {
  int lanes = 0;  // the warp's threads; the last warp of a block may have fewer than 32
  int live = 0;
  int arrived = 0;
  BarrierTokens barrier;
  // The shuffle's offers: up to 16 bytes a lane.
  unsigned char offers[kWarpSize][16]{};
};

// One block's run: its fibers and the barriers' counts. The fibers of a block run on the thread
// that launched it, one at a time; a fiber gives the thread back only at a barrier or at its end.
struct BlockRun {
  std::vector<Fiber> fibers;
  std::vector<Warp> warps;
  void* scheduler_stack_pointer = nullptr;
  void* scheduler_race_fiber = nullptr;
  BarrierTokens block_barrier;
  // The race check's edges: from the scheduler to a block's threads as they start, and from each
  // thread to the scheduler whenever it gives the thread back (the scheduler then sees all a block
  // did, and the next block starts after it), never from one of a block's threads to another.
  char block_start = 0, to_scheduler = 0;
  const void* scheduler_stack_bottom = nullptr;  // the launching thread's stack, for AddressSanitizer
  std::size_t scheduler_stack_bytes = 0;
  int live = 0;
  int at_block_barrier = 0;
  Fiber* current = nullptr;
  const std::function<void()>* body = nullptr;
  std::exception_ptr error;
  struct AlignedDelete {
    void operator()(unsigned char* p) const { ::operator delete[](p, std::align_val_t{128}); }
  };
  std::unique_ptr<unsigned char[], AlignedDelete> dynamic_shared;
  std::size_t dynamic_shared_bytes = 0;
};

thread_local BlockRun* running_block = nullptr;
thread_local ThreadPlace host_place;  // what a kernel's code sees when called outside a launch
std::atomic<ThreadOrder> order{ThreadOrder::ascending};
std::atomic<long long> grids{0};

BlockRun& block_run() {
  if (running_block == nullptr || running_block->current == nullptr) {
    throw std::logic_error("cuda emulation: a barrier or shuffle outside a kernel launch");
  }
  return *running_block;
}

// Every switch between stacks goes through here. Under AddressSanitizer (the debug preset) it is
// told of each switch, so that it checks the fibers' stacks as stacks and reads nothing into them.
void switch_stack(void** save, void* load, const void* load_bottom, std::size_t load_bytes, bool leaving_for_good,
                  void* load_race_fiber) {
  enter_race_fiber(load_race_fiber);
#if defined(__SANITIZE_ADDRESS__)
  void* fake_stack = nullptr;
  __sanitizer_start_switch_fiber(leaving_for_good ? nullptr : &fake_stack, load_bottom, load_bytes);
  dlbench_emulation_switch(save, load);
  __sanitizer_finish_switch_fiber(fake_stack, nullptr, nullptr);
#else
  (void)load_bottom;
  (void)load_bytes;
  (void)leaving_for_good;
  dlbench_emulation_switch(save, load);
#endif
}

void switch_to_scheduler(BlockRun& run, Fiber& self, bool leaving_for_good) {
  release_to(&run.to_scheduler);
  switch_stack(&self.stack_pointer, run.scheduler_stack_pointer, run.scheduler_stack_bottom,
               run.scheduler_stack_bytes, leaving_for_good, run.scheduler_race_fiber);
}

void release_block_barrier_if_complete(BlockRun& run) {
  if (run.at_block_barrier == 0 || run.at_block_barrier < run.live) return;
  for (Fiber& f : run.fibers) {
    if (f.state == FiberState::at_block_barrier) f.state = FiberState::runnable;
  }
  run.at_block_barrier = 0;
  ++run.block_barrier.generation;
}

void release_warp_barrier_if_complete(BlockRun& run, int warp) {
  Warp& w = run.warps[static_cast<std::size_t>(warp)];
  if (w.arrived == 0 || w.arrived < w.live) return;
  const auto first = static_cast<std::size_t>(warp * kWarpSize);
  for (std::size_t t = first; t < first + static_cast<std::size_t>(w.lanes); ++t) {
    if (run.fibers[t].state == FiberState::at_warp_barrier) run.fibers[t].state = FiberState::runnable;
  }
  w.arrived = 0;
  ++w.barrier.generation;
}

// Gives the thread back to the scheduler until this fiber is runnable again.
void wait_here(BlockRun& run) {
  Fiber& self = *run.current;
  if (self.state == FiberState::runnable) return;  // the barrier completed on this fiber's arrival
  switch_to_scheduler(run, self, false);
}

// Where a fiber starts: its thread's body, then back to the scheduler for good.
[[noreturn]] void fiber_entry() {
  BlockRun* run = running_block;
#if defined(__SANITIZE_ADDRESS__)
  __sanitizer_finish_switch_fiber(nullptr, &run->scheduler_stack_bottom, &run->scheduler_stack_bytes);
#endif
  acquire_from(&run->block_start);
  try {
    (*run->body)();
  } catch (...) {
    if (!run->error) run->error = std::current_exception();
  }
  // CUDA's exited threads no longer hold back their block's barriers or their warp's (what they
  // wrote counts as before the barriers they miss).
  Fiber& self = *run->current;
  release_to(run->block_barrier.current());
  release_to(run->warps[static_cast<std::size_t>(self.warp)].barrier.current());
  self.state = FiberState::finished;
  --run->live;
  --run->warps[static_cast<std::size_t>(self.warp)].live;
  release_block_barrier_if_complete(*run);
  release_warp_barrier_if_complete(*run, self.warp);
  switch_to_scheduler(*run, self, true);
  std::abort();  // a finished fiber is never resumed
}

// A fresh stack laid out as dlbench_emulation_switch leaves one: control words, six registers,
// and fiber_entry as the return address, entered with the stack as a call leaves it.
void start_fiber_at_entry(Fiber& f) {
#if defined(__SANITIZE_ADDRESS__)
  // A stack used before still holds the redzones of frames that never returned (a fiber ends by
  // switching away): clear them.
  ASAN_UNPOISON_MEMORY_REGION(f.stack, kStackBytes);
#endif
  auto top = reinterpret_cast<std::uintptr_t>(f.stack + kStackBytes) & ~std::uintptr_t{15};
  auto* slot = reinterpret_cast<std::uint64_t*>(top);
  *--slot = 0;                                                 // fiber_entry's own return address: none
  *--slot = reinterpret_cast<std::uint64_t>(&fiber_entry);     // where the switch's ret goes
  for (int r = 0; r < 6; ++r) *--slot = 0;                     // rbp, rbx, r12 to r15
  std::uint32_t control[2] = {_mm_getcsr(), 0x037f};           // MXCSR as now, x87 as at start
  *--slot = 0;
  std::memcpy(slot, control, sizeof control);
  f.stack_pointer = slot;
}

std::string place_text(const ThreadPlace& p) {
  return "block (" + std::to_string(p.block.x) + "," + std::to_string(p.block.y) + "," + std::to_string(p.block.z) +
         ") thread (" + std::to_string(p.thread.x) + "," + std::to_string(p.thread.y) + "," +
         std::to_string(p.thread.z) + ")";
}

// What a block whose live threads all wait, and can never all be released, says: how many wait at
// each kind of barrier, and the first of each.
std::string stuck_threads(const BlockRun& run) {
  int at_block = 0, at_warp = 0;
  std::string first_at_block, first_at_warp;
  for (const Fiber& f : run.fibers) {
    if (f.state == FiberState::at_block_barrier && at_block++ == 0) first_at_block = place_text(f.place);
    if (f.state == FiberState::at_warp_barrier && at_warp++ == 0) first_at_warp = place_text(f.place);
  }
  std::string text =
      std::to_string(run.live) + " threads wait at barriers the rest of their block or warp never reach:";
  if (at_block > 0) text += " " + std::to_string(at_block) + " at __syncthreads (the first " + first_at_block + ")";
  if (at_block > 0 && at_warp > 0) text += ",";
  if (at_warp > 0) text += " " + std::to_string(at_warp) + " at a warp barrier (the first " + first_at_warp + ")";
  return text;
}

void run_block(BlockRun& run, const uint3& block_index, dim3 grid, dim3 block) {
  const int threads = static_cast<int>(run.fibers.size());
  std::memset(run.dynamic_shared.get(), 0xff, run.dynamic_shared_bytes);
  run.live = threads;
  run.at_block_barrier = 0;
  for (std::size_t w = 0; w < run.warps.size(); ++w) {
    run.warps[w].lanes = std::min(kWarpSize, threads - static_cast<int>(w) * kWarpSize);
    run.warps[w].live = run.warps[w].lanes;
    run.warps[w].arrived = 0;
  }
  for (int t = 0; t < threads; ++t) {
    Fiber& f = run.fibers[static_cast<std::size_t>(t)];
    const auto linear = static_cast<unsigned>(t);
    f.place.thread = uint3{linear % block.x, (linear / block.x) % block.y, linear / (block.x * block.y)};
    f.place.block = block_index;
    f.place.block_dim = block;
    f.place.grid_dim = grid;
    f.lane = t % kWarpSize;
    f.warp = t / kWarpSize;
    f.state = FiberState::runnable;
    start_fiber_at_entry(f);
  }
  release_to(&run.block_start);
  const bool descending = order.load() == ThreadOrder::descending;
  while (run.live > 0) {
    bool ran = false;
    for (int i = 0; i < threads && !run.error; ++i) {
      Fiber& f = run.fibers[static_cast<std::size_t>(descending ? threads - 1 - i : i)];
      if (f.state != FiberState::runnable) continue;
      run.current = &f;
      ran = true;
      switch_stack(&run.scheduler_stack_pointer, f.stack_pointer, f.stack, kStackBytes, false, f.race_fiber);
      acquire_from(&run.to_scheduler);
      run.current = nullptr;
    }
    // A thread's exception ends the grid, as a device fault ends the kernel; the other fibers'
    // stacks are dropped without unwinding them (kernel locals own nothing).
    if (run.error) std::rethrow_exception(run.error);
    if (!ran) throw std::logic_error("cuda emulation: " + stuck_threads(run));
  }
}

}  // namespace

namespace {

// Where the running fiber stands, or host_place outside a launch.
const ThreadPlace& place() {
  if (running_block == nullptr || running_block->current == nullptr) return host_place;
  return running_block->current->place;
}

}  // namespace

int lane() {
  if (running_block == nullptr || running_block->current == nullptr) return 0;
  return running_block->current->lane;
}
uint3 thread_index() { return place().thread; }
uint3 block_index() { return place().block; }
dim3 block_dim() { return place().block_dim; }
dim3 grid_dim() { return place().grid_dim; }

void set_thread_order(ThreadOrder o) { order.store(o); }
ThreadOrder thread_order() { return order.load(); }

void sync_block() {
  BlockRun& run = block_run();
  void* token = run.block_barrier.current();
  release_to(token);
  run.current->state = FiberState::at_block_barrier;
  ++run.at_block_barrier;
  release_block_barrier_if_complete(run);
  wait_here(run);
  acquire_from(token);
}

namespace {

// A shuffle's bytes, copied where the race check does not look (memcpy is intercepted even from
// this file): the offers are the emulation's registers, ordered by its own warp barrier.
void copy_bytes(void* into, const void* from, std::size_t bytes) {
  auto* out = static_cast<volatile unsigned char*>(into);
  const auto* in = static_cast<const volatile unsigned char*>(from);
  for (std::size_t i = 0; i < bytes; ++i) out[i] = in[i];
}

// A warp's lanes wait for each other; `orders_memory`: as __syncwarp does (a shuffle does not).
void warp_barrier(bool orders_memory) {
  BlockRun& run = block_run();
  Fiber& self = *run.current;
  Warp& warp = run.warps[static_cast<std::size_t>(self.warp)];
  void* token = warp.barrier.current();
  if (orders_memory) release_to(token);
  self.state = FiberState::at_warp_barrier;
  ++warp.arrived;
  release_warp_barrier_if_complete(run, self.warp);
  wait_here(run);
  if (orders_memory) acquire_from(token);
}

}  // namespace

void sync_warp() { warp_barrier(true); }

void exchange_in_warp(const void* value, void* result, std::size_t bytes, const std::function<int(int)>& source_lane) {
  if (bytes > 16) throw std::logic_error("cuda emulation: a shuffle of more than 16 bytes");
  BlockRun& run = block_run();
  const Fiber& self = *run.current;
  Warp& warp = run.warps[static_cast<std::size_t>(self.warp)];
  copy_bytes(warp.offers[self.lane], value, bytes);
  warp_barrier(false);  // every lane has offered
  const int source = source_lane(self.lane);
  if (source < 0 || source >= warp.lanes) {
    // A lane the warp does not have: CUDA leaves the result undefined.
    throw std::logic_error("cuda emulation: a shuffle from lane " + std::to_string(source) + " of a warp of " +
                           std::to_string(warp.lanes) + " lanes, in " + place_text(self.place));
  }
  copy_bytes(result, warp.offers[source], bytes);
  warp_barrier(false);  // every lane has taken its value before the next shuffle overwrites the offers
}

void run_grid(dim3 grid, dim3 block, std::size_t dynamic_shared_bytes, const std::function<void()>& body) {
  const long long threads = static_cast<long long>(block.x) * block.y * block.z;
  if (threads <= 0 || threads > kMaxThreadsPerBlock) {
    throw std::invalid_argument("cuda emulation: a block of " + std::to_string(threads) + " threads (1 to " +
                                std::to_string(kMaxThreadsPerBlock) + ")");
  }
  if (grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.y > 65535 || grid.z > 65535) {
    throw std::invalid_argument("cuda emulation: a grid of (" + std::to_string(grid.x) + "," + std::to_string(grid.y) +
                                "," + std::to_string(grid.z) + ") blocks");
  }
  if (running_block != nullptr) throw std::logic_error("cuda emulation: a launch from inside a kernel");
  BlockRun run;
  run.body = &body;
  run.dynamic_shared_bytes = dynamic_shared_bytes;
  run.dynamic_shared.reset(new (std::align_val_t{128}) unsigned char[std::max<std::size_t>(dynamic_shared_bytes, 1)]);
  run.fibers.resize(static_cast<std::size_t>(threads));
  // The stacks stay for the thread's next launch: mapping fresh ones costs a page fault a page.
  thread_local std::vector<std::unique_ptr<char[]>> stacks;
  while (stacks.size() < run.fibers.size()) stacks.emplace_back(new char[kStackBytes]);  // no page touched
  for (std::size_t t = 0; t < run.fibers.size(); ++t) run.fibers[t].stack = stacks[t].get();
  run.warps.resize(static_cast<std::size_t>((threads + kWarpSize - 1) / kWarpSize));
  // The race check's fibers stay too (making one costs more than a small launch): a block's start
  // and end order whatever one did in a launch before, as for a reused stack.
  struct RaceFibers {
    std::vector<void*> fibers;
    ~RaceFibers() {
      for (void* f : fibers) drop_race_fiber(f);
    }
  };
  thread_local RaceFibers race_fibers;
  while (race_fibers.fibers.size() < run.fibers.size()) race_fibers.fibers.push_back(new_race_fiber());
  for (std::size_t t = 0; t < run.fibers.size(); ++t) run.fibers[t].race_fiber = race_fibers.fibers[t];
  run.scheduler_race_fiber = current_race_fiber();
  running_block = &run;
  try {
    // Blocks in the thread order too: two blocks that write one place leave the other's value
    // depending on which ran last, as on a GPU that runs them at once.
    const bool descending = order.load() == ThreadOrder::descending;
    const long long blocks = static_cast<long long>(grid.x) * grid.y * grid.z;
    for (long long i = 0; i < blocks; ++i) {
      const auto b = static_cast<unsigned long long>(descending ? blocks - 1 - i : i);
      const auto x = static_cast<unsigned>(b % grid.x), y = static_cast<unsigned>(b / grid.x % grid.y),
                 z = static_cast<unsigned>(b / (static_cast<unsigned long long>(grid.x) * grid.y));
      run_block(run, uint3{x, y, z}, grid, block);
    }
  } catch (...) {
    running_block = nullptr;
    throw;
  }
  running_block = nullptr;
  ++grids;
}

long long grids_run() { return grids.load(); }

unsigned char* dynamic_shared() { return block_run().dynamic_shared.get(); }

}  // namespace dlbench::cuda_emulation

// The runtime calls the kernel files make, on host memory. The launches themselves report by
// exception, so no launch error is left to get.
extern "C" {
const char* cudaGetErrorString(cudaError_t error) {
  return error == cudaSuccess ? "no error" : "error (cuda emulation)";
}
cudaError_t cudaMemsetAsync(void* destination, int value, std::size_t bytes, cudaStream_t) {
  std::memset(destination, value, bytes);
  return cudaSuccess;
}
}
