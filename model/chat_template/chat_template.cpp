// chat_template: parse() and render() over the lexer, parser and interpreter in detail/.
#include "model/chat_template/chat_template.hpp"

#include "model/chat_template/detail/interpreter.hpp"
#include "model/chat_template/detail/parser.hpp"

namespace di {

chat_template chat_template::parse(std::string_view source) {
  return chat_template(std::make_shared<const jinja::template_ast>(jinja::parse_template(source)));
}

template <class Json>
std::string chat_template::render_json(const Json& context,
                                       const chat_template_limits& limits) const {
  DI_CHECK(context.is_object(), "chat template context must be a JSON object, got {}",
           context.type_name());
  jinja::interpreter in(limits);
  return in.render(*ast_, jinja::from_json(context));
}

std::string chat_template::render(const nlohmann::json& context,
                                  const chat_template_limits& limits) const {
  return render_json(context, limits);
}

std::string chat_template::render(const nlohmann::ordered_json& context,
                                  const chat_template_limits& limits) const {
  return render_json(context, limits);
}

}  // namespace di
