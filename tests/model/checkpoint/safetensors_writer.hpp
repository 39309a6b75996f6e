// Test-only safetensors writer: valid files from a list of tensors, and raw files from any
// header text, so tests can build both good checkpoints and deliberately broken ones.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace di::test {

/// One tensor to write: its bytes are stored as given (the writer does not check the shape).
struct tensor_spec {
  std::string name;
  std::string dtype;  // safetensors spelling: "F32", "F8_E4M3", ...
  std::vector<std::int64_t> shape;
  std::string data;
};

/// The raw bytes of `values` (host order is little-endian on every machine we build for).
template <typename T>
std::string bytes_of(const std::vector<T>& values) {
  std::string s(values.size() * sizeof(T), '\0');
  if (!values.empty()) std::memcpy(s.data(), values.data(), s.size());
  return s;
}

/// 8-byte little-endian `header_len` + `header` + `data`; the length may lie on purpose.
inline std::string raw_safetensors_with_length(std::uint64_t header_len, std::string_view header,
                                               std::string_view data = {}) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = char((header_len >> (8 * i)) & 0xff);
  out.append(header);
  out.append(data);
  return out;
}

/// A file with an honest length prefix for `header` followed by `data`.
inline std::string raw_safetensors(std::string_view header, std::string_view data = {}) {
  return raw_safetensors_with_length(header.size(), header, data);
}

/// A valid file: tensors stored back to back in the order given, optional __metadata__.
inline std::string make_safetensors(const std::vector<tensor_spec>& tensors,
                                    const std::map<std::string, std::string>& metadata = {}) {
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::string data;
  for (const tensor_spec& t : tensors) {
    header[t.name] = {{"dtype", t.dtype},
                      {"shape", t.shape},
                      {"data_offsets", {data.size(), data.size() + t.data.size()}}};
    data += t.data;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // pad like the reference writer does
  return raw_safetensors(text, data);
}

}  // namespace di::test
