// libFuzzer target for the safetensors header parser. Each input is parsed twice: as a raw file,
// and as a recipe for a well-formed-looking file (small offsets, shapes and repeated names) so
// that the semantic checks (sizes, overlaps, duplicates) are reached far more often than random
// JSON reaches them. Either parse must succeed with every promised invariant or throw di::error;
// another exception, a sanitizer report or a broken invariant is a bug.
#include "common/error.hpp"
#include "model/checkpoint/safetensors.hpp"

#include <fmt/format.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace {

// What a successful parse promises about `h` for a file of `file_size` bytes.
bool holds_invariants(const di::safetensors_header& h, std::size_t file_size) {
  if (h.data_offset < 8 || h.data_offset > file_size) return false;
  const std::uint64_t data_size = file_size - h.data_offset;
  for (std::size_t i = 0; i < h.tensors.size(); ++i) {
    const di::tensor_entry& t = h.tensors[i];
    if (i > 0 && !(h.tensors[i - 1].name < t.name)) return false;  // sorted and unique
    if (t.begin > t.end || t.end > data_size) return false;
    auto bytes = di::checked_byte_size(t.shape, di::dtype_size(t.type));
    if (!bytes || *bytes != t.end - t.begin) return false;
    for (std::size_t j = 0; j < i; ++j) {  // no shared byte (inputs are small)
      const di::tensor_entry& u = h.tensors[j];
      bool disjoint = t.begin == t.end || u.begin == u.end || t.end <= u.begin || u.end <= t.begin;
      if (!disjoint) return false;
    }
  }
  return true;
}

// Reads the fuzz input one byte at a time; zeros once it runs out.
class byte_reader {
 public:
  explicit byte_reader(std::span<const std::uint8_t> bytes) : bytes_(bytes) {}
  std::uint8_t next() { return pos_ < bytes_.size() ? bytes_[pos_++] : 0; }

 private:
  std::span<const std::uint8_t> bytes_;
  std::size_t pos_ = 0;
};

// One header entry from 5-6 recipe bytes: name, dtype, shape flags and dims, offsets.
std::string recipe_entry(byte_reader& in) {
  static constexpr const char* dtypes[] = {"BF16", "F16", "F32",    "F8_E4M3", "F8_E8M0",
                                           "I8",   "I32", "I64",    "U8",      "BOOL",
                                           "F64",  "I16", "F8_E5M2"};
  static constexpr std::size_t sizes[] = {2, 2, 4, 1, 1, 1, 4, 8, 1, 1, 8, 2, 1};
  char name = char('a' + in.next() % 5);
  std::size_t type = in.next() % 13;
  std::uint8_t flags = in.next();
  std::int64_t dims[2] = {in.next() % 8, in.next() % 8};
  if (flags & 0x80) dims[0] = -dims[0] - 1;
  int rank = flags % 3;
  std::int64_t elements = 1;
  std::string shape;
  for (int d = 0; d < rank; ++d) {
    shape += fmt::format("{}{}", d ? "," : "", dims[d]);
    elements *= dims[d];
  }
  std::int64_t begin = in.next();
  std::int64_t end =
      (flags & 0x40) ? std::int64_t(in.next()) : begin + elements * std::int64_t(sizes[type]);
  return fmt::format(R"("{}":{{"dtype":"{}","shape":[{}],"data_offsets":[{},{}]}})", name,
                     dtypes[type], shape, begin, end);
}

// A file built from a recipe, and how many tensor entries its header holds.
struct recipe_result {
  std::string file;
  int num_entries = 0;
};

// A whole file from the recipe: length prefix, header with up to 7 entries, zeroed data.
recipe_result recipe_file(std::span<const std::uint8_t> recipe) {
  byte_reader in(recipe);
  std::uint8_t head = in.next();
  std::size_t data_size = in.next();
  std::string header = "{";
  if (head & 0x80)
    header += (head & 0x40) ? R"("__metadata__":{"k":1},)" : R"("__metadata__":{"format":"pt"},)";
  const int num_entries = head % 8;
  for (int i = 0; i < num_entries; ++i) header += (i ? "," : "") + recipe_entry(in);
  header += "}";
  std::string file(8, '\0');
  for (int i = 0; i < 8; ++i) file[i] = char((std::uint64_t(header.size()) >> (8 * i)) & 0xff);
  return {file + header + std::string(data_size, '\0'), num_entries};
}

// Parses `file`; a header that parses must keep every invariant and, when the number of entries
// is known, list all of them (a repeated name must be an error, not a silently dropped entry).
void parse_and_check(std::span<const std::uint8_t> file, int num_entries = -1) {
  try {
    di::safetensors_header h = di::parse_safetensors_header(file, "fuzz.safetensors");
    if (!holds_invariants(h, file.size())) __builtin_trap();
    if (num_entries >= 0 && h.tensors.size() != std::size_t(num_entries)) __builtin_trap();
  } catch (const di::error&) {
    // rejected with a clear error: the expected outcome for most inputs
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  parse_and_check({data, size});
  recipe_result r = recipe_file({data, size});
  parse_and_check({reinterpret_cast<const std::uint8_t*>(r.file.data()), r.file.size()},
                  r.num_entries);
  return 0;
}
