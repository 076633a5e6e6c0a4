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

// The JSON document to --output (or stdout); the exit code for it.
int write_document(const Options& o, const nlohmann::json& document, bool succeeded);

}  // namespace dlbench::worker
