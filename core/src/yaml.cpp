#include "dlbench/core/yaml.hpp"

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <optional>
#include <sstream>

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/exceptions.h>
#include <yaml-cpp/parser.h>
#include <yaml-cpp/yaml.h>

#include "dlbench/core/names.hpp"

namespace dlbench {
namespace {

using nlohmann::json;

std::string position(const YAML::Mark& mark) {
  return "line " + std::to_string(mark.line + 1) + ", column " + std::to_string(mark.column + 1);
}

bool all_of(std::string_view text, bool (*accept)(char)) {
  if (text.empty()) return false;
  for (const char c : text) {
    if (!accept(c)) return false;
  }
  return true;
}
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_bin_digit(char c) { return c == '0' || c == '1'; }
bool is_oct_digit(char c) { return c >= '0' && c <= '7'; }
bool is_hex_digit(char c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

// Go's strconv.ParseInt/ParseUint(text, 0, 64): an optional sign, then 0x/0o/0b, a leading 0
// (octal) or decimal digits. Nothing when it does not parse or does not fit.
std::optional<json> go_parse_int(std::string_view text) {
  bool negative = false;
  if (!text.empty() && (text.front() == '+' || text.front() == '-')) {
    negative = text.front() == '-';
    text.remove_prefix(1);
  }
  int base = 10;
  bool (*digit)(char) = is_digit;
  if (text.size() > 2 && text[0] == '0' && (text[1] == 'x' || text[1] == 'X')) {
    base = 16, digit = is_hex_digit, text.remove_prefix(2);
  } else if (text.size() > 2 && text[0] == '0' && (text[1] == 'o' || text[1] == 'O')) {
    base = 8, digit = is_oct_digit, text.remove_prefix(2);
  } else if (text.size() > 2 && text[0] == '0' && (text[1] == 'b' || text[1] == 'B')) {
    base = 2, digit = is_bin_digit, text.remove_prefix(2);
  } else if (text.size() > 1 && text[0] == '0') {
    base = 8, digit = is_oct_digit, text.remove_prefix(1);
  }
  if (!all_of(text, digit)) return std::nullopt;
  std::uint64_t magnitude = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), magnitude, base);
  if (error != std::errc{} || end != text.data() + text.size()) return std::nullopt;
  constexpr auto kMax = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
  if (!negative) return magnitude <= kMax ? json(static_cast<std::int64_t>(magnitude)) : json(magnitude);
  if (magnitude <= kMax + 1) return json(static_cast<std::int64_t>(0 - magnitude));
  return std::nullopt;
}

// go-yaml v2's float syntax: [-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?
bool is_yaml_float(std::string_view t) {
  std::size_t i = 0;
  if (i < t.size() && (t[i] == '+' || t[i] == '-')) ++i;
  const std::size_t int_start = i;
  while (i < t.size() && is_digit(t[i])) ++i;
  const bool int_digits = i > int_start;
  if (i < t.size() && t[i] == '.') {
    ++i;
    const std::size_t frac_start = i;
    while (i < t.size() && is_digit(t[i])) ++i;
    if (!int_digits && i == frac_start) return false;
  } else if (!int_digits) {
    return false;
  }
  if (i < t.size() && (t[i] == 'e' || t[i] == 'E')) {
    ++i;
    if (i < t.size() && (t[i] == '+' || t[i] == '-')) ++i;
    const std::size_t exp_start = i;
    while (i < t.size() && is_digit(t[i])) ++i;
    if (i == exp_start) return false;
  }
  return i == t.size();
}

// A finite double, or nothing when out of range (Go's ParseFloat fails there too).
std::optional<double> parse_finite(const std::string& text) {
  errno = 0;
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  if (end != text.c_str() + text.size() || errno == ERANGE || !std::isfinite(value)) {
    // Underflow to a tiny or zero value is not an error in Go: keep it.
    if (end == text.c_str() + text.size() && errno == ERANGE && std::fabs(value) < 1.0) return value;
    return std::nullopt;
  }
  return value;
}

// A plain (unquoted) scalar as kubectl resolves it: go-yaml v2, YAML 1.1.
json resolve_plain_scalar(const std::string& text) {
  static const std::map<std::string, json, std::less<>> fixed = [] {
    std::map<std::string, json, std::less<>> m;
    for (const char* t : {"y", "Y", "yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON"}) m[t] = true;
    for (const char* f : {"n", "N", "no", "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF"}) m[f] = false;
    for (const char* n : {"", "~", "null", "Null", "NULL"}) m[n] = nullptr;
    for (const char* n : {".nan", ".NaN", ".NAN"}) m[n] = std::numeric_limits<double>::quiet_NaN();
    for (const char* i : {".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF"}) m[i] = std::numeric_limits<double>::infinity();
    for (const char* i : {"-.inf", "-.Inf", "-.INF"}) m[i] = -std::numeric_limits<double>::infinity();
    return m;
  }();
  if (const auto it = fixed.find(text); it != fixed.end()) return it->second;
  if (text.empty()) return text;
  const char first = text.front();
  if (first == '.') {
    if (is_yaml_float(text)) {
      if (const auto value = parse_finite(text)) return *value;
    }
    return text;
  }
  if (!is_digit(first) && first != '+' && first != '-') return text;
  // Timestamps (2006-01-02...) stay strings when read into untyped values, as kubectl keeps them.
  std::string plain;
  for (const char c : text) {
    if (c != '_') plain += c;
  }
  if (auto integer = go_parse_int(plain)) return *integer;  // 0b… and -0b… included
  if (is_yaml_float(plain)) {
    if (const auto value = parse_finite(plain)) return *value;
  }
  return text;
}

json resolve_scalar(const std::string& tag, const std::string& value, const YAML::Mark& mark) {
  if (tag == "?" || tag.empty()) return resolve_plain_scalar(value);
  if (tag == "!" || tag == "tag:yaml.org,2002:str") return value;  // quoted, block, or !!str
  if (tag == "tag:yaml.org,2002:null" || tag == "tag:yaml.org,2002:bool" || tag == "tag:yaml.org,2002:int" ||
      tag == "tag:yaml.org,2002:float") {
    json resolved = resolve_plain_scalar(value);
    const bool fits = (tag.ends_with("null") && resolved.is_null()) || (tag.ends_with("bool") && resolved.is_boolean()) ||
                      (tag.ends_with("int") && resolved.is_number_integer()) ||
                      (tag.ends_with("float") && resolved.is_number());
    if (fits) return resolved;
    throw YamlSyntaxError(position(mark) + ": \"" + printable(value) + "\" cannot be read as " + tag);
  }
  throw YamlSyntaxError(position(mark) + ": unsupported tag \"" + printable(tag) + "\"");
}

// kubectl turns non-string keys into their text.
std::string key_text(const json& key) {
  if (key.is_string()) return key.get<std::string>();
  if (key.is_null()) return "null";
  return key.dump();
}

// Builds JSON from yaml-cpp's parser events, within the depth and node limits, expanding
// aliases by copy (each copy counted) and honouring `<<` merge keys as kubectl does.
class JsonBuilder : public YAML::EventHandler {
 public:
  std::optional<json> document;

