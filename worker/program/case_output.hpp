// What a worker invocation writes: the environment it ran in, the table on the terminal and
// the JSON document (a result or a self-test).
#pragma once

#include <cstdint>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend.hpp"
#include "communicator.hpp"
#include "layers/layer.hpp"
#include "dlbench/core/result_document.hpp"
#include "program/options.hpp"
#include "self_test.hpp"

namespace dlbench::worker {

// Distinct hosts in rank order: the job's nodes.
std::vector<std::string> distinct(const std::vector<std::string>& hosts);

// The hosts, CPU, threads (and why that many), GPU and library versions of this invocation.
EnvironmentInfo environment(const Backend* backend, const Options& o, Communicator& communicator,
                            const std::vector<std::string>& hosts);

// Where the backend was asked to fuse bottlenecks' convolutions with their batch norms
// (backendOptions.convBatchNorm other than "separate"), what the set-up `network` did, in
// `options`: convBatchNormBlocks, "K of N" bottlenecks fused (a backend fuses a block's three
// convolutions or none), and convBatchNormGradientBlocks, of those the K whose data gradients took
// their batch norms' gradients. A route that fuses nothing (bf16 on an H200) then says so in the
// result, not only on stderr. Nothing where the model has no bottleneck.
void record_fused_blocks(Layer& network, std::map<std::string, std::string>& options);

// The case's table: its repeats, median, stability, input, other load and profile, or why it failed.
void print_table(std::ostream& out, const ResultDocument& doc, std::int64_t parameters);

// One line of the self-test's table.
void print_check(std::ostream& out, const SelfTestCheck& c);

// How a document is written to --output. `the_case`: rank 0's at the case's end, over whatever is
// there. `where_none_is`: a document written because the case was cut short, which gives way to
// one already written: that of a rank whose failure the others never learnt of (they wait in a
// collective it will not enter, and its abort ends rank 0 unwritten, or stops it, which then
// writes what it measured), or rank 0's, had it got past its last collective. `after_rank_zero`:
// rank 0's deputy's, stopped, as where_none_is, and silent where rank 0 wrote first.
enum class DocumentWriter { the_case, where_none_is, after_rank_zero };

// The JSON document to --output (or stdout); the exit code for it.
int write_document(const Options& o, const nlohmann::json& document, bool succeeded,
                   DocumentWriter writer = DocumentWriter::the_case);

}  // namespace dlbench::worker
