// Validating safetensors header parser. Layout: 8-byte little-endian header length N, N bytes
// of JSON ({"name": {"dtype", "shape", "data_offsets"}, "__metadata__": {...}}), then the data
// section that every data_offsets pair indexes into.
#include "model/checkpoint/safetensors.hpp"

#include "common/error.hpp"
#include "common/printable.hpp"
#include "model/checkpoint/detail/strict_json.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <limits>

namespace di {

namespace {

using nlohmann::json;

// Context for messages about one tensor: "<file>: tensor '<name>': ...". `name` is the
// tensor's name as printable() shows it: names, dtypes and keys are the file's bytes.
struct entry_context {
  std::string_view file;
  std::string name;
  std::uint64_t data_size;  // bytes in the data section
};

std::uint64_t read_le64(const std::uint8_t* p) {
  std::uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= std::uint64_t(p[i]) << (8 * i);
  return v;
}

// A non-negative JSON integer; nullopt for anything else (floats, negatives, other types).
std::optional<std::uint64_t> as_count(const json& v) {
  if (v.is_number_unsigned()) return v.get<std::uint64_t>();
  if (v.is_number_integer() && v.get<std::int64_t>() >= 0)
    return std::uint64_t(v.get<std::int64_t>());
  return std::nullopt;
}

void check_entry_keys(const json& entry, const entry_context& c) {
  DI_CHECK(entry.is_object(), "{}: tensor '{}': entry must be an object, got {}", c.file, c.name,
           entry.type_name());
  for (const auto& [key, value] : entry.items())
    DI_CHECK(key == "dtype" || key == "shape" || key == "data_offsets",
             "{}: tensor '{}': unexpected key '{}' (allowed: dtype, shape, data_offsets)", c.file,
             c.name, printable(key));
  for (const char* key : {"dtype", "shape", "data_offsets"})
    DI_CHECK(entry.contains(key), "{}: tensor '{}': missing '{}'", c.file, c.name, key);
}

dtype parse_entry_dtype(const json& v, const entry_context& c) {
  DI_CHECK(v.is_string(), "{}: tensor '{}': 'dtype' must be a string, got {}", c.file, c.name,
           v.type_name());
  const auto& s = v.get_ref<const std::string&>();
  auto t = parse_dtype(s);
  DI_CHECK(t.has_value(), "{}: tensor '{}': unknown dtype '{}'", c.file, c.name, printable(s));
  return *t;
}

std::vector<std::int64_t> parse_entry_shape(const json& v, const entry_context& c) {
  DI_CHECK(v.is_array(), "{}: tensor '{}': 'shape' must be an array, got {}", c.file, c.name,
           v.type_name());
  std::vector<std::int64_t> shape;
  shape.reserve(v.size());
  for (const json& d : v) {
    DI_CHECK(d.is_number_integer(), "{}: tensor '{}': shape entries must be integers, got {}",
             c.file, c.name, d.type_name());
    auto n = as_count(d);
    DI_CHECK(n.has_value(), "{}: tensor '{}': negative dimension {} in shape", c.file, c.name,
             d.get<std::int64_t>());
    DI_CHECK(*n <= std::uint64_t(std::numeric_limits<std::int64_t>::max()),
             "{}: tensor '{}': dimension {} is too large", c.file, c.name, *n);
    shape.push_back(std::int64_t(*n));
  }
  return shape;
}

// A tensor's [begin, end) within the data section.
struct byte_range {
  std::uint64_t begin = 0;
  std::uint64_t end = 0;
};

byte_range parse_entry_offsets(const json& v, const entry_context& c) {
  DI_CHECK(v.is_array() && v.size() == 2,
           "{}: tensor '{}': 'data_offsets' must be an array of two integers", c.file, c.name);
  auto begin = as_count(v[0]);
  auto end = as_count(v[1]);
  DI_CHECK(begin && end, "{}: tensor '{}': 'data_offsets' must be two non-negative integers",
           c.file, c.name);
  DI_CHECK(*begin <= *end, "{}: tensor '{}': data_offsets begin {} > end {}", c.file, c.name,
           *begin, *end);
  DI_CHECK(*end <= c.data_size,
           "{}: tensor '{}': data_offsets [{}, {}] run past the data section ({} bytes)", c.file,
           c.name, *begin, *end, c.data_size);
  return {*begin, *end};
}

tensor_entry parse_entry(const std::string& name, const json& entry, const entry_context& c) {
  check_entry_keys(entry, c);
  tensor_entry t;
  t.name = name;
  t.type = parse_entry_dtype(entry.at("dtype"), c);
  t.shape = parse_entry_shape(entry.at("shape"), c);
  byte_range range = parse_entry_offsets(entry.at("data_offsets"), c);
  t.begin = range.begin;
  t.end = range.end;
  auto expected = checked_byte_size(t.shape, dtype_size(t.type));
  DI_CHECK(expected.has_value(), "{}: tensor '{}': shape {} overflows 64-bit byte size", c.file,
           c.name, format_shape(t.shape));
  DI_CHECK(*expected == t.end - t.begin,
           "{}: tensor '{}': {} {} needs {} bytes but data_offsets [{}, {}] hold {}", c.file,
           c.name, dtype_name(t.type), format_shape(t.shape), *expected, t.begin, t.end,
           t.end - t.begin);
  return t;
}

std::map<std::string, std::string> parse_metadata(const json& v, std::string_view file) {
  DI_CHECK(v.is_object(), "{}: '__metadata__' must be an object of strings, got {}", file,
           v.type_name());
  std::map<std::string, std::string> metadata;
  for (const auto& [key, value] : v.items()) {
    DI_CHECK(value.is_string(), "{}: '__metadata__' value of '{}' must be a string, got {}", file,
             printable(key), value.type_name());
    metadata.emplace(key, value.get<std::string>());
  }
  return metadata;
}

// Tensors sorted by offset fill the data section end to end, as the safetensors library
// requires: they may touch but not share a byte (an empty tensor may sit at the boundary
// between two others but not inside one), leave no gap, and end where the file ends -- bytes
// nothing names are a damaged or appended file, never data.
void check_layout(const std::vector<tensor_entry>& tensors, std::string_view file,
                  std::uint64_t data_size) {
  std::vector<const tensor_entry*> by_offset;
  by_offset.reserve(tensors.size());
  for (const auto& t : tensors) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(), [](const tensor_entry* a, const tensor_entry* b) {
    if (a->begin != b->begin) return a->begin < b->begin;
    return a->end != b->end ? a->end < b->end : a->name < b->name;  // names: a stable message
  });
  const tensor_entry* furthest = nullptr;  // the tensor reaching furthest so far
  for (const tensor_entry* t : by_offset) {
    if (furthest != nullptr)
      DI_CHECK(t->begin >= furthest->end,
               "{}: tensors '{}' [{}, {}] and '{}' [{}, {}] overlap in the data section", file,
               printable(furthest->name), furthest->begin, furthest->end, printable(t->name),
               t->begin, t->end);
    const std::uint64_t filled = furthest == nullptr ? 0 : furthest->end;
    DI_CHECK(
        t->begin == filled,
        "{}: tensor '{}' starts at byte {} of the data section, leaving bytes [{}, {}) that no "
        "tensor names (safetensors tensors fill it end to end)",
        file, printable(t->name), t->begin, filled, t->begin);
    if (furthest == nullptr || t->end > furthest->end) furthest = t;
  }
  const std::uint64_t end = furthest == nullptr ? 0 : furthest->end;
  DI_CHECK(end == data_size,
           "{}: {} bytes follow the last tensor (the data section is {} bytes, its tensors end at "
           "{}): a damaged or appended file",
           file, data_size - end, data_size, end);
}

safetensors_header parse_header_json(const json& root, std::string_view file,
                                     std::uint64_t data_offset, std::uint64_t data_size) {
  DI_CHECK(root.is_object(), "{}: header must be a JSON object, got {}", file, root.type_name());
  safetensors_header header;
  header.data_offset = data_offset;
  header.tensors.reserve(root.size());
  for (const auto& [name, entry] : root.items()) {
    if (name == "__metadata__") {
      header.metadata = parse_metadata(entry, file);
      continue;
    }
    header.tensors.push_back(parse_entry(name, entry, {file, printable(name), data_size}));
  }
  std::sort(header.tensors.begin(), header.tensors.end(),
            [](const tensor_entry& a, const tensor_entry& b) { return a.name < b.name; });
  check_layout(header.tensors, file, data_size);
  return header;
}

}  // namespace

