// Helpers for tests: paths to the repository, to ../shared test data, and scratch folders.
#pragma once

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <string_view>
#include <thread>

namespace di::test {

/// The repository root (tests run from any working directory).
inline std::filesystem::path source_dir() { return DI_SOURCE_DIR; }

/// A path under the shared folder beside the checkout (`../shared/<rel>`), or under
/// $DEEPINFER_SHARED_DIR when set. Tests may read it; users never need it.
inline std::filesystem::path shared_path(std::string_view rel) {
  const char* env = std::getenv("DEEPINFER_SHARED_DIR");
  std::filesystem::path base = env ? std::filesystem::path(env) : source_dir().parent_path() / "shared";
  return base / rel;
}

/// A fresh, empty scratch directory removed when the object dies.
class temp_dir {
 public:
  explicit temp_dir(std::string_view tag = "test") {
    std::random_device rd;
    path_ = std::filesystem::temp_directory_path() /
            ("deepinfer-" + std::string(tag) + "-" + std::to_string(rd()) + std::to_string(rd()));
    std::filesystem::create_directories(path_);
  }
  ~temp_dir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(std::string_view name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

/// Writes `bytes` to `path` (binary), replacing the file.
inline void write_file(const std::filesystem::path& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
}

/// Polls `done` every 10 ms for up to `seconds`; whether it came true. For what another thread
/// or actor does after the reply a test waits on (an abort heard, a slot given back).
template <class F>
bool eventually(F&& done, double seconds = 5) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (!done()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

/// An EBNF grammar that compiles slowly when nothing stops it (20 rules of `[aA]*` then 3,600
/// `[aA]`: 13-18 s on a 2-core machine): for tests of the compile limit and its cancellation.
inline std::string slow_ebnf_grammar() {
  std::string grammar = "root ::=";
  for (int i = 0; i < 20; ++i) grammar += " r" + std::to_string(i);
  for (int i = 0; i < 20; ++i) {
    grammar += "\nr" + std::to_string(i) + " ::= [aA]*";
    for (int k = 0; k < 3600; ++k) grammar += " [aA]";
    grammar += " \"" + std::to_string(i % 10) + "\"";
  }
  return grammar;
}

}  // namespace di::test
