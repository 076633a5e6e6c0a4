// The activation arena: every buffer a model needs for one training step is requested at
// setup, then allocated as one aligned block. Steps reuse the same addresses, so nothing is
// allocated on the hot path (and CUDA graphs can capture stable pointers).
//
// With reuse on, the arena is also a memory planner, as frameworks' planners are: each
// buffer's lifetime is known at setup (written at one moment of the step, last read at
// another), and buffers whose lifetimes do not overlap share memory. Moments are ticks:
// layers take forward ticks in the order they run, and backward visits the same layers in
// the reverse order, so each forward tick has a mirrored backward tick.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "tensor.hpp"

namespace dlbench::worker {

class Backend;

// A moment of one training step: the forward work of tick `index`, or its backward work.
struct Tick {
  std::int32_t index = 0;
  bool backward = false;

  Tick mirrored() const { return {index, !backward}; }
  bool operator==(const Tick&) const = default;
};

enum class MemoryReuse {
  none,      // every buffer has its own memory (layers tested alone, debugging)
  lifetime,  // buffers whose lifetimes do not overlap share memory
  // Every buffer has its own memory, and is filled with NaN (all bits set) as soon as the step
  // passes its declared last use: an op that reads past what it declared to the plan then reads
  // NaN, on any backend, instead of whatever happened to share its memory.
  poison,
};

class Arena {
 public:
  static constexpr std::size_t kAlignment = 64;  // a cache line and an AVX-512 vector

  // Takes the next forward tick.
  Tick next_tick();
  // The latest forward tick taken, if any.
  std::optional<Tick> last_tick() const;

  // Plans room for `tensor` (its shape must be set) and gives it a buffer id; its data
  // pointer is filled in by commit(). The Tensor must stay at the same address until then.
  // Without `written` the buffer lives for the whole step (inputs, running statistics).
  void request(Tensor& tensor);
  void request(Tensor& tensor, Tick written);
  // `tensor`'s buffer (or the buffer a view of it shares) is read at `when`. Tensors that
  // are not the arena's (buffer id -1) are ignored.
  void read(const Tensor& tensor, Tick when);
  // `tensor`'s buffer is read by someone outside the plan until the step ends.
  void keep_until_step_end(const Tensor& tensor);

  // Places every buffer, allocates one block on `backend` and points each tensor into it.
  void commit(Backend& backend, MemoryReuse reuse = MemoryReuse::none);

  // Under MemoryReuse::poison (otherwise nothing): the step is about to do the work of `next`,
  // so every buffer whose declared lifetime ended before it is filled with NaN. Called in step
  // order, after begin_step().
  void entering(Tick next, Backend& backend);
  // A step begins: entering() poisons each dying buffer again as the step passes it.
  void begin_step() { poisoned_this_step_ = 0; }
  // How many buffers entering() has poisoned since commit (a test's proof that it ran).
  std::size_t poisoned_count() const { return poisoned_total_; }

  // Bytes of the block (after commit; before it, what no reuse would take).
  std::size_t planned_bytes() const { return committed_ ? block_bytes_ : unshared_bytes(); }
  // Bytes every buffer would take with memory of its own.
  std::size_t unshared_bytes() const;
  // The most bytes live at one moment: no placement can use less.
  std::size_t peak_live_bytes() const;
  std::size_t request_count() const { return requests_.size(); }

  // One buffer's placement (for tests): [first, last] moments on the step's timeline.
  struct Placement {
    std::size_t offset = 0;
    std::size_t bytes = 0;
    std::int64_t first = 0;
    std::int64_t last = 0;
  };
  std::vector<Placement> placements() const;
  // The buffer whose memory holds `address`, or -1 (after commit; unambiguous only without reuse).
  std::int32_t buffer_at(const void* address) const;

 private:
  struct Buffer {
    std::size_t bytes = 0;
    std::optional<Tick> written;  // none: the whole step
    std::vector<Tick> reads;
    bool until_end = false;
    std::size_t offset = 0;
  };
  // A tick's position on the step's timeline: forward ticks count up, then backward ticks
  // count back down.
  std::int64_t position(Tick t) const;
  std::int64_t first_use(const Buffer& b) const;
  std::int64_t last_use(const Buffer& b) const;

  std::vector<Buffer> buffers_;
  std::vector<Tensor*> requests_;  // each with tensor->buffer naming its Buffer
  std::int32_t ticks_ = 0;
  bool committed_ = false;
  // Poison mode: buffers that die within the step, by their last use (empty in other modes), and
  // how many of them this step has poisoned so far.
  std::vector<std::size_t> dying_;
  std::size_t poisoned_this_step_ = 0;
  std::size_t poisoned_total_ = 0;
  std::size_t block_bytes_ = 0;
  std::shared_ptr<void> block_;
};

}  // namespace dlbench::worker
