// make-model orchestration: check every input, prepare the output folder, generate the
// shards, then write the index, the tokenizer files and config.json (last, so an interrupted
// run never leaves a folder that looks like a finished checkpoint).
#include "model/make_model/make_model.hpp"

#include "common/error.hpp"
#include "model/engram/token_map.hpp"
#include "model/make_model/generate_shards.hpp"
#include "model/tokenizer/tokenizer.hpp"

#include <fmt/format.h>

#include <chrono>
#include <fstream>

namespace di {

namespace {

/// Files (and folders) make_model created; removed again unless the whole checkpoint was
/// written -- folders last, innermost first, and only while empty.
class created_files {
 public:
  ~created_files() {
    if (committed_) return;
    std::error_code ec;
    for (const auto& f : files_) std::filesystem::remove(f, ec);
    for (auto d = dirs_.rbegin(); d != dirs_.rend(); ++d)
      if (std::filesystem::is_empty(*d, ec)) std::filesystem::remove(*d, ec);
  }
  void add(std::filesystem::path f) { files_.push_back(std::move(f)); }
  void add_dir(std::filesystem::path d) { dirs_.push_back(std::move(d)); }
  std::vector<std::filesystem::path> commit() {
    committed_ = true;
    return files_;
  }

 private:
  std::vector<std::filesystem::path> files_;
  std::vector<std::filesystem::path> dirs_;  // outermost first
  bool committed_ = false;
};

/// Files of a checkpoint folder that a new checkpoint replaces.
bool is_checkpoint_file(const std::filesystem::path& p) {
  std::string name = p.filename().string();
  return name == "config.json" || name == "tokenizer.json" || name == "tokenizer_config.json" ||
         name == "model.safetensors.index.json" || p.extension() == ".safetensors";
}

/// Makes `dir` (recording in `files` the folders it creates: an interrupted or failed run
/// removes them again) or checks it.
void prepare_out_dir(const std::filesystem::path& dir, bool force, created_files& files) {
  namespace fs = std::filesystem;
  if (!fs::exists(dir)) {
    std::vector<fs::path> missing;  // innermost first
    for (fs::path p = fs::absolute(dir).lexically_normal(); !p.empty() && !fs::exists(p);
         p = p.parent_path()) {
      missing.push_back(p);
      if (p == p.parent_path()) break;
    }
    // The library's own words named neither the option nor the cause in plain terms:
    // "filesystem error: cannot create directories: Not a directory [/etc/passwd/x]".
    std::error_code ec;
    fs::create_directories(dir, ec);
    for (auto p = missing.rbegin(); p != missing.rend(); ++p)
      if (!ec || fs::exists(*p)) files.add_dir(*p);  // a failure removes what it made
    DI_CHECK(!ec, "--out {}: cannot create the folder: {}", dir.string(), ec.message());
    return;
  }
  DI_CHECK(fs::is_directory(dir), "{}: exists and is not a directory", dir.string());
  if (fs::is_empty(dir)) return;
  DI_CHECK(force, "{}: folder is not empty; pass --force to replace the checkpoint in it",
           dir.string());
  // Checked before anything is removed (a folder of such a name made the copy fail with the
  // library's "filesystem error: cannot copy file", the old checkpoint already gone).
  for (const auto& entry : fs::directory_iterator(dir))
    DI_CHECK(!is_checkpoint_file(entry.path()) || entry.is_regular_file(),
             "{}: is not a file, and make-model writes a file of that name there; move it away "
             "first",
             entry.path().string());
  for (const auto& entry : fs::directory_iterator(dir))
    if (is_checkpoint_file(entry.path())) fs::remove(entry.path());
}

void check_tokenizer_fits(const model_config& c, const tokenizer_facts& tok,
                          const std::filesystem::path& dir) {
  DI_CHECK(tok.num_ids <= c.vocab_size, "{}: the tokenizer defines {} ids but vocab_size is {}",
           dir.string(), tok.num_ids, c.vocab_size);
}

/// The preset's config.json with engram_compressed_vocab_size set to what the tokenizer in
/// `tok_dir` yields (Engram's compressed token map), as the model's hashing requires.
nlohmann::ordered_json config_for_tokenizer(const model_preset& preset,
                                            const std::filesystem::path& tok_dir) {
  nlohmann::ordered_json config = preset.config;
  if (!config.contains("text_config") ||
      config["text_config"].value("engram_layer_ids", nlohmann::ordered_json::array()).empty())
    return config;
  auto tok = tok::tokenizer::from_dir(tok_dir.string());
  config["text_config"]["engram_compressed_vocab_size"] =
      build_engram_token_map(tok).num_compressed;
  return config;
}

void write_text(const std::filesystem::path& path, const std::string& text, created_files& files) {
  files.add(path);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  DI_CHECK(out.good(), "{}: cannot write", path.string());
}

void write_index(const model_plan& plan, const std::filesystem::path& dir, created_files& files) {
  std::map<std::string, std::string> weight_map;
  for (const auto& [name, slot] : plan.slots)
    weight_map[name] = plan.shard_files[std::size_t(slot.shard)];
  files.add(dir / "model.safetensors.index.json");
  write_safetensors_index(dir / "model.safetensors.index.json", weight_map, plan.total_bytes);
}

}  // namespace

model_config preset_model_config(const model_preset& preset) {
  return parse_model_config(preset_config_json(preset), "preset " + preset.name);
}

std::string preset_config_json(const model_preset& preset) {
  return preset.config.dump(2) + "\n";
}

init_context make_init_context(const model_config& config, std::uint64_t seed,
                               const init_scales& scales, const tokenizer_facts& tokenizer) {
  auto unused = std::make_shared<std::vector<std::uint8_t>>(std::size_t(config.vocab_size), 0);
  for (std::int64_t id = tokenizer.num_ids; id < config.vocab_size; ++id)
    (*unused)[std::size_t(id)] = 1;
  for (std::int64_t id : tokenizer.added_ids)
    if (id >= 0 && id < config.vocab_size) (*unused)[std::size_t(id)] = 1;
  return {.config = &config, .seed = seed, .scales = scales, .unused_token_rows = unused};
}

std::vector<float> generated_values(const planned_tensor& tensor, const init_context& context,
                                    std::int64_t row0, std::int64_t num_rows) {
  DI_CHECK(row0 >= 0 && num_rows >= 0 && row0 + num_rows <= tensor.rows,
           "generated_values: rows [{}, {}) outside '{}' ({} rows)", row0, row0 + num_rows,
           tensor.weight.name, tensor.rows);
  init_rule rule = make_init_rule(tensor.weight, context);
  DI_CHECK(rule.type == init_rule::kind::normal, "generated_values: '{}' holds integers",
           tensor.weight.name);
  std::vector<float> values(std::size_t(num_rows * tensor.cols));
  generate_rows(rule, row0, num_rows, tensor.cols, values.data());
  return values;
}

make_model_result make_model(const make_model_options& o) {
  auto start = std::chrono::steady_clock::now();
  const model_preset& preset = find_model_preset(o.preset);
  DI_CHECK(!o.out_dir.empty(), "make-model: no output folder given");
  make_model_result result;
  std::filesystem::path tok_dir =
      o.tokenizer_dir.empty() ? find_tokenizer_assets() : o.tokenizer_dir;
  const std::string config_json = config_for_tokenizer(preset, tok_dir).dump(2) + "\n";
  model_config config = parse_model_config(config_json, "preset " + preset.name);
  tokenizer_facts tok = read_tokenizer_facts(tok_dir / "tokenizer.json");
  check_tokenizer_fits(config, tok, tok_dir);
  result.plan = plan_model(config, o.max_shard_bytes);
  init_context context = make_init_context(config, o.seed, o.scales, tok);

  created_files files;
  prepare_out_dir(o.out_dir, o.force, files);
  for (const auto& shard : result.plan.shard_files) files.add(o.out_dir / shard);
  generate_shards({.plan = &result.plan,
                   .context = &context,
                   .out_dir = o.out_dir,
                   .metadata = {{"format", "pt"},
                                {"deepinfer_make_model",
                                 fmt::format("preset={} seed={}", preset.name, o.seed)}},
                   .show_progress = o.show_progress,
                   .cancel = o.cancel});
  write_index(result.plan, o.out_dir, files);
  for (const char* name : {"tokenizer.json", "tokenizer_config.json"}) {
    files.add(o.out_dir / name);
    std::filesystem::copy_file(tok_dir / name, o.out_dir / name,
                               std::filesystem::copy_options::overwrite_existing);
  }
  write_text(o.out_dir / "config.json", config_json, files);
  result.files = files.commit();
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

}  // namespace di
