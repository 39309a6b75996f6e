// Opening checkpoints: resolve file vs directory, read and check the shard index, map every
// shard, and cross-check the index against the shards' own headers in both directions.
#include "model/checkpoint/checkpoint.hpp"

#include "common/error.hpp"
#include "common/printable.hpp"
#include "model/checkpoint/detail/strict_json.hpp"

#include <algorithm>

namespace di {

namespace fs = std::filesystem;

namespace {

// What model.safetensors.index.json promises: which shard holds each tensor.
struct shard_index {
  std::map<std::string, std::string> shard_of;                 // tensor name -> shard file name
  std::map<std::string, std::vector<std::string>> tensors_of;  // shard file name -> tensor names
};

// A shard must be a plain file name inside the checkpoint directory.
void check_shard_name(const std::string& shard, const std::string& tensor,
                      const std::string& index_file) {
  bool is_plain = !shard.empty() && shard != "." && shard != ".." &&
                  shard.find_first_of(std::string_view("/\\\0", 3)) == std::string::npos;
  DI_CHECK(is_plain,
           "{}: tensor '{}': shard '{}' is not a plain file name in the checkpoint directory "
           "(no '/', '..' or absolute paths)",
           index_file, printable(tensor), printable(shard));
}

shard_index read_index(const fs::path& index_path) {
  const std::string index_file = index_path.string();
  nlohmann::json root =
      detail::parse_strict_json(read_text_file(index_file), index_file, "shard index");
  DI_CHECK(root.is_object(), "{}: shard index must be a JSON object, got {}", index_file,
           root.type_name());
  DI_CHECK(!root.contains("metadata") || root["metadata"].is_object(),
           "{}: 'metadata' must be an object", index_file);
  DI_CHECK(root.contains("weight_map"), "{}: missing 'weight_map'", index_file);
  const nlohmann::json& weight_map = root["weight_map"];
  DI_CHECK(weight_map.is_object(), "{}: 'weight_map' must be an object, got {}", index_file,
           weight_map.type_name());
  DI_CHECK(!weight_map.empty(), "{}: 'weight_map' lists no tensors", index_file);
  shard_index index;
  for (const auto& [tensor, shard] : weight_map.items()) {
    DI_CHECK(shard.is_string(), "{}: tensor '{}': shard must be a string, got {}", index_file,
             printable(tensor), shard.type_name());
    const std::string& shard_name = shard.get_ref<const std::string&>();
    check_shard_name(shard_name, tensor, index_file);
    index.shard_of.emplace(tensor, shard_name);
    index.tensors_of[shard_name].push_back(tensor);
  }
  return index;
}

// Every tensor of the shard is listed in the index under this shard, and every tensor the
// index puts in this shard is there.
void check_shard_against_index(const safetensors_header& header, const std::string& shard,
                               const std::string& shard_file, const shard_index& index,
                               const std::string& index_file) {
  for (const tensor_entry& t : header.tensors) {
    auto it = index.shard_of.find(t.name);
    DI_CHECK(it != index.shard_of.end(), "{}: tensor '{}' is not listed in {}", shard_file,
             printable(t.name), index_file);
    DI_CHECK(it->second == shard, "{}: tensor '{}' is in shard '{}' but the index maps it to '{}'",
             index_file, printable(t.name), printable(shard), printable(it->second));
  }
  for (const std::string& name : index.tensors_of.at(shard)) {
    auto it =
        std::lower_bound(header.tensors.begin(), header.tensors.end(), name,
                         [](const tensor_entry& t, const std::string& n) { return t.name < n; });
    bool present = it != header.tensors.end() && it->name == name;
    DI_CHECK(present, "{}: tensor '{}' is mapped to shard '{}', but {} does not contain it",
             index_file, printable(name), printable(shard), shard_file);
  }
}

}  // namespace

checkpoint::checkpoint(const fs::path& path) : path_(path.string()) {
  std::error_code ec;
  auto status = fs::status(path, ec);
  DI_CHECK(fs::exists(status), "{}: no such file or directory", path_);
  if (fs::is_directory(status)) {
    fs::path index = path / safetensors_index_name;
    fs::path single = path / safetensors_single_name;
    // Whether a name is there at all (a dangling link or a link loop is, and then fails to
    // open with its reason; fs::exists threw a raw filesystem error on a loop).
    const auto present = [](const fs::path& p) {
      std::error_code no_throw;
      return fs::exists(fs::symlink_status(p, no_throw));
    };
    if (present(index)) {
      load_sharded(path, index);
    } else {
      DI_CHECK(present(single), "{}: no {} or {} in this directory", path_, safetensors_index_name,
               safetensors_single_name);
      load_single(single);
    }
  } else if (path.filename() == safetensors_index_name) {
    load_sharded(path.parent_path(), path);
  } else {
    load_single(path);
  }
  std::sort(tensors_.begin(), tensors_.end(),
            [](const tensor_view& a, const tensor_view& b) { return a.name < b.name; });
  auto dup = std::adjacent_find(tensors_.begin(), tensors_.end(),
                                [](const auto& a, const auto& b) { return a.name == b.name; });
  DI_CHECK(dup == tensors_.end(), "{}: tensor '{}' appears in both {} and {}", path_,
           printable(dup->name), dup->file, std::next(dup)->file);
}

void checkpoint::load_single(const fs::path& file) {
  add_views(map_file(file));
}

void checkpoint::load_sharded(const fs::path& dir, const fs::path& index_path) {
  const std::string index_file = index_path.string();
  shard_index index = read_index(index_path);
  for (const auto& [shard, names] : index.tensors_of) {
    fs::path shard_path = dir / shard;
    std::error_code ec;  // the overload that throws gave a raw message for a symlink loop
    const fs::file_status st = fs::status(shard_path, ec);
    DI_CHECK(fs::is_regular_file(st), "{}: shard '{}' (holding tensor '{}'): {} {}", index_file,
             printable(shard), printable(names.front()), printable(shard_path.string()),
             fs::is_directory(st)                    ? "is a directory, not a file"
             : st.type() == fs::file_type::not_found ? "does not exist"
             : ec ? fmt::format("cannot be read: {}", ec.message())
                  : "is not a regular file");
    safetensors_header header = map_file(shard_path);
    check_shard_against_index(header, shard, shard_path.string(), index, index_file);
    add_views(header);
  }
}

safetensors_header checkpoint::map_file(const fs::path& file) {
  mapped_file mapped(file.string());
  safetensors_header header = parse_safetensors_header(mapped.bytes(), mapped.path());
  files_.push_back(std::move(mapped));
  return header;
}

void checkpoint::add_views(const safetensors_header& header) {
  const mapped_file& file = files_.back();
  std::span<const std::uint8_t> data = file.bytes().subspan(header.data_offset);
  for (const tensor_entry& t : header.tensors) {
    tensors_.push_back({.name = t.name,
                        .type = t.type,
                        .shape = t.shape,
                        .bytes = data.subspan(t.begin, t.end - t.begin),
                        .file = file.path()});
  }
  for (const auto& [key, value] : header.metadata) metadata_.emplace(key, value);
}

const tensor_view* checkpoint::find(std::string_view name) const {
  auto it = std::lower_bound(tensors_.begin(), tensors_.end(), name,
                             [](const tensor_view& t, std::string_view n) { return t.name < n; });
  return it != tensors_.end() && it->name == name ? &*it : nullptr;
}

const tensor_view& checkpoint::get(std::string_view name) const {
  const tensor_view* t = find(name);
  DI_CHECK(t != nullptr, "tensor '{}' not found in {}", name, path_);
  return *t;
}

std::map<dtype, std::uint64_t> checkpoint::bytes_per_dtype() const {
  std::map<dtype, std::uint64_t> totals;
  for (const tensor_view& t : tensors_) totals[t.type] += t.bytes.size();
  return totals;
}

}  // namespace di
