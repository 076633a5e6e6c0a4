// `dlbench compare`: the real binary on statuses whose repeats are chosen, so that every verdict
// and exit code is reached, and on two statuses `dlbench run` measured with the real worker.
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "../support/process.hpp"
#include "dlbench/core/codec.hpp"
#include "dlbench/core/statistics.hpp"
#include "dlbench/core/status.hpp"

namespace dlbench {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using testing::Outcome;

class CompareCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("dlbench-compare-test-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name) << text;
    return name;
  }
  std::string write(const std::string& name, const BenchmarkRun& run) { return write(name, to_json(run).dump()); }
  Outcome dlbench(const std::string& args) {
    return testing::run_shell(std::string(DLBENCH_CLI_BINARY) + " " + args, dir_.string());
  }

  // A measured result: `repeats` throughputs around `center`, each `step` apart.
  static CaseResult measured(const CaseSpec& c, double center, int repeats = 7, double step = 1.0) {
    CaseResult r;
    r.case_ = c;
    std::vector<double> values;
    for (int i = 0; i < repeats; ++i) values.push_back(center + step * (i - (repeats - 1) / 2.0));
    r.throughput = Throughput{"samples/s", summarize(values), values};
    CaseEnvironment e;
    e.backend = "cuda";
    e.gpu_model = "NVIDIA H200";
    e.driver_version = "580.159";
    e.dlbench_version = "0.1.0";
    r.environment = e;
    return r;
  }
  static BenchmarkRun run_of(const std::string& name, std::vector<CaseResult> results) {
    BenchmarkRun run;
    run.metadata.name = name;
    run.spec.worker.image = "registry.example/dlbench-worker:0.1.0";
    for (const auto& r : results) run.spec.cases.push_back(r.case_);
    BenchmarkRunStatus s;
    s.phase = Phase::Succeeded;
    s.results = std::move(results);
    run.status = s;
    return run;
  }

  const CaseSpec one_gpu{1, 1, 64, Precision::amp};
  const CaseSpec eight_gpus{1, 8, 64, Precision::amp};
  const CaseSpec bigger_batch{1, 1, 128, Precision::amp};
  std::filesystem::path dir_;
};

