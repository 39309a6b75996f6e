// Shared pieces of the conformance runs over ../shared/testdata: JSONL reading, a tally of
// passed/failed cases with the first failures kept for the report, and the optional JSON
// report file (DI_GRAMMAR_REPORT_DIR) that bench/grammar/conformance_report.py tabulates.
#pragma once

#include "tests/test_support.hpp"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

namespace di::grammar::test {

inline std::vector<nlohmann::json> read_jsonl(const std::filesystem::path& path) {
  std::vector<nlohmann::json> rows;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) rows.push_back(nlohmann::json::parse(line));
  return rows;
}

inline std::vector<nlohmann::ordered_json> read_jsonl_ordered(const std::filesystem::path& path) {
  std::vector<nlohmann::ordered_json> rows;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) rows.push_back(nlohmann::ordered_json::parse(line));
  return rows;
}

struct tally {
  std::string name;
  std::size_t passed = 0;
  std::size_t total = 0;
  std::vector<std::string> failures;  // the first few, for the report

  void record(bool ok, const std::string& what) {
    ++total;
    if (ok) {
      ++passed;
    } else if (failures.size() < 20) {
      failures.push_back(what);
    }
  }
  double rate() const { return total ? double(passed) / double(total) : 1.0; }
  nlohmann::json to_json() const {
    return {{"name", name}, {"passed", passed}, {"total", total}, {"failures", failures}};
  }
  void print() const {
    MESSAGE(name << ": " << passed << "/" << total);
    for (const auto& f : failures) MESSAGE("  FAIL " << f);
  }
};

/// Writes `tallies` to $DI_GRAMMAR_REPORT_DIR/<file> when that variable is set.
inline void write_report(const std::string& file, const std::vector<tally>& tallies,
                         const nlohmann::json& extra = nlohmann::json::object()) {
  const char* dir = std::getenv("DI_GRAMMAR_REPORT_DIR");
  if (!dir) return;
  nlohmann::json j = extra;
  j["tallies"] = nlohmann::json::array();
  for (const auto& t : tallies) j["tallies"].push_back(t.to_json());
  std::ofstream(std::filesystem::path(dir) / file) << j.dump(2) << "\n";
}

}  // namespace di::grammar::test