std::optional<std::uint64_t> checked_byte_size(std::span<const std::int64_t> shape,
                                               std::uint64_t element_size) {
  std::uint64_t bytes = element_size;
  for (std::int64_t d : shape) {
    if (d < 0 || __builtin_mul_overflow(bytes, std::uint64_t(d), &bytes)) return std::nullopt;
  }
  return bytes;
}

std::string format_shape(std::span<const std::int64_t> shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

std::int64_t tensor_view::num_elements() const {
  std::int64_t n = 1;
  for (std::int64_t d : shape) n *= d;
  return n;
}

safetensors_header parse_safetensors_header(std::span<const std::uint8_t> file_bytes,
                                            std::string_view file) {
  DI_CHECK(file_bytes.size() >= 8,
           "{}: file is {} bytes, too short for the 8-byte safetensors header length", file,
           file_bytes.size());
  std::uint64_t header_len = read_le64(file_bytes.data());
  DI_CHECK(header_len <= max_safetensors_header_bytes,
           "{}: header length {} exceeds the {}-byte limit (not a safetensors file?)", file,
           header_len, max_safetensors_header_bytes);
  DI_CHECK(header_len <= file_bytes.size() - 8,
           "{}: header length {} runs past the end of the file ({} bytes)", file, header_len,
           file_bytes.size());
  std::string_view text(reinterpret_cast<const char*>(file_bytes.data() + 8), header_len);
  json root = detail::parse_strict_json(text, file, "header");
  std::uint64_t data_offset = 8 + header_len;
  try {
    return parse_header_json(root, file, data_offset, file_bytes.size() - data_offset);
  } catch (const json::exception& e) {  // a type check above missed a case: still one clear error
    DI_FAIL("{}: malformed header: {}", file, printable(e.what()));
  }
}

}  // namespace di