// Seven repeats a side, separated: the least p-value seven against seven allow, 2 / C(14, 7). A
// 10% drop is slower and fails the gate; a 2% rise the repeats show is still under the threshold;
// a 10% rise is faster. What differs (the image, the driver) is listed, every case at once.
TEST_F(CompareCli, ASlowerCaseFailsTheGateAndWhatDiffersIsListed) {
  const BenchmarkRun before =
      run_of("nightly", {measured(one_gpu, 1000), measured(eight_gpus, 7600), measured(bigger_batch, 1900)});
  BenchmarkRun after =
      run_of("nightly", {measured(one_gpu, 900), measured(eight_gpus, 7752), measured(bigger_batch, 2090)});
  after.spec.worker.image = "registry.example/dlbench-worker:0.2.0";
  for (auto& r : after.status->results) r.environment->driver_version = "580.200";
  // The same steps and optimizer: the bigger batch trained to 4.9 instead of 0.61 (a numerics
  // change says so whatever the speed); 1x8's losses are near zero, where GPU runs differ by
  // large factors, and stay unremarked.
  BenchmarkRun with_losses = before;
  with_losses.status->results[1].loss_after_repeats = {0.004};
  with_losses.status->results[2].loss_after_repeats = {0.61};
  after.status->results[1].loss_after_repeats = {0.0011};
  after.status->results[2].loss_after_repeats = {4.9};
  // Both sides' energy for the slower case: the new build draws less a sample and says so.
  with_losses.status->results[0].energy = EnergyReport{0.0712, 560.0};
  after.status->results[0].energy = EnergyReport{0.0655, 470.0};
  after.status->results[1].energy = EnergyReport{0.08, 600.0};  // before has none: nothing to set beside it
  // Both sides timed the 8-GPU case's gradient reduction: the new driver's allreduce is slower and
  // more of a step waits for it, which the line says beside the verdict.
  with_losses.status->results[1].communication = communication_report(8, 102'236'160, 4, 0.0010, 0.134, 0.130);
  after.status->results[1].communication = communication_report(8, 102'236'160, 4, 0.0016, 0.132, 0.125);
  write("before.json", with_losses);
  write("after.json", after);

  const Outcome table = dlbench("compare before.json after.json");
  EXPECT_EQ(table.exit_code, 1) << table.out << table.err;
  EXPECT_THAT(table.out, HasSubstr("compare resnet50: nightly (before.json, the baseline) against nightly "
                                   "(after.json)\n"));
  EXPECT_THAT(table.out, HasSubstr("           case   before    after  change  repeats        p    verdict\n"
                                   "   1x1-bs64-amp  1000.00   900.00  -10.0%    7 / 7  0.00058     slower\n"));
  EXPECT_THAT(table.out, HasSubstr("   1x8-bs64-amp  7600.00  7752.00   +2.0%    7 / 7  0.00058  no change\n"));
  EXPECT_THAT(table.out, HasSubstr("  1x1-bs128-amp: faster: +10.0% (p 0.00058); the loss after the last repeat was "
                                   "0.61 before and 4.9 after, with the same optimizer and steps: the two did not "
                                   "train alike\n"));
  EXPECT_THAT(table.out, HasSubstr("1x8-bs64-amp: no change: +2.0% is under the threshold of 5.0%, though the repeats "
                                   "show it (p 0.00058); gradient reduction 3.0% of a step before and 5.3% after, bus "
                                   "bandwidth 179 GB/s before and 112 after (-37.5%)\n"));
  EXPECT_THAT(table.out, HasSubstr("  1x1-bs64-amp: slower: -10.0% (p 0.00058); energy 0.0712 J a sample before and "
                                   "0.0655 after (-8.0%)\n"));
  EXPECT_THAT(table.out, HasSubstr("\nwhat differs between the runs\n"
                                   "  spec.worker.image: registry.example/dlbench-worker:0.1.0 -> "
                                   "registry.example/dlbench-worker:0.2.0\n"
                                   "  environment.driverVersion: 580.159 -> 580.200 (every case)\n"));
  EXPECT_THAT(table.out, HasSubstr("3 cases: 1 slower, 1 faster, 1 no change; failing: 1x1-bs64-amp slower\n"));

  const Outcome json = dlbench("compare before.json after.json --format json");
  EXPECT_EQ(json.exit_code, 1);
  const auto j = nlohmann::json::parse(json.out);
  EXPECT_EQ(j.at("exitCode"), 1);
  ASSERT_EQ(j.at("cases").size(), 3u);
  const auto& first = j.at("cases")[0];
  EXPECT_EQ(first.at("verdict"), "slower");
  EXPECT_NEAR(first.at("change").get<double>(), -0.10, 1e-12);
  EXPECT_NEAR(first.at("pValue").get<double>(), 2.0 / 3432.0, 1e-15);
  EXPECT_EQ(first.at("u"), 0.0);  // every repeat after is below every repeat before
  EXPECT_EQ(first.at("before").at("repeats").size(), 7u);
  EXPECT_FALSE(first.at("before").contains("lossAfterLastRepeat"));
  EXPECT_EQ(first.at("before").at("joulesPerSample"), 0.0712);
  EXPECT_EQ(first.at("after").at("joulesPerSample"), 0.0655);
  EXPECT_FALSE(j.at("cases")[1].at("before").contains("joulesPerSample"));
  EXPECT_EQ(j.at("cases")[2].at("after").at("lossAfterLastRepeat"), 4.9);
  EXPECT_EQ(j.at("summary").at("faster"), 1);
  EXPECT_EQ(j.at("differences")[1].at("field"), "environment.driverVersion");
  EXPECT_EQ(j.at("differences")[1].at("cases").size(), 3u);

  // A wider threshold: 10.0% is not under 10%, 2% and the image are as before. At 11% nothing fails.
  EXPECT_EQ(dlbench("compare before.json after.json --threshold 10%").exit_code, 1);
  const Outcome wide = dlbench("compare before.json after.json --threshold 11");
  EXPECT_EQ(wide.exit_code, 0) << wide.out;
  EXPECT_THAT(wide.out, HasSubstr("3 cases: 3 no change; no case slower\n"));
  // A level the repeats cannot reach: every case inconclusive, which only --strict fails.
  const Outcome strict_level = dlbench("compare before.json after.json --alpha 0.0001");
  EXPECT_EQ(strict_level.exit_code, 0);
  EXPECT_THAT(strict_level.out, HasSubstr("7 and 7 repeats cannot show a difference at p < 0.0001 (the least p-value "
                                          "they allow is 0.00058): measure 9 or more on each side"));
  EXPECT_EQ(dlbench("compare before.json after.json --alpha 0.0001 --strict").exit_code, 1);

  const Outcome junit = dlbench("compare before.json after.json --format junit");
  EXPECT_EQ(junit.exit_code, 1);
  EXPECT_THAT(junit.out, HasSubstr("<failure type=\"slower\" message=\"slower: -10.0% (p 0.00058); energy 0.0712 J a "
                                   "sample before and 0.0655 after (-8.0%)\"/>"));
  EXPECT_THAT(junit.out, HasSubstr("    <properties>\n      <property name=\"spec.worker.image\" "
                                   "value=\"registry.example/dlbench-worker:0.1.0 -&gt; "
                                   "registry.example/dlbench-worker:0.2.0\"/>\n      <property "
                                   "name=\"environment.driverVersion\" value=\"580.159 -&gt; 580.200\"/>\n"));

  // The same file twice: nothing differs and nothing moved.
  const Outcome same = dlbench("compare before.json before.json");
  EXPECT_EQ(same.exit_code, 0) << same.out;
  EXPECT_THAT(same.out, HasSubstr("nothing in the spec or in what measured them"));
  EXPECT_THAT(same.out, HasSubstr("3 cases: 3 no change; no case slower\n"));
}

