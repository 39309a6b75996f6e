// `deepinfer chat-template`: renders a conversation (JSON on stdin) with a tokenizer's chat
// template, or a template file, and prints the prompt exactly as the model will see it.
#include "cli/command.hpp"
#include "cli/detail/json_input.hpp"
#include "common/error.hpp"
#include "common/mapped_file.hpp"
#include "model/chat_template/tokenizer_chat_template.hpp"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <iostream>
#include <iterator>
#include <optional>
#include <string>

namespace {

using ojson = nlohmann::ordered_json;

struct chat_template_options {
  std::string tokenizer_dir;
  std::string template_file;
  std::string template_name;
  std::string kwargs_json;
  bool no_generation_prompt = false;
  bool continue_final_message = false;
};

ojson parse_json(const std::string& text, const std::string& what) {
  return di::cli::parse_json_input(text, what);
}

// stdin is a message array, or an object with "messages" and optional "tools",
// "documents", "add_generation_prompt", "continue_final_message"; other keys become
// template variables.
di::chat_request read_request(const std::string& text) {
  ojson input = parse_json(text, "stdin");
  di::chat_request request;
  if (input.is_array()) {
    request.messages = std::move(input);
    return request;
  }
  DI_CHECK(input.is_object(),
           "stdin must hold a JSON array of messages or an object with "
           "\"messages\", got {}",
           input.type_name());
  DI_CHECK(input.contains("messages"), "stdin object has no \"messages\" key");
  for (auto& [key, v] : input.items()) {
    if (key == "messages")
      request.messages = v;
    else if (key == "tools")
      request.tools = v;
    else if (key == "documents")
      request.documents = v;
    else if (key == "add_generation_prompt" || key == "continue_final_message") {
      DI_CHECK(v.is_boolean(), "\"{}\" must be true or false", key);
      (key == "add_generation_prompt" ? request.add_generation_prompt
                                      : request.continue_final_message) = v.get<bool>();
    } else {
      request.kwargs[key] = v;
    }
  }
  DI_CHECK(request.messages.is_array(), "\"messages\" must be a JSON array");
  return request;
}

di::tokenizer_chat_template load_template(const chat_template_options& opt) {
  if (opt.template_file.empty()) return di::tokenizer_chat_template::load(opt.tokenizer_dir);
  ojson config = ojson::object();
  std::filesystem::path config_path =
      std::filesystem::path(opt.tokenizer_dir) / "tokenizer_config.json";
  if (!opt.tokenizer_dir.empty() && std::filesystem::exists(config_path))
    config = parse_json(di::read_text_file(config_path.string()), config_path.string());
  try {
    return di::tokenizer_chat_template::from_source(di::read_text_file(opt.template_file), config);
  } catch (const di::chat_template_error& e) {
    DI_FAIL("{}: {}", opt.template_file, e.what());
  }
}

void run_chat_template(const chat_template_options& opt) {
  DI_CHECK(!opt.tokenizer_dir.empty() || !opt.template_file.empty(),
           "give --tokenizer DIR or --template FILE");
  di::tokenizer_chat_template templates = load_template(opt);
  std::string input((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
  di::chat_request request = read_request(input);
  if (!opt.kwargs_json.empty()) {
    ojson kwargs = parse_json(opt.kwargs_json, "--kwargs");
    DI_CHECK(kwargs.is_object(), "--kwargs must be a JSON object");
    for (auto& [key, v] : kwargs.items()) request.kwargs[key] = v;
  }
  if (opt.no_generation_prompt) request.add_generation_prompt = false;
  if (opt.continue_final_message) {
    request.continue_final_message = true;
    request.add_generation_prompt = false;
  }
  request.template_name = opt.template_name;
  std::string prompt = templates.apply(request);
  std::fwrite(prompt.data(), 1, prompt.size(), stdout);
  std::fflush(stdout);
}

void setup_chat_template(CLI::App& app) {
  auto opt = std::make_shared<chat_template_options>();
  auto* sub = app.add_subcommand("chat-template",
                                 "Render a conversation (JSON on stdin) with a chat template");
  sub->footer(
      "stdin: a JSON array of messages, or an object {\"messages\": [...], \"tools\": [...],\n"
      "\"documents\": [...], \"add_generation_prompt\": bool, ...}; any other key is passed\n"
      "to the template as a variable (e.g. \"enable_thinking\": false).\n"
      "The prompt is written to stdout exactly as rendered: no newline is added.\n"
      "Rendering matches transformers' apply_chat_template (jinja2 sandbox, trim_blocks,\n"
      "lstrip_blocks); errors print one line and exit with status 1.");
  sub->add_option("--tokenizer", opt->tokenizer_dir,
                  "Tokenizer folder (tokenizer_config.json / chat_template.jinja)");
  sub->add_option("--template", opt->template_file,
                  "Render this Jinja file instead (special tokens still come from --tokenizer)");
  sub->add_option("--template-name", opt->template_name,
                  "Named template to use (default: \"tool_use\" with tools, else \"default\")");
  sub->add_option("--kwargs", opt->kwargs_json, "Extra template variables as a JSON object");
  sub->add_flag("--no-generation-prompt", opt->no_generation_prompt,
                "Do not end with the assistant header (add_generation_prompt=false)");
  sub->add_flag("--continue-final-message", opt->continue_final_message,
                "End the prompt inside the last message so the model continues it");
  sub->callback([opt] { run_chat_template(*opt); });
}

}  // namespace

DI_REGISTER_COMMAND(setup_chat_template);
