#include "arena.hpp"

#include <algorithm>
#include <numeric>
#include <stdexcept>

#include "backend.hpp"

namespace dlbench::worker {
namespace {

std::size_t aligned(std::size_t bytes) { return (bytes + Arena::kAlignment - 1) / Arena::kAlignment * Arena::kAlignment; }

}  // namespace

Tick Arena::next_tick() {
  if (committed_) throw std::logic_error("Arena::next_tick after commit");
  return {ticks_++, false};
}

std::optional<Tick> Arena::last_tick() const {
  if (ticks_ == 0) return std::nullopt;
  return Tick{ticks_ - 1, false};
}

void Arena::request(Tensor& tensor) {
  if (committed_) throw std::logic_error("Arena::request after commit");
  tensor.buffer = static_cast<std::int32_t>(buffers_.size());
  buffers_.push_back({aligned(tensor.bytes()), std::nullopt, {}, false, 0});
  requests_.push_back(&tensor);
}

void Arena::request(Tensor& tensor, Tick written) {
  request(tensor);
  buffers_.back().written = written;
}

void Arena::read(const Tensor& tensor, Tick when) {
  if (tensor.buffer < 0) return;
  if (committed_) throw std::logic_error("Arena::read after commit");
  buffers_.at(static_cast<std::size_t>(tensor.buffer)).reads.push_back(when);
}

void Arena::keep_until_step_end(const Tensor& tensor) {
  if (tensor.buffer < 0) return;
  buffers_.at(static_cast<std::size_t>(tensor.buffer)).until_end = true;
}

std::int64_t Arena::position(Tick t) const {
  return t.backward ? 2 * static_cast<std::int64_t>(ticks_) - t.index : t.index;
}

std::int64_t Arena::first_use(const Buffer& b) const { return b.written ? position(*b.written) : -1; }

std::int64_t Arena::last_use(const Buffer& b) const {
  if (!b.written || b.until_end) return 2 * static_cast<std::int64_t>(ticks_) + 1;
  std::int64_t last = position(*b.written);
  for (const Tick& t : b.reads) last = std::max(last, position(t));
  return last;
}

std::size_t Arena::unshared_bytes() const {
  return std::accumulate(buffers_.begin(), buffers_.end(), std::size_t{0},
                         [](std::size_t sum, const Buffer& b) { return sum + b.bytes; });
}

std::size_t Arena::peak_live_bytes() const {
  // Live bytes change only where a lifetime starts or ends: sweep those events.
  std::vector<std::pair<std::int64_t, std::int64_t>> events;  // (moment, +bytes at start / -bytes after end)
  for (const Buffer& b : buffers_) {
    events.emplace_back(first_use(b), static_cast<std::int64_t>(b.bytes));
    events.emplace_back(last_use(b) + 1, -static_cast<std::int64_t>(b.bytes));
  }
  std::sort(events.begin(), events.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first < b.first : a.second < b.second;  // ends before starts
  });
  std::int64_t live = 0, peak = 0;
  for (const auto& [moment, delta] : events) {
    live += delta;
    peak = std::max(peak, live);
  }
  return static_cast<std::size_t>(peak);
}

void Arena::commit(Backend& backend, MemoryReuse reuse) {
  if (committed_) throw std::logic_error("Arena::commit twice");
  if (reuse != MemoryReuse::lifetime) {
    std::size_t offset = 0;
    for (Buffer& b : buffers_) {
      b.offset = offset;
      offset += b.bytes;
    }
    block_bytes_ = offset;
  } else {
    // Greedy by size, as TFLite's and MXNet's planners do: the largest buffers are placed
    // first, each at the lowest offset that no already-placed, overlapping-in-time buffer
    // occupies.
    std::vector<std::size_t> order(buffers_.size());
    std::iota(order.begin(), order.end(), std::size_t{0});
    std::vector<std::int64_t> first(buffers_.size()), last(buffers_.size());
    for (std::size_t i = 0; i < buffers_.size(); ++i) {
      first[i] = first_use(buffers_[i]);
      last[i] = last_use(buffers_[i]);
    }
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
      if (buffers_[a].bytes != buffers_[b].bytes) return buffers_[a].bytes > buffers_[b].bytes;
      return first[a] < first[b];
    });
    std::vector<std::size_t> placed;
    std::vector<std::pair<std::size_t, std::size_t>> taken;  // [offset, end) of overlapping buffers
    block_bytes_ = 0;
    for (const std::size_t i : order) {
      taken.clear();
      for (const std::size_t j : placed) {
        if (first[j] <= last[i] && first[i] <= last[j]) taken.emplace_back(buffers_[j].offset, buffers_[j].offset + buffers_[j].bytes);
      }
      std::sort(taken.begin(), taken.end());
      std::size_t offset = 0;
      for (const auto& [begin, end] : taken) {
        if (begin >= offset + buffers_[i].bytes) break;  // the gap before `begin` fits
        offset = std::max(offset, end);
      }
      buffers_[i].offset = offset;
      block_bytes_ = std::max(block_bytes_, offset + buffers_[i].bytes);
      placed.push_back(i);
    }
  }
  block_ = backend.allocate(block_bytes_);
  committed_ = true;
  auto* base = static_cast<unsigned char*>(block_.get());
  for (Tensor* t : requests_) t->data = reinterpret_cast<float*>(base + buffers_[static_cast<std::size_t>(t->buffer)].offset);
  if (reuse == MemoryReuse::poison) {
    const std::int64_t step_end = 2 * static_cast<std::int64_t>(ticks_) + 1;
    for (std::size_t i = 0; i < buffers_.size(); ++i) {
      if (buffers_[i].bytes > 0 && last_use(buffers_[i]) < step_end) dying_.push_back(i);
    }
    std::stable_sort(dying_.begin(), dying_.end(),
                     [&](std::size_t a, std::size_t b) { return last_use(buffers_[a]) < last_use(buffers_[b]); });
  }
}

void Arena::entering(Tick next, Backend& backend) {
  const std::int64_t now = position(next);
  auto* base = static_cast<unsigned char*>(block_.get());
  while (poisoned_this_step_ < dying_.size()) {
    const Buffer& b = buffers_[dying_[poisoned_this_step_]];
    if (last_use(b) >= now) break;
    backend.poison(base + b.offset, b.bytes);
    ++poisoned_this_step_;
    ++poisoned_total_;
  }
}

std::vector<Arena::Placement> Arena::placements() const {
  std::vector<Placement> out;
  out.reserve(buffers_.size());
  for (const Buffer& b : buffers_) out.push_back({b.offset, b.bytes, first_use(b), last_use(b)});
  return out;
}

std::int32_t Arena::buffer_at(const void* address) const {
  if (!committed_ || address == nullptr) return -1;
  const auto* base = static_cast<const unsigned char*>(block_.get());
  const auto* p = static_cast<const unsigned char*>(address);
  if (p < base || p >= base + block_bytes_) return -1;
  const auto offset = static_cast<std::size_t>(p - base);
  for (std::size_t i = 0; i < buffers_.size(); ++i) {
    if (offset >= buffers_[i].offset && offset < buffers_[i].offset + buffers_[i].bytes) return static_cast<std::int32_t>(i);
  }
  return -1;
}

}  // namespace dlbench::worker