// Three repeats against three can never reach p < 0.05, however far apart: inconclusive, not
// unchanged. Repeats that overlap are within noise however large the change of the median. A
// case measured before that failed now is a regression; a new case, or one missing, is not.
TEST_F(CompareCli, EachVerdictSaysWhyAndStrictFailsOnWhatCouldNotBeJudged) {
  CaseResult overlapping = measured(bigger_batch, 1900, 7, 100.0);
  CaseResult fails_now{};
  fails_now.case_ = eight_gpus;
  fails_now.state = CaseState::Failed;
  fails_now.reason = "OutOfMemory";
  fails_now.message = "cudaMalloc of 2.0 GiB failed";
  const CaseSpec gone{2, 8, 64, Precision::amp}, added{1, 1, 256, Precision::amp};
  const BenchmarkRun before = run_of("r", {measured(one_gpu, 1000, 3), measured(eight_gpus, 7600), overlapping,
                                           measured(gone, 15000)});
  CaseResult overlapping_after = measured(bigger_batch, 1800, 7, 100.0);  // -5.3%, repeats interleaved
  BenchmarkRun after =
      run_of("r", {measured(one_gpu, 800, 3), fails_now, overlapping_after, measured(added, 2000)});
  write("before.json", before);
  write("after.json", after);
  const Outcome o = dlbench("compare before.json after.json");
  EXPECT_EQ(o.exit_code, 1) << o.out << o.err;
  EXPECT_THAT(o.out, HasSubstr("1x1-bs64-amp: inconclusive: 3 and 3 repeats cannot show a difference at p < 0.05 "
                               "(the least p-value they allow is 0.1): measure 4 or more on each side\n"));
  EXPECT_THAT(o.out, HasSubstr("1x8-bs64-amp: failed now: measured before, now Failed, OutOfMemory: cudaMalloc of 2.0 "
                               "GiB failed\n"));
  EXPECT_THAT(o.out, HasSubstr("1x1-bs128-amp: within noise: -5.3%, but the repeats overlap too much to show it (p "));
  EXPECT_THAT(o.out, HasSubstr("2x8-bs64-amp: missing: not in the candidate run\n"));
  EXPECT_THAT(o.out, HasSubstr("1x1-bs256-amp: new: not in the baseline run\n"));
  EXPECT_THAT(o.out, HasSubstr("failing: 1x8-bs64-amp failed now\n"));

  // Without the failure, the gate passes and says that some cases were not judged; --strict fails
  // on them (the 3-repeat case and the missing one), not on the overlap, which was judged.
  after.status->results[1] = measured(eight_gpus, 7600);
  write("after.json", after);
  const Outcome lenient = dlbench("compare before.json after.json");
  EXPECT_EQ(lenient.exit_code, 0) << lenient.out;
  EXPECT_THAT(lenient.out, HasSubstr("; no case slower (some not judged: --strict fails on those)\n"));
  const Outcome strict = dlbench("compare before.json after.json --strict --format json");
  EXPECT_EQ(strict.exit_code, 1);
  const auto j = nlohmann::json::parse(strict.out);
  EXPECT_EQ(j.at("summary"), nlohmann::json::parse(R"({"inconclusive": 1, "noChange": 1, "withinNoise": 1,
                                                      "missing": 1, "new": 1})"));
  EXPECT_THAT(dlbench("compare before.json after.json --strict").out,
              HasSubstr("failing: 1x1-bs64-amp inconclusive, 2x8-bs64-amp missing\n"));

  // A case measured under other load, or whose repeats spread past their bound, is not judged.
  after.status->results[1].interference = InterferenceReport{0.4, 0.0, std::nullopt, InterferenceVerdict::interfered};
  after.status->results[2].stability = StabilityReport{StabilityVerdict::unstable, 0.02, 0.05, 7, {}};
  after.status->results[2].reason = "Unstable";
  write("after.json", after);
  const Outcome disturbed = dlbench("compare before.json after.json");
  EXPECT_THAT(disturbed.out, HasSubstr("1x8-bs64-amp: disturbed: after was measured interfered (tasks waited for a "
                                       "CPU 40.0% of the time): measure it again\n"));
  EXPECT_THAT(disturbed.out, HasSubstr("1x1-bs128-amp: unstable: after's repeats spread (cv 5.0% above its bound "
                                       "2.0%): measure it again\n"));
  // Both sides' reasons where both have one; unstable wins the verdict.
  BenchmarkRun both_disturbed = before;
  both_disturbed.status->results[2].interference =
      InterferenceReport{0.3, 0.0, std::nullopt, InterferenceVerdict::interfered};
  write("before-disturbed.json", both_disturbed);
  EXPECT_THAT(dlbench("compare before-disturbed.json after.json").out,
              HasSubstr("1x1-bs128-amp: unstable: before was measured interfered (tasks waited for a CPU 30.0% of the "
                        "time); after's repeats spread (cv 5.0% above its bound 2.0%): measure it again\n"));
  // A case skipped in the candidate (a smaller cluster) was not measured: missing, not failed now.
  CaseResult skipped{};
  skipped.case_ = eight_gpus;
  skipped.state = CaseState::Skipped;
  skipped.reason = "NeedsMoreNodes";
  BenchmarkRun smaller = after;
  smaller.status->results[1] = skipped;
  write("smaller.json", smaller);
  const Outcome skipped_now = dlbench("compare before.json smaller.json");
  EXPECT_EQ(skipped_now.exit_code, 0) << skipped_now.out;
  EXPECT_THAT(skipped_now.out, HasSubstr("1x8-bs64-amp: missing: measured before, now Skipped, NeedsMoreNodes\n"));
  EXPECT_EQ(dlbench("compare before.json smaller.json --strict").exit_code, 1);

  // Markdown and csv carry the same verdicts.
  EXPECT_THAT(dlbench("compare before.json after.json --format markdown").out,
              HasSubstr("| 1x8-bs64-amp | 7600.00 | 7600.00 | +0.0% | 7 / 7 | 1 | disturbed |\n"));
  EXPECT_THAT(dlbench("compare before.json after.json --format csv").out,
              HasSubstr("\n1x8-bs64-amp,7600.0000,7600.0000,0.000000,1,disturbed,\"after was measured interfered"));
  // JUnit XML for CI systems: a case is a test; slower and failed now are failures, what could not
  // be judged is skipped (a failure under --strict), the rest pass with their why; what differs
  // is the suite's properties. Well-formed XML, as Python's parser reads it.
  Outcome junit = dlbench("compare before.json after.json --format junit");
  EXPECT_EQ(junit.exit_code, 0) << junit.out;
  EXPECT_THAT(junit.out, HasSubstr("<testsuites name=\"dlbench compare\" tests=\"5\" failures=\"0\" errors=\"0\" "
                                   "skipped=\"4\">\n"));
  EXPECT_THAT(junit.out, HasSubstr("<testcase classname=\"dlbench.compare.resnet50\" name=\"1x1-bs64-amp\" "
                                   "time=\"0\"><skipped message=\"inconclusive: 3 and 3 repeats"));
  EXPECT_THAT(junit.out, HasSubstr("name=\"1x1-bs256-amp\" time=\"0\"><system-out>new: not in the baseline "
                                   "run</system-out></testcase>"));
  EXPECT_THAT(junit.out, HasSubstr("<skipped message=\"disturbed: after was measured interfered"));
  const Outcome parsed = testing::run_shell("{ " + std::string(DLBENCH_CLI_BINARY) +
                                                " compare before.json after.json --format junit --strict | python3 -c "
                                                "'import sys, xml.dom.minidom as m; d = m.parseString(sys.stdin.read()); "
                                                "print(len(d.getElementsByTagName(\"failure\")))'; }",
                                            dir_.string());
  EXPECT_EQ(parsed.out, "4\n") << parsed.err;  // the 3-repeat, disturbed, unstable and missing cases

  // A message with a pipe stays in its markdown cell.
  fails_now.message = "rank 1 | rank 0 out of memory";
  after.status->results[1] = fails_now;
  write("after.json", after);
  EXPECT_THAT(dlbench("compare before.json after.json --format markdown").out,
              HasSubstr("| 1x8-bs64-amp | failed now: measured before, now Failed, OutOfMemory: rank 1 \\| rank 0 out "
                        "of memory |\n"));
}