  void OnDocumentStart(const YAML::Mark&) override {
    document.reset();
    nodes_ = 0;
    anchors_.clear();
  }
  void OnDocumentEnd() override {}

  void OnNull(const YAML::Mark& mark, YAML::anchor_t anchor) override { add(nullptr, mark, anchor); }

  void OnAlias(const YAML::Mark& mark, YAML::anchor_t anchor) override {
    const auto it = anchors_.find(anchor);
    if (it == anchors_.end()) {
      throw YamlSyntaxError(position(mark) + ": alias to an anchor that encloses it (a cycle) or is undefined");
    }
    count(it->second.second, mark);
    place(json(it->second.first), mark);
  }

  void OnScalar(const YAML::Mark& mark, const std::string& tag, YAML::anchor_t anchor, const std::string& value) override {
    const bool merge_key = tag == "?" && value == "<<" && !stack_.empty() && stack_.back().value.is_object() &&
                           !stack_.back().key;
    if (merge_key) {
      count(1, mark);
      stack_.back().key = "<<";
      stack_.back().merging = true;
      return;
    }
    add(resolve_scalar(tag, value, mark), mark, anchor);
  }

  void OnSequenceStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor, YAML::EmitterStyle::value) override {
    open(json::array(), mark, anchor);
  }
  void OnSequenceEnd() override { close(); }
  void OnMapStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor, YAML::EmitterStyle::value) override {
    open(json::object(), mark, anchor);
  }
  void OnMapEnd() override {
    Frame& frame = stack_.back();
    // Explicit keys win over merged ones, whatever their order.
    for (auto& merged : frame.merged) {
      for (auto& [key, value] : merged.items()) {
        if (!frame.value.contains(key)) frame.value[key] = value;
      }
    }
    close();
  }

 private:
  struct Frame {
    json value;
    YAML::anchor_t anchor = 0;
    std::size_t first_node = 0;  // nodes_ when it opened: its size for alias accounting
    YAML::Mark mark;
    std::optional<std::string> key;  // a map waiting for the value of this key
    bool merging = false;
    std::vector<json> merged;
  };

  void count(std::size_t n, const YAML::Mark& mark) {
    nodes_ += n;
    if (nodes_ > kMaxNodes) {
      throw YamlSyntaxError(position(mark) + ": more than " + std::to_string(kMaxNodes) +
                            " values in one document (aliases expanded); refused as an alias bomb or oversized input");
    }
  }

  void open(json container, const YAML::Mark& mark, YAML::anchor_t anchor) {
    if (stack_.size() >= kMaxNestingDepth) {
      throw YamlSyntaxError(position(mark) + ": nested deeper than " + std::to_string(kMaxNestingDepth) + " levels");
    }
    count(1, mark);
    Frame frame;
    frame.value = std::move(container);
    frame.anchor = anchor;
    frame.first_node = nodes_ - 1;
    frame.mark = mark;
    stack_.push_back(std::move(frame));
  }

  void close() {
    Frame frame = std::move(stack_.back());
    stack_.pop_back();
    const std::size_t size = nodes_ - frame.first_node;
    if (frame.anchor != 0) anchors_[frame.anchor] = {frame.value, size};
    place(std::move(frame.value), frame.mark);
  }

  void add(json value, const YAML::Mark& mark, YAML::anchor_t anchor) {
    count(1, mark);
    if (anchor != 0) anchors_[anchor] = {value, 1};
    place(std::move(value), mark);
  }

  // Puts a finished value where it belongs: the document, a list, a map's key or its value.
  void place(json value, const YAML::Mark& mark) {
    if (stack_.empty()) {
      document = std::move(value);
      return;
    }
    Frame& parent = stack_.back();
    if (parent.value.is_array()) {
      parent.value.push_back(std::move(value));
      return;
    }
    if (!parent.key) {
      if (value.is_object() || value.is_array()) {
        throw YamlSyntaxError(position(mark) + ": mapping keys must be scalars");
      }
      parent.key = key_text(value);
      return;
    }
    if (parent.merging) {
      if (!value.is_object() && !value.is_array()) throw YamlSyntaxError(position(mark) + ": a << merge key needs a map or a list of maps");
      if (value.is_object()) {
        parent.merged.push_back(std::move(value));
      } else {
        for (auto& item : value) {
          if (!item.is_object()) throw YamlSyntaxError(position(mark) + ": a << merge list must hold maps only");
          parent.merged.push_back(std::move(item));
        }
      }
      parent.merging = false;
    } else {
      parent.value[*parent.key] = std::move(value);  // a repeated key: the last one wins, as in kubectl
    }
    parent.key.reset();
  }

  std::vector<Frame> stack_;
  std::map<YAML::anchor_t, std::pair<json, std::size_t>> anchors_;  // value and its node count
  std::size_t nodes_ = 0;
};

