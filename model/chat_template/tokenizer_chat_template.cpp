// tokenizer_chat_template: reads a tokenizer folder's templates and special tokens and
// applies them as transformers' apply_chat_template / render_jinja_template do.
#include "model/chat_template/tokenizer_chat_template.hpp"

#include "common/error.hpp"
#include "common/mapped_file.hpp"
#include "common/printable.hpp"
#include "common/strict_json.hpp"
#include "model/chat_template/detail/text.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>

namespace di {

namespace {

using ojson = nlohmann::ordered_json;

// transformers' SPECIAL_TOKENS_ATTRIBUTES, in its order.
constexpr const char* special_token_names[] = {"bos_token", "eos_token", "unk_token", "sep_token",
                                               "pad_token", "cls_token", "mask_token"};

// A token in tokenizer_config.json: a string or an AddedToken object {"content": ...}.
std::string token_text(const ojson& token, std::string_view field) {
  if (token.is_string()) return token.get<std::string>();
  DI_CHECK(token.is_object() && token.contains("content") && token["content"].is_string(),
           "tokenizer_config.json: '{}' must be a string or an object with a string 'content'",
           field);
  return token["content"].get<std::string>();
}

// special_tokens_map: the set (non-empty) special tokens, as strings.
ojson special_tokens_of(const ojson& config) {
  ojson tokens = ojson::object();
  for (const char* name : special_token_names) {
    if (!config.contains(name) || config[name].is_null()) continue;
    std::string text = token_text(config[name], name);
    if (!text.empty()) tokens[name] = text;
  }
  if (config.contains("additional_special_tokens") &&
      config["additional_special_tokens"].is_array()) {
    ojson list = ojson::array();
    for (const auto& t : config["additional_special_tokens"])
      list.push_back(token_text(t, "additional_special_tokens"));
    if (!list.empty()) tokens["additional_special_tokens"] = std::move(list);
  }
  return tokens;
}

// continue_final_message: cut the prompt right after the last message's content.
std::string trim_to_final_message(std::string rendered, const ojson& messages) {
  DI_CHECK(messages.is_array() && !messages.empty() && messages.back().is_object(),
           "continue_final_message needs at least one message");
  const ojson content = messages.back().value("content", ojson());
  std::string final_message;
  if (content.is_string()) {
    final_message = content.get<std::string>();
  } else if (content.is_array()) {
    auto it = std::find_if(content.rbegin(), content.rend(), [](const ojson& block) {
      return block.is_object() && block.contains("text") && block["text"].is_string();
    });
    DI_CHECK(it != content.rend(),
             "continue_final_message is set but the final message has no text content block");
    final_message = (*it)["text"].get<std::string>();
  } else {
    DI_FAIL("continue_final_message is set but the final message has no string content");
  }
  std::string stripped = jinja::py_strip(final_message, jinja::strip_side::both);
  std::string lstripped = jinja::py_strip(final_message, jinja::strip_side::left);
  std::size_t at = rendered.rfind(stripped);
  DI_CHECK(at != std::string::npos,
           "continue_final_message is set but the final message does not appear in the "
           "rendered chat (the template rewrites it)");
  bool spacing_kept = rendered.compare(at, lstripped.size(), final_message) == 0;
  rendered.resize(at + (spacing_kept ? lstripped.size() : stripped.size()));
  return rendered;
}

}  // namespace

void tokenizer_chat_template::add_template(std::string name, std::string_view source) {
  chat_template parsed = chat_template::parse(source);
  auto it = std::find_if(templates_.begin(), templates_.end(),
                         [&](const auto& t) { return t.first == name; });
  if (it != templates_.end())
    it->second = std::move(parsed);
  else
    templates_.emplace_back(std::move(name), std::move(parsed));
}

tokenizer_chat_template tokenizer_chat_template::from_config(const ojson& config) {
  DI_CHECK(config.is_object(), "tokenizer_config.json must hold a JSON object");
  tokenizer_chat_template t;
  t.special_tokens_ = special_tokens_of(config);
  const ojson& templates = config.value("chat_template", ojson());
  if (templates.is_string()) {
    try {
      t.add_template("default", templates.get<std::string>());
    } catch (const chat_template_error& e) {
      DI_FAIL("'chat_template' in tokenizer_config.json: {}", e.what());
    }
  } else if (templates.is_array()) {
    for (const auto& entry : templates) {
      DI_CHECK(entry.is_object() && entry.contains("name") && entry["name"].is_string() &&
                   entry.contains("template") && entry["template"].is_string(),
               "tokenizer_config.json: each 'chat_template' list entry needs a string 'name' and "
               "'template'");
      std::string name = entry["name"].get<std::string>();
      try {
        t.add_template(name, entry["template"].get<std::string>());
      } catch (const chat_template_error& e) {
        DI_FAIL("template '{}' in tokenizer_config.json: {}", name, e.what());
      }
    }
  } else {
    DI_CHECK(templates.is_null(),
             "tokenizer_config.json: 'chat_template' must be a string or a "
             "list of {{name, template}} objects");
  }
  return t;
}

tokenizer_chat_template tokenizer_chat_template::from_source(std::string_view source,
                                                             const ojson& config) {
  tokenizer_chat_template t;
  t.special_tokens_ = special_tokens_of(config.is_object() ? config : ojson::object());
  t.add_template("default", source);
  return t;
}

tokenizer_chat_template tokenizer_chat_template::load(const std::string& tokenizer_dir) {
  namespace fs = std::filesystem;
  fs::path dir(tokenizer_dir);
  DI_CHECK(fs::is_directory(dir), "tokenizer folder '{}' does not exist", tokenizer_dir);
  fs::path config_path = dir / "tokenizer_config.json";
  ojson config = ojson::object();
  if (fs::exists(config_path)) {
    try {
      config = ojson::parse(read_text_file(config_path.string()));
    } catch (const ojson::exception& e) {
      // (the bytes nlohmann quotes are the file's: escaped, as in every file's parse error)
      DI_FAIL("{}: invalid JSON: {}", config_path.string(),
              printable(without_nlohmann_tag(e.what())));
    }
  }
  tokenizer_chat_template t;
  auto add_file = [&t](const std::string& name, const fs::path& file) {
    try {
      t.add_template(name, read_text_file(file.string()));
    } catch (const chat_template_error& e) {
      DI_FAIL("{}: {}", file.string(), e.what());
    }
  };
  try {
    fs::path jinja_path = dir / "chat_template.jinja";
    if (fs::exists(jinja_path)) {
      ojson without_template = config;
      without_template.erase("chat_template");
      t = from_config(without_template);
      add_file("default", jinja_path);
    } else {
      t = from_config(config);
    }
    fs::path extra_dir = dir / "additional_chat_templates";
    if (fs::is_directory(extra_dir)) {
      std::vector<fs::path> files;
      for (const auto& entry : fs::directory_iterator(extra_dir))
        if (entry.path().extension() == ".jinja") files.push_back(entry.path());
      std::sort(files.begin(), files.end());
      for (const auto& f : files) add_file(f.stem().string(), f);
    }
  } catch (const error& e) {
    DI_FAIL("tokenizer {}: {}", tokenizer_dir, e.what());
  }
  DI_CHECK(!t.templates_.empty(),
           "tokenizer {} has no chat template (no 'chat_template' in tokenizer_config.json and "
           "no chat_template.jinja)",
           tokenizer_dir);
  return t;
}

std::vector<std::string> tokenizer_chat_template::template_names() const {
  std::vector<std::string> names;
  for (const auto& [name, _] : templates_) names.push_back(name);
  return names;
}

const chat_template& tokenizer_chat_template::select(std::string_view name, bool has_tools) const {
  auto find = [&](std::string_view n) -> const chat_template* {
    for (const auto& [key, t] : templates_)
      if (key == n) return &t;
    return nullptr;
  };
  const chat_template* chosen = nullptr;
  if (!name.empty())
    chosen = find(name);
  else if (has_tools && find("tool_use"))
    chosen = find("tool_use");
  else
    chosen = find("default");
  if (chosen) return *chosen;
  std::vector<std::string> names = template_names();
  if (name.empty())
    DI_FAIL(
        "this tokenizer has several chat templates and none is named 'default'; choose one "
        "of: {}",
        fmt::join(names, ", "));
  DI_FAIL("no chat template named '{}'; available: {}", name, fmt::join(names, ", "));
}

std::string tokenizer_chat_template::apply(const chat_request& request,
                                           const chat_template_limits& limits) const {
  DI_CHECK(request.messages.is_array(), "'messages' must be a JSON array, got {}",
           request.messages.type_name());
  DI_CHECK(request.kwargs.is_object(), "template kwargs must be a JSON object, got {}",
           request.kwargs.type_name());
  DI_CHECK(!(request.add_generation_prompt && request.continue_final_message),
           "continue_final_message and add_generation_prompt are not compatible: use "
           "continue_final_message to continue the last message, add_generation_prompt to start "
           "a new assistant message");
  ojson context = ojson::object();
  context["messages"] = request.messages;
  context["tools"] = request.tools;
  context["documents"] = request.documents;
  context["add_generation_prompt"] = request.add_generation_prompt;
  context["continue_final_message"] = request.continue_final_message;
  for (const auto& [key, v] : special_tokens_.items()) context[key] = v;
  for (const auto& [key, v] : request.kwargs.items()) {
    DI_CHECK(key != "messages" && key != "tools" && key != "documents" &&
                 key != "add_generation_prompt" && key != "continue_final_message",
             "template kwargs cannot set '{}': it is a request field", key);
    context[key] = v;
  }
  bool has_tools = !request.tools.is_null();
  std::string rendered = select(request.template_name, has_tools).render(context, limits);
  if (request.continue_final_message)
    return trim_to_final_message(std::move(rendered), request.messages);
  return rendered;
}

}  // namespace di