// What cannot be compared is refused with exit 2, naming the file, the field or the option.
// A status the operator trimmed to fit its API server (ResultDetail) reads as any other: the report's
// tables, and compare against the same run whole (the same repeats: no change, nothing differs).
TEST_F(CompareCli, AStatusTrimmedToItsEssentialsIsReportedAndComparedAsAnyOther) {
  std::ifstream in(std::string(DLBENCH_SOURCE_DIR) + "/docs/samples/isa-avx512.status.json");
  const auto decoded = decode_benchmark_run(nlohmann::json::parse(in));
  ASSERT_TRUE(decoded.ok());
  BenchmarkRun essential = *decoded.value;
  keep_result_detail(*essential.status, ResultDetail::essential);
  ASSERT_FALSE(essential.status->results[0].environment.has_value());
  const Outcome report = dlbench("report " + write("essential.json", essential) + " --format csv");
  ASSERT_EQ(report.exit_code, 0) << report.err;
  const Outcome whole_report = dlbench("report " + write("whole.json", *decoded.value) + " --format csv");
  // The same throughput, speed-up and efficiency rows; the tables of what it left out are gone.
  const auto rows = [](const std::string& csv, const std::string& table) {
    std::vector<std::string> kept;
    std::istringstream lines(csv);
    for (std::string line; std::getline(lines, line);) {
      if (line.starts_with(table + ",")) kept.push_back(line);
    }
    return kept;
  };
  for (const char* table : {"throughput", "speedup", "efficiency"}) {
    EXPECT_EQ(rows(report.out, table).size(), 4u) << table << "\n" << report.out;
    EXPECT_EQ(rows(report.out, table), rows(whole_report.out, table)) << table;
  }
  EXPECT_EQ(rows(whole_report.out, "learningrate").size(), 4u) << whole_report.out;
  EXPECT_TRUE(rows(report.out, "learningrate").empty());
  const Outcome compared = dlbench("compare whole.json essential.json");
  EXPECT_EQ(compared.exit_code, 0) << compared.out << compared.err;
  EXPECT_THAT(compared.out, HasSubstr("4 cases: 4 no change; no case slower"));
}