void emit(YAML::Emitter& out, const json& value) {
  switch (value.type()) {
    case json::value_t::object:
      out << YAML::BeginMap;
      for (const auto& [key, item] : value.items()) {
        out << YAML::Key;
        if (!resolve_plain_scalar(key).is_string()) {
          out << YAML::DoubleQuoted << key;  // `n`, `on`, `1` would read back as other keys
        } else {
          out << key;
        }
        out << YAML::Value;
        emit(out, item);
      }
      out << YAML::EndMap;
      break;
    case json::value_t::array:
      out << YAML::BeginSeq;
      for (const auto& item : value) emit(out, item);
      out << YAML::EndSeq;
      break;
    case json::value_t::string: {
      const auto& text = value.get_ref<const std::string&>();
      // Quote strings that would read back as another type.
      if (!resolve_plain_scalar(text).is_string()) {
        out << YAML::DoubleQuoted << text;
      } else {
        out << text;
      }
      break;
    }
    case json::value_t::null: out << YAML::Null; break;
    default: out << value.dump(); break;
  }
}

// Line and column of a byte offset, for messages about the raw text.
std::string text_position(std::string_view text, std::size_t offset) {
  std::size_t line = 1, column = 1;
  for (std::size_t i = 0; i < offset && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
  }
  return "line " + std::to_string(line) + ", column " + std::to_string(column);
}

}  // namespace

