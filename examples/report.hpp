// SPDX-License-Identifier: MIT
// Small text helpers shared by the examples and the command-line tool: grouped integers and
// Markdown tables. Display only; no formula lives here.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

namespace vramfit::report {

/// 8030261248 -> "8,030,261,248".
inline std::string grouped(std::int64_t n) {
  const std::string digits = std::to_string(n < 0 ? -n : n);
  std::string out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return n < 0 ? "-" + out : out;
}

/// A Markdown table; columns after the first are right-aligned (they hold numbers).
class table {
 public:
  explicit table(std::vector<std::string> header) : header_(std::move(header)) {}
  void add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }

  friend std::ostream& operator<<(std::ostream& out, const table& t) {
    auto line = [&out](const std::vector<std::string>& cells) {
      out << "|";
      for (const std::string& cell : cells) out << " " << cell << " |";
      out << "\n";
    };
    line(t.header_);
    out << "|---|";
    for (std::size_t i = 1; i < t.header_.size(); ++i) out << "---:|";
    out << "\n";
    for (const auto& row : t.rows_) line(row);
    return out;
  }

 private:
  std::vector<std::string> header_;
  std::vector<std::vector<std::string>> rows_;
};

/// The blocks an example or a validation program prints into its hand-written page
/// (cmake/docs.cmake puts each between the page's markers of its name). A blank line ends each, so
/// that no table runs into the marker.
class page_blocks {
 public:
  page_blocks(std::ostream& out, std::string source) : out_(out), source_(std::move(source)) {}
  template <class Body>
  void print(const char* name, const Body& body) const {
    out_ << "<!-- output: " << source_ << "#" << name << " -->\n"
         << body << "\n<!-- end output -->\n";
  }

 private:
  std::ostream& out_;
  std::string source_;
};

/// A ledger as a Markdown table: every entry with where it lives, when, its bytes and source.
template <class Ledger>
table ledger_table(const Ledger& ledger) {
  table t({"entry", "component", "where", "phase", "bytes", "source"});
  const char* where[] = {"device", "host", "nvme"};
  for (const auto& e : ledger)
    t.add({e.name, to_string(e.component), where[static_cast<int>(e.space)], to_string(e.lifetime),
           grouped(e.size.count) + " (" + to_string(e.size) + ")", e.source});
  return t;
}

}  // namespace vramfit::report
