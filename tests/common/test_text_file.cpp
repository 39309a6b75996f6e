// read_text_file: whole files, and a cap that stops a runaway one (a config.json linked to
// /dev/zero grew the process to 17 GB before it failed).
#include "common/error.hpp"
#include "common/mapped_file.hpp"

#include <doctest/doctest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

TEST_CASE("read_text_file reads a whole file and stops at its cap") {
  const std::filesystem::path path =
      std::filesystem::temp_directory_path() / "di_test_text_file.txt";
  const std::string text = std::string(3 << 20, 'a') + "end";  // over one 1 MiB piece
  std::ofstream(path) << text;
  CHECK(di::read_text_file(path.string()) == text);
  CHECK_THROWS_WITH_AS(di::read_text_file(path.string(), std::size_t(2) << 20),
                       doctest::Contains("larger than 2 MiB"), di::error);
  CHECK_THROWS_WITH_AS(di::read_text_file("/dev/zero", std::size_t(4) << 20),
                       doctest::Contains("/dev/zero: larger than 4 MiB"), di::error);
  std::filesystem::remove(path);
}