TEST_F(CompareCli, RefusesWhatCannotBeCompared) {
  write("resnet.json", run_of("r", {measured(one_gpu, 1000)}));
  BenchmarkRun bert = run_of("b", {measured(one_gpu, 1000)});
  bert.spec.model = Model::bert_base;
  write("bert.json", bert);
  Outcome o = dlbench("compare resnet.json bert.json");
  EXPECT_EQ(o.exit_code, 2);
  EXPECT_THAT(o.err, HasSubstr("compare takes two runs of one model: r trained resnet50, b bert-base"));

  write("two.yaml", to_json(run_of("x", {measured(one_gpu, 100)})).dump() + "\n---\n" +
                        to_json(run_of("y", {measured(one_gpu, 100)})).dump() + "\n");
  o = dlbench("compare resnet.json two.yaml");
  EXPECT_EQ(o.exit_code, 2);
  EXPECT_THAT(o.err, HasSubstr("two.yaml (the candidate) holds 2 runs; compare takes one run from each file"));
  o = dlbench("compare absent.json resnet.json");
  EXPECT_EQ(o.exit_code, 2);
  EXPECT_THAT(o.err, HasSubstr("absent.json"));
  write("invalid.json", R"({"results": [{"case": {"nodes": 0}}]})");
  o = dlbench("compare resnet.json invalid.json");
  EXPECT_EQ(o.exit_code, 2);
  EXPECT_THAT(o.err, HasSubstr("error: invalid.json: "));

  for (const auto& [args, message] :
       std::vector<std::pair<std::string, std::string>>{
           {"--threshold abc", "--threshold: \"abc\" is not a percentage from 0 to below 100"},
           {"--threshold 100", "--threshold: \"100\" is not a percentage from 0 to below 100"},
           {"--threshold -1", "--threshold: \"-1\" is not a percentage from 0 to below 100"},
           {"--alpha 0", "--alpha: \"0\" is not a number above 0 and below 1"},
           {"--alpha 1.5", "--alpha: \"1.5\" is not a number above 0 and below 1"},
           {"--alpha nan", "--alpha: \"nan\" is not a number above 0 and below 1"},
           {"--format yaml", "--format: \"yaml\" is not one of table, markdown, csv, json, junit"}}) {
    o = dlbench("compare resnet.json resnet.json " + args);
    EXPECT_EQ(o.exit_code, 2) << args;
    EXPECT_THAT(o.err, HasSubstr(message)) << args;
  }
  o = dlbench("compare resnet.json");
  EXPECT_EQ(o.exit_code, 2);
  EXPECT_THAT(o.err, HasSubstr("resnet.json holds 1 run; compare takes two: a baseline file and a candidate file, "
                               "or one file of exactly two runs (the first the baseline)"));
  o = dlbench("compare");
  EXPECT_EQ(o.exit_code, 2);
  EXPECT_THAT(o.err, HasSubstr("compare needs two status files (the baseline, then the candidate), or one of two runs"));
}

