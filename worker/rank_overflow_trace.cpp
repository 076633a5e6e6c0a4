#include "rank_overflow_trace.hpp"

#include <algorithm>
#include <stdexcept>
#include <utility>

namespace dlbench::worker {
namespace {

using Finding = Trainer::ReplayFinding;

// A trace's first line, and what follows it (empty where it has one line only).
std::pair<std::string, std::string> split_first_line(const std::string& said) {
  const auto newline = said.find('\n');
  if (newline == std::string::npos) return {said, {}};
  return {said.substr(0, newline), said.substr(newline + 1)};
}

// The one-character code a trace travels with (gather_traces).
char code_of(Finding f) {
  switch (f) {
    case Finding::none: return 'n';
    case Finding::all_finite: return 'f';
    case Finding::located: return 'l';
  }
  throw std::logic_error("code_of: unknown replay finding");
}

Finding finding_of(char code) {
  switch (code) {
    case 'n': return Finding::none;
    case 'f': return Finding::all_finite;
    case 'l': return Finding::located;
    default: throw std::runtime_error(std::string("gather_traces: a rank sent an unknown replay finding '") + code + "'");
  }
}

}  // namespace

std::string rank_list(const std::vector<int>& ranks) {
  std::string out = ranks.size() == 1 ? "rank " : "ranks ";
  for (std::size_t i = 0; i < ranks.size();) {
    std::size_t run = i;
    while (run + 1 < ranks.size() && ranks[run + 1] == ranks[run] + 1) ++run;
    if (i > 0) out += ", ";
    if (run - i >= 2) {
      out += std::to_string(ranks[i]) + "-" + std::to_string(ranks[run]);
      i = run + 1;
    } else {
      out += std::to_string(ranks[i]);
      ++i;
    }
  }
  return out;
}

std::string compose_rank_traces(const std::vector<Trainer::OverflowTrace>& ranks) {
  if (ranks.empty()) throw std::invalid_argument("compose_rank_traces: no rank's trace");
  bool alike = true;
  for (const auto& r : ranks) alike = alike && r.said == ranks.front().said;
  if (alike) return ranks.front().said;

  std::string head;
  std::vector<std::string> located;
  std::vector<int> all_finite;
  std::vector<std::pair<std::string, std::vector<int>>> others;  // a line, and the ranks that said it
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    const int rank = static_cast<int>(i);
    auto [first, rest] = split_first_line(ranks[i].said);
    if (!rest.empty() && head.empty()) head = "rank " + std::to_string(rank) + ": " + first;
    std::string& line = rest.empty() ? first : rest;  // a one-line trace is its own line
    if (!rest.empty() && ranks[i].replay == Finding::located) {
      located.push_back("rank " + std::to_string(rank) + ": " + line);
    } else if (!rest.empty() && ranks[i].replay == Finding::all_finite) {
      all_finite.push_back(rank);
    } else {
      auto same = std::find_if(others.begin(), others.end(), [&](const auto& other) { return other.first == line; });
      if (same == others.end()) same = others.insert(others.end(), {line, {}});
      same->second.push_back(rank);
    }
  }
  std::string out = head;
  const auto add = [&out](const std::string& line) { out += (out.empty() ? "" : "\n") + line; };
  for (const auto& line : located) add(line);
  if (!all_finite.empty()) {
    add(rank_list(all_finite) + ": every layer output and input gradient finite in " +
        (all_finite.size() == 1 ? "its replay" : "their replays"));
  }
  for (const auto& [line, said_by] : others) add(rank_list(said_by) + ": " + line);
  return out;
}

std::vector<Trainer::OverflowTrace> gather_traces(Communicator& comm, const Trainer::OverflowTrace& mine) {
  const std::vector<std::string> sent = comm.allgather(code_of(mine.replay) + mine.said);
  std::vector<Trainer::OverflowTrace> out;
  for (const auto& s : sent) {
    if (s.empty()) throw std::runtime_error("gather_traces: a rank sent an empty trace");
    out.push_back({s.substr(1), finding_of(s.front())});
  }
  return out;
}

}  // namespace dlbench::worker
