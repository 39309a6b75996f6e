// Single-thread encode throughput of the DeepSeek tokenizer on a JSON-lines corpus. Each
// repetition loads a fresh tokenizer (untimed, so the word cache starts cold) and encodes every
// document once; prints MB/s per repetition, writes the ids for comparison with HF and a JSON
// summary.
// Usage: bench_tokenizer --tokenizer DIR --corpus FILE [--repeat N] [--pcre2]
//                        [--ids-out FILE] [--json-out FILE]
#include "common/mapped_file.hpp"
#include "model/tokenizer/tokenizer.hpp"

#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <sstream>

namespace {

struct bench_args {
  std::string tokenizer_dir;
  std::string corpus;
  int repeat = 5;
  bool pcre2 = false;
  std::string ids_out;
  std::string json_out;
};

std::vector<std::string> read_corpus(const std::string& path) {
  std::vector<std::string> docs;
  std::istringstream in(di::read_text_file(path));
  std::string line;
  while (std::getline(in, line)) docs.push_back(nlohmann::json::parse(line).at("text"));
  return docs;
}

// Per document: the id count as uint32, then the ids as int32 (read by hf_bench.py).
void write_ids(const std::string& path, const std::vector<std::vector<di::tok::token_id>>& ids) {
  std::ofstream out(path, std::ios::binary);
  for (const auto& doc : ids) {
    auto n = std::uint32_t(doc.size());
    out.write(reinterpret_cast<const char*>(&n), 4);
    out.write(reinterpret_cast<const char*>(doc.data()), std::streamsize(doc.size() * 4));
  }
}

int run(const bench_args& args) {
  auto docs = read_corpus(args.corpus);
  std::size_t num_bytes = 0;
  for (const auto& d : docs) num_bytes += d.size();
  std::vector<std::vector<di::tok::token_id>> ids(docs.size());
  std::vector<double> mb_per_s;
  std::vector<double> cpu_mb_per_s;  // by process CPU time: robust to other processes' load
  std::size_t num_tokens = 0;
  for (int r = 0; r < args.repeat; ++r) {
    auto tok =
        di::tok::tokenizer::from_dir(args.tokenizer_dir, {.allow_fast_pre_tokenizer = !args.pcre2});
    num_tokens = 0;
    std::clock_t cpu_start = std::clock();
    auto start = std::chrono::steady_clock::now();
    for (std::size_t i = 0; i < docs.size(); ++i) {
      ids[i].clear();
      tok.encode_into(docs[i], ids[i]);
      num_tokens += ids[i].size();
    }
    double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    double cpu_seconds = double(std::clock() - cpu_start) / CLOCKS_PER_SEC;
    mb_per_s.push_back(double(num_bytes) / 1e6 / seconds);
    cpu_mb_per_s.push_back(double(num_bytes) / 1e6 / cpu_seconds);
    fmt::print("deepinfer{} rep {}: {:.2f} MB/s ({:.3f} s wall, {:.3f} s cpu)\n",
               args.pcre2 ? "-pcre2" : "", r, mb_per_s.back(), seconds, cpu_seconds);
  }
  std::vector<double> sorted = mb_per_s;
  std::sort(sorted.begin(), sorted.end());
  nlohmann::json summary = {{"engine", args.pcre2 ? "deepinfer-pcre2" : "deepinfer"},
                            {"documents", docs.size()},
                            {"bytes", num_bytes},
                            {"tokens", num_tokens},
                            {"mb_per_s", mb_per_s},
                            {"cpu_mb_per_s", cpu_mb_per_s},
                            {"best_mb_per_s", sorted.back()},
                            {"median_mb_per_s", sorted[sorted.size() / 2]}};
  fmt::print("{}\n", summary.dump());
  if (!args.ids_out.empty()) write_ids(args.ids_out, ids);
  if (!args.json_out.empty()) std::ofstream(args.json_out) << summary.dump(2) << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Single-thread encode throughput of the DeepSeek tokenizer", "bench_tokenizer"};
  bench_args args;
  app.add_option("--tokenizer", args.tokenizer_dir, "Folder with tokenizer.json")->required();
  app.add_option("--corpus", args.corpus, "JSON lines with a \"text\" field")->required();
  app.add_option("--repeat", args.repeat, "Timed passes over the corpus")
      ->check(CLI::PositiveNumber);
  app.add_flag("--pcre2", args.pcre2, "Force the PCRE2 pre-tokenizer");
  app.add_option("--ids-out", args.ids_out, "Write the ids of the last pass here");
  app.add_option("--json-out", args.json_out, "Write the summary here");
  CLI11_PARSE(app, argc, argv);
  try {
    return run(args);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
