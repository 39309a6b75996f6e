// `deepinfer grammar bench`: compile time and per-token mask time of JSON Schema grammars with
// a real tokenizer. Each valid instance of a schema (jsonschemabench JSONL rows: {"id",
// "schema", "tests": [{"data", "valid"}]}) is serialized in the key order the grammar accepts,
// tokenized, and fed token by token; the mask computation before every token is timed and
// checked to allow that token. The token sequences can be written out so that
// bench/grammar/compare.py measures xgrammar and llguidance on exactly the same input.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

namespace di::cli {

struct grammar_bench_options {
  std::string tokenizer;
  std::string schemas;
  std::string tokens_out;     ///< JSONL of {"id", "schema", "tokens": [[...]...]}; empty: none
  std::size_t limit = 0;      ///< first N schemas (0: all)
  std::size_t max_instances = 4;
  bool lenient = false;
  bool shared_cache = true;   ///< share token classes of equivalent states across schemas
  bool precompute = false;    ///< classify every state at compile time (else on first use)
  /// After a lazy compile, classify states for up to this many ms (part of the compile time),
  /// as the server does before a request starts (grammar_cache::prepare); < 0: not at all.
  double classify_ms = -1;
  bool json = false;          ///< one JSON summary line instead of text
};

/// Adds `bench` under the `grammar` command.
void add_grammar_bench(CLI::App& grammar_cmd);
void run_grammar_bench(const grammar_bench_options& o);

}  // namespace di::cli
