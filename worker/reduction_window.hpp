// The host reductions a rank keeps in flight at once (MpiCommunicator), bounded. Open MPI's
// nonblocking allreduce (libnbc) allocates a temporary buffer as large as each reduction it is
// given and frees it when that one ends. Sixteen 25 MiB buckets started at once (BERT-base's) were
// 400 MiB of new pages on every rank at every step, which glibc gave back to the kernel and the
// kernel had to fault in and zero again: two CPU ranks reduced at 0.3 GB/s where the same library
// reduces at 3 GB/s with two pieces in flight (bench/RESULTS.md, 2026-12-06). So each reduction is
// cut into pieces of at most `piece_elements`, at most `in_flight` pieces run at once, and the rest
// wait and start in the order they were added as earlier ones end: every rank starts the same
// pieces in the same order, which MPI asks of collectives, whatever each rank's timing.
// A reduction added with a scale (the mean's 1 / ranks) has each piece scaled, vectorised, as soon
// as it ends, instead of in a pass over the whole gradient after the last one: no piece's scaling
// waits for the others (on one host the cost is about the same either way; bench/RESULTS.md).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <stdexcept>
#include <string>
#include <utility>

namespace dlbench::worker {

template <typename Request>
class ReductionWindow {
 public:
  using Start = std::function<Request(float* data, std::int64_t count)>;  // starts one piece
  using Test = std::function<bool(Request&)>;                             // true once it has ended
  using Wait = std::function<void(Request&)>;                             // until it has ended

  ReductionWindow(std::int64_t piece_elements, std::size_t in_flight, Start start, Test test, Wait wait)
      : piece_elements_(piece_elements), capacity_(in_flight), start_(std::move(start)), test_(std::move(test)),
        wait_(std::move(wait)) {
    if (piece_elements_ < 1) {
      throw std::invalid_argument("reduction window: pieces of " + std::to_string(piece_elements_) +
                                  " elements; at least 1");
    }
    if (capacity_ < 1) throw std::invalid_argument("reduction window: 0 pieces in flight; at least 1");
  }

  // [data, data + count), in pieces, after everything added before; starts what the window holds.
  // Each piece's result is multiplied by `scale_once_ended` when it ends (1: left as reduced).
  void add(float* data, std::int64_t count, float scale_once_ended = 1.0f) {
    for (std::int64_t done = 0; done < count; done += piece_elements_) {
      waiting_.push_back({data + done, std::min(piece_elements_, count - done), scale_once_ended});
    }
    fill();
  }

  // Scales and forgets the pieces that have ended and starts waiting ones in their place.
  void progress() {
    std::erase_if(running_, [this](Running& running) {
      if (!test_(running.request)) return false;
      scale(running.piece);
      return true;
    });
    fill();
  }

  // Until every piece added has ended (and is scaled), the oldest waited for first.
  void complete() {
    while (!running_.empty()) {
      wait_(running_.front().request);
      const Piece ended = running_.front().piece;
      running_.pop_front();
      fill();  // the next piece runs while this one is scaled
      scale(ended);
    }
  }

  // Until the pieces already started have ended; those still waiting are dropped, never started
  // (a communicator destroyed mid-step: no new collective on the way out).
  void abandon() noexcept {
    waiting_.clear();
    for (Running& running : running_) {
      try {
        wait_(running.request);
      } catch (...) {  // the library's own failure: nothing more to wait for
      }
    }
    running_.clear();
  }

  std::size_t running() const { return running_.size(); }
  std::size_t waiting() const { return waiting_.size(); }

 private:
  struct Piece {
    float* data;
    std::int64_t count;
    float scale_once_ended;
  };
  struct Running {
    Request request;
    Piece piece;
  };

  void fill() {
    while (running_.size() < capacity_ && !waiting_.empty()) {
      const Piece piece = waiting_.front();
      running_.push_back({start_(piece.data, piece.count), piece});
      waiting_.pop_front();
    }
  }

  static void scale(const Piece& piece) {
    if (piece.scale_once_ended == 1.0f) return;
#pragma omp simd  // GCC's -O2 leaves a loop of unknown length scalar
    for (std::int64_t i = 0; i < piece.count; ++i) piece.data[i] *= piece.scale_once_ended;
  }

  std::int64_t piece_elements_;
  std::size_t capacity_;
  Start start_;
  Test test_;
  Wait wait_;
  std::deque<Running> running_;  // in the order started
  std::deque<Piece> waiting_;    // in the order added
};

}  // namespace dlbench::worker
