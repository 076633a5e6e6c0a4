#include "validate_command.hpp"

#include <nlohmann/json.hpp>

#include "case_table.hpp"
#include "dlbench/core/api_rules.hpp"
#include "dlbench/core/codec.hpp"
#include "dlbench/core/planner.hpp"
#include "dlbench/core/yaml.hpp"

namespace dlbench::cli {
namespace {

std::string document_label(const std::string& file, std::size_t index, std::size_t count, const nlohmann::json& doc) {
  std::string label = file == "-" ? "<stdin>" : file;
  if (count > 1) label += " document " + std::to_string(index + 1);
  if (doc.is_object() && doc.contains("metadata") && doc["metadata"].is_object() &&
      doc["metadata"].contains("name") && doc["metadata"]["name"].is_string()) {
    label += " (" + doc["metadata"]["name"].get<std::string>() + ")";
  }
  return label;
}

nlohmann::json plan_to_json(const BenchmarkRunSpec& spec, const std::vector<PlannedCase>& plan) {
  nlohmann::json cases = nlohmann::json::array();
  for (const PlannedCase& c : plan) {
    nlohmann::json entry = to_json(c.spec);
    entry["id"] = c.id;
    entry["devices"] = c.spec.devices();
    entry["globalBatchSize"] = c.spec.global_batch_size();
    entry["optimizer"] = to_json(optimizer_for_case(spec, c.spec));
    entry["baseline"] = c.baseline;
    entry["addedAsBaseline"] = c.added_as_baseline;
    cases.push_back(entry);
  }
  return cases;
}

}  // namespace

int run_validate(const ValidateOptions& options, std::ostream& out, std::ostream& err) {
  int exit_code = kExitValid;
  nlohmann::json machine_output = nlohmann::json::array();
  for (const std::string& file : options.files) {
    std::vector<nlohmann::json> documents;
    try {
      documents = load_yaml_file(file);
    } catch (const InputUnreadableError& e) {
      err << "error: " << e.what() << '\n';
      exit_code = kExitUnreadable;
      continue;
    } catch (const YamlSyntaxError& e) {
      err << "error: " << e.what() << '\n';  // what() names the file and the place
      exit_code = kExitUnreadable;
      continue;
    }
    if (documents.empty()) {
      err << "error: " << (file == "-" ? "<stdin>" : file) << " holds no document\n";
      exit_code = kExitUnreadable;
      continue;
    }
    for (std::size_t i = 0; i < documents.size(); ++i) {
      const std::string label = document_label(file, i, documents.size(), documents[i]);
      const auto decoded = decode_benchmark_run(documents[i]);
      if (!decoded.ok()) {
        err << label << ": invalid, " << decoded.errors.size() << (decoded.errors.size() == 1 ? " error" : " errors")
            << '\n';
        for (const auto& e : decoded.errors) err << "  " << e.to_string() << '\n';
        if (exit_code == kExitValid) exit_code = kExitInvalid;
        continue;
      }
      const BenchmarkRun& run = *decoded.value;
      const auto plan = plan_cases(run.spec);
      if (options.format != OutputFormat::table) {
        machine_output.push_back({{"benchmarkRun", to_json(run)}, {"cases", plan_to_json(run.spec, plan)}});
        continue;
      }
      if (options.quiet) continue;
      const auto& m = run.spec.methodology;
      out << label << ": valid\n";
      out << "  model " << to_string(run.spec.model) << ", engine " << to_string(run.spec.engine) << ", "
          << to_string(run.spec.data.source) << " data "
          << (run.spec.model == Model::bert_base
                  ? "of " + std::to_string(sequence_length(run.spec.data)) + "-token sequences"
                  : "at " + std::to_string(run.spec.data.height()) + "x" + std::to_string(run.spec.data.width()))
          << ", optimizer " << describe_optimizer(run.spec) << "\n";
      out << "  methodology: warm-up " << m.warmup_steps << " steps, measure " << m.measure_steps << " steps, "
          << m.repeats << " repeats, report the " << to_string(m.statistic)
          << (run.spec.cuda_graph ? "; each step a replayed CUDA graph (captured after one eager step)" : "") << "\n";
      out << "  stability: repeats may spread by ";
      if (m.stability.max_cv) {
        out << 100.0 * *m.stability.max_cv << "%";
      } else {
        out << 100.0 * kDefaultMaxCvGpu << "% on a GPU, " << 100.0 * kDefaultMaxCvCpu << "% on the CPU";
      }
      out << " (cv); beyond that up to " << m.stability.extra_repeats << " more repeats, then Unstable"
          << (m.stability.include_unstable ? ", counted in best and scaling all the same" : ", left out of best and scaling")
          << "\n";
      if (!decoded.defaults.empty()) {
        out << "  defaults applied:\n";
        for (const auto& d : decoded.defaults) out << "    " << d.path << " = " << d.value.dump() << '\n';
      }
      out << "  " << plan.size() << (plan.size() == 1 ? " case" : " cases")
          << ", run one at a time in this order:\n";
      print_case_table(out, run.spec, plan);
    }
  }
  if (options.format == OutputFormat::json) {
    out << machine_output.dump(2) << '\n';
  } else if (options.format == OutputFormat::yaml) {
    for (const auto& entry : machine_output) out << "---\n" << to_yaml(entry);
  }
  return exit_code;
}

}  // namespace dlbench::cli
