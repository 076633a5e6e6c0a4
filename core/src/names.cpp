#include "dlbench/core/names.hpp"

#include <cstdint>
#include <cstdio>

namespace dlbench {
namespace {

bool is_alnum(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'); }
bool is_lower_alnum(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }

// [A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?
bool is_name_part(std::string_view text) {
  if (text.empty() || text.size() > 63 || !is_alnum(text.front()) || !is_alnum(text.back())) return false;
  for (const char c : text) {
    if (!is_alnum(c) && c != '-' && c != '_' && c != '.') return false;
  }
  return true;
}

void append_hex_escape(std::string& out, unsigned char byte) {
  char escaped[8];
  std::snprintf(escaped, sizeof escaped, "\\x%02x", byte);
  out += escaped;
}

}  // namespace

bool is_dns1123_label(std::string_view text) {
  if (text.empty() || text.size() > 63 || !is_lower_alnum(text.front()) || !is_lower_alnum(text.back())) return false;
  for (const char c : text) {
    if (!is_lower_alnum(c) && c != '-') return false;
  }
  return true;
}

bool is_dns1123_subdomain(std::string_view text) {
  if (text.empty() || text.size() > 253) return false;
  for (std::size_t start = 0;;) {
    const std::size_t dot = text.find('.', start);
    if (!is_dns1123_label(text.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start))) {
      return false;
    }
    if (dot == std::string_view::npos) return true;
    start = dot + 1;
  }
}

bool has_no_backsteps(std::string_view path) {
  for (std::size_t start = 0; start <= path.size();) {
    std::size_t slash = path.find('/', start);
    if (slash == std::string_view::npos) slash = path.size();
    if (path.substr(start, slash - start) == "..") return false;
    start = slash + 1;
  }
  return true;
}

bool is_resource_quantity(std::string_view text) {
  std::size_t i = 0;
  const auto digits = [&] {
    const std::size_t from = i;
    while (i < text.size() && text[i] >= '0' && text[i] <= '9') ++i;
    return i > from;
  };
  if (!digits()) return false;
  if (i < text.size() && text[i] == '.') {
    ++i;
    if (!digits()) return false;
  }
  const std::string_view suffix = text.substr(i);
  for (std::string_view allowed : {"", "m", "k", "M", "G", "T", "P", "E", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"}) {
    if (suffix == allowed) return true;
  }
  return false;
}

bool is_compute_resource_name(std::string_view text) {
  if (text == "cpu" || text == "memory" || text == "ephemeral-storage") return true;
  if (!text.starts_with("hugepages-")) return false;
  const std::string_view size = text.substr(10);
  return is_resource_quantity(size) && (size.ends_with("Ki") || size.ends_with("Mi") || size.ends_with("Gi"));
}

bool is_data_mount_path(std::string_view path) {
  if (path.size() < 2 || path.front() != '/' || !has_no_backsteps(path)) return false;
  if (path.find('\0') != std::string_view::npos) return false;
  return !(path.starts_with("/dlbench") && (path.size() == 8 || path[8] == '/'));
}

bool is_qualified_name(std::string_view text) {
  const std::size_t slash = text.find('/');
  if (slash == std::string_view::npos) return is_name_part(text);
  return is_dns1123_subdomain(text.substr(0, slash)) && is_name_part(text.substr(slash + 1));
}

bool is_label_value(std::string_view text) { return text.empty() || is_name_part(text); }

bool is_extended_resource_name(std::string_view text) {
  // Kubernetes: a qualified name with a prefix that is not kubernetes.io (those are native).
  const std::size_t slash = text.find('/');
  if (slash == std::string_view::npos || !is_qualified_name(text)) return false;
  const std::string_view domain = text.substr(0, slash);
  return domain != "kubernetes.io" && !domain.ends_with(".kubernetes.io");
}

bool is_env_var_name(std::string_view text) {
  if (text.empty() || (text.front() >= '0' && text.front() <= '9')) return false;
  for (const char c : text) {
    if (!is_alnum(c) && c != '-' && c != '_' && c != '.') return false;
  }
  return true;
}

bool is_valid_utf8(std::string_view text, std::size_t* offset) {
  const auto* bytes = reinterpret_cast<const unsigned char*>(text.data());
  const std::size_t n = text.size();
  for (std::size_t i = 0; i < n;) {
    const unsigned char b = bytes[i];
    std::size_t length = 0;
    std::uint32_t min = 0, code = 0;
    if (b < 0x80) {
      ++i;
      continue;
    } else if ((b & 0xE0) == 0xC0) {
      length = 2, min = 0x80, code = b & 0x1Fu;
    } else if ((b & 0xF0) == 0xE0) {
      length = 3, min = 0x800, code = b & 0x0Fu;
    } else if ((b & 0xF8) == 0xF0) {
      length = 4, min = 0x10000, code = b & 0x07u;
    }
    bool ok = length != 0 && i + length <= n;
    for (std::size_t k = 1; ok && k < length; ++k) {
      ok = (bytes[i + k] & 0xC0) == 0x80;
      code = (code << 6) | (bytes[i + k] & 0x3Fu);
    }
    if (!ok || code < min || code > 0x10FFFF || (code >= 0xD800 && code <= 0xDFFF)) {
      if (offset != nullptr) *offset = i;
      return false;
    }
    i += length;
  }
  return true;
}

std::string printable(std::string_view text, std::size_t max_chars) {
  std::string out;
  std::size_t chars = 0;
  for (std::size_t i = 0; i < text.size(); ++chars) {
    if (chars == max_chars) {
      out += "...";
      break;
    }
    const auto b = static_cast<unsigned char>(text[i]);
    const std::size_t length = b < 0x80 ? 1 : (b & 0xE0) == 0xC0 ? 2 : (b & 0xF0) == 0xE0 ? 3 : (b & 0xF8) == 0xF0 ? 4 : 0;
    if (b >= 0x80 && (length == 0 || i + length > text.size() || !is_valid_utf8(text.substr(i, length)))) {
      append_hex_escape(out, b);
      ++i;
      continue;
    }
    if (b < 0x20 || b == 0x7F) {
      if (b == '\n') {
        out += "\\n";
      } else if (b == '\t') {
        out += "\\t";
      } else if (b == '\r') {
        out += "\\r";
      } else {
        append_hex_escape(out, b);
      }
      ++i;
      continue;
    }
    out.append(text.substr(i, length));
    i += length;
  }
  return out;
}

}  // namespace dlbench