// `kubectl get benchmarkruns -o json` without a name prints a List of the runs: report reads each
// item, compare one from a list of one. Another kind of object is named, not read as a status.
TEST_F(CompareCli, ReadsTheListsKubectlPrints) {
  BenchmarkRun tuesday = run_of("tuesday", {measured(one_gpu, 1000)});
  BenchmarkRun wednesday = run_of("wednesday", {measured(one_gpu, 800)});
  const auto list = [](std::vector<BenchmarkRun> runs) {
    nlohmann::json items = nlohmann::json::array();
    for (const auto& r : runs) {
      nlohmann::json item = to_json(r);
      item["apiVersion"] = "dlbench.io/v1alpha1";
      item["kind"] = "BenchmarkRun";
      items.push_back(item);
    }
    return nlohmann::json{{"apiVersion", "v1"}, {"kind", "List"}, {"items", items}, {"metadata", {{"resourceVersion", ""}}}}.dump();
  };
  write("both.json", list({tuesday, wednesday}));
  const Outcome report = dlbench("report both.json --format csv");
  ASSERT_EQ(report.exit_code, 0) << report.err;
  EXPECT_THAT(report.out, HasSubstr("throughput,amp,64,tuesday,1,1,1000.00\n"));
  EXPECT_THAT(report.out, HasSubstr("throughput,amp,64,wednesday,1,1,800.00\n"));
  write("tuesday.json", list({tuesday}));
  write("wednesday.json", list({wednesday}));
  const Outcome o = dlbench("compare tuesday.json wednesday.json");
  EXPECT_EQ(o.exit_code, 1) << o.out << o.err;
  EXPECT_THAT(o.out, HasSubstr("1x1-bs64-amp: slower: -20.0% (p 0.00058)\n"));
  EXPECT_EQ(dlbench("compare both.json wednesday.json").exit_code, 2);
  // One file of two runs, as `kubectl get br tuesday wednesday -o json` prints them: the first is
  // the baseline.
  const Outcome one_file = dlbench("compare both.json");
  EXPECT_EQ(one_file.exit_code, 1) << one_file.err;
  EXPECT_THAT(one_file.out, HasSubstr("compare resnet50: tuesday (both.json, the baseline) against wednesday "
                                      "(both.json)\n"));
  EXPECT_THAT(one_file.out, HasSubstr("1x1-bs64-amp: slower: -20.0% (p 0.00058)\n"));

  write("pod.json", R"({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {}})");
  Outcome refused = dlbench("report pod.json");
  EXPECT_EQ(refused.exit_code, 1);
  EXPECT_THAT(refused.err, HasSubstr("error: pod.json: a Pod, not a BenchmarkRun or a status written by dlbench run"));
  write("none.json", R"({"apiVersion": "v1", "kind": "List", "items": []})");
  refused = dlbench("compare none.json none.json");
  EXPECT_EQ(refused.exit_code, 2);
  EXPECT_THAT(refused.err, HasSubstr("none.json: a list without items"));
  write("odd.json", R"({"kind": "BenchmarkRunList", "items": {"a": 1}})");
  refused = dlbench("report odd.json");
  EXPECT_EQ(refused.exit_code, 1);
  EXPECT_THAT(refused.err, HasSubstr("odd.json: items of a BenchmarkRunList is not a list"));
}

