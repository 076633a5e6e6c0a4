// The first overflow after the repeats, traced on every rank of a job (lossScaling.overflow).
// A skip is decided on the reduced gradients, so every rank skips the same step, but each replays
// its own batch: an inf that one rank's batch or activations made shows only in that rank's
// replay. Rank 0 writes the result, so it gathers every rank's trace and puts them together.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "communicator.hpp"
#include "trainer.hpp"

namespace dlbench::worker {

// The ranks' traces (in rank order) as one text. One rank's, or texts all alike, as they are.
// Otherwise, a line each, most telling first (what a result's 1,024 characters cut keeps):
//   rank 0: untimed step 3 skipped, loss scale now 32768: loss 2.3; 5 of 161 parameters' ...
//   rank 5: replayed at loss scale 65536: forward: first non-finite layer output: ...
//   ranks 0-4, 6, 7: every layer output and input gradient finite in their replays
// The skipped step's line is the first rank's that has one (its gradients are the reduced ones,
// alike on every rank; its loss is that rank's own); then each rank whose replay located an inf
// or NaN, with its replay's line; then the ranks whose replays found every value finite; then
// any other lines (a graph's replay, a trace that failed), ranks with the same line together.
std::string compose_rank_traces(const std::vector<Trainer::OverflowTrace>& ranks);

// "rank 3", "ranks 0, 2", "ranks 0-4, 6, 7" (runs of three or more as ranges).
std::string rank_list(const std::vector<int>& ranks);

// Every rank's trace, in rank order, on every rank (a collective: every rank calls it).
std::vector<Trainer::OverflowTrace> gather_traces(Communicator& comm, const Trainer::OverflowTrace& mine);

}  // namespace dlbench::worker