std::vector<json> parse_yaml_documents(std::string_view text) {
  if (std::size_t bad = 0; !is_valid_utf8(text, &bad)) {
    throw YamlSyntaxError(text_position(text, bad) + ": not UTF-8 text (byte " + printable(text.substr(bad, 1)) +
                          " at offset " + std::to_string(bad) + "; binary data?)");
  }
  if (const auto nul = text.find('\0'); nul != std::string_view::npos) {
    throw YamlSyntaxError(text_position(text, nul) + ": a NUL character; YAML text cannot contain one");
  }
  std::vector<json> documents;
  try {
    std::istringstream stream{std::string(text)};
    YAML::Parser parser(stream);
    JsonBuilder builder;
    while (parser.HandleNextDocument(builder)) {
      if (builder.document && !builder.document->is_null()) documents.push_back(std::move(*builder.document));
      builder.document.reset();
    }
  } catch (const YAML::Exception& e) {
    throw YamlSyntaxError("line " + std::to_string(e.mark.line + 1) + ", column " + std::to_string(e.mark.column + 1) +
                          ": " + e.msg);
  }
  return documents;
}

std::string read_input_file(const std::string& file, std::size_t max_bytes) {
  const bool standard_input = file == "-";
  const std::string path = standard_input ? "<stdin>" : file;  // as messages name it
  std::FILE* input = standard_input ? stdin : std::fopen(file.c_str(), "rb");
  if (input == nullptr) throw InputUnreadableError("cannot open " + path + ": " + std::strerror(errno));
  std::string text;
  char buffer[1 << 16];
  bool too_large = false;
  for (;;) {
    const std::size_t n = std::fread(buffer, 1, sizeof buffer, input);
    if (n == 0) break;
    if (text.size() + n > max_bytes) {
      too_large = true;
      break;
    }
    text.append(buffer, n);
  }
  const bool failed = std::ferror(input) != 0;
  const int error = errno;
  if (!standard_input) std::fclose(input);
  if (too_large) {
    throw InputUnreadableError(path + ": larger than " + std::to_string(max_bytes >> 20) + " MiB; refused");
  }
  if (failed) throw InputUnreadableError("cannot read " + path + ": " + std::strerror(error));
  return text;
}

std::vector<json> load_yaml_file(const std::string& path) {
  const std::string text = read_input_file(path);
  try {
    return parse_yaml_documents(text);
  } catch (const YamlSyntaxError& e) {
    throw YamlSyntaxError((path == "-" ? std::string("<stdin>") : path) + ": not valid YAML: " + e.what());
  }
}

std::string to_yaml(const json& value) {
  YAML::Emitter out;
  emit(out, value);
  return std::string(out.c_str()) + "\n";
}

}  // namespace dlbench