// Two statuses the real `dlbench run` wrote with the real worker: the larger images train slower
// (16x the arithmetic: 4x gave only 4% under the sanitizers' debug build, whose own overhead
// does not grow with the image), which compare calls slower unless the machine's other load made
// either run's figures untrustworthy (disturbed, unstable: on a loaded CI machine the smaller
// images once came out faster); it never calls them unchanged or faster. The spec's one
// difference is listed, and the environment none (one machine).
TEST_F(CompareCli, TwoRunsDlbenchMeasuredCompareByTheirRepeats) {
  const auto spec = [](int image_size) {
    return R"(apiVersion: dlbench.io/v1alpha1
kind: BenchmarkRun
metadata: {name: small}
spec:
  model: resnet50
  data: {imageSize: )" +
           std::to_string(image_size) + R"(}
  matrix: {gpusPerNode: [1], batchSizePerDevice: [1], precision: [fp32]}
  methodology: {warmupSteps: 1, measureSteps: 2, repeats: 4, stability: {maxCv: 0.5, extraRepeats: 0}}
)";
  };
  for (const int size : {32, 128}) {
    write("run" + std::to_string(size) + ".yaml", spec(size));
    const Outcome ran = dlbench("run -f run" + std::to_string(size) + ".yaml --backend cpu --output s" +
                                std::to_string(size) + ".json");
    ASSERT_EQ(ran.exit_code, 0) << ran.out << ran.err;
  }
  const Outcome o = dlbench("compare s32.json s128.json --format json");
  ASSERT_TRUE(o.exit_code == 0 || o.exit_code == 1) << o.out << o.err;
  const auto j = nlohmann::json::parse(o.out);
  ASSERT_EQ(j.at("cases").size(), 1u);
  const auto& c = j.at("cases")[0];
  EXPECT_THAT(c.at("verdict").get<std::string>(), ::testing::AnyOf("slower", "disturbed", "unstable")) << c.dump();
  if (c.at("verdict") == "slower") {
    EXPECT_LT(c.at("change").get<double>(), 0.0) << c.dump();
  }
  EXPECT_EQ(c.at("before").at("repeats").size(), 4u);
  EXPECT_EQ(o.exit_code, c.at("verdict") == "slower" ? 1 : 0);
  ASSERT_EQ(j.at("differences").size(), 1u) << j.at("differences").dump();
  EXPECT_EQ(j.at("differences")[0], nlohmann::json::parse(R"({"field": "spec.data.imageSize", "before": "32",
                                                              "after": "128"})"));
  EXPECT_THAT(dlbench("compare s32.json s128.json").out, Not(HasSubstr("environment.")));
}

}  // namespace
}  // namespace dlbench
