#!/usr/bin/env python3
# Regenerates the expected outputs of the chat-template fixtures with Python's jinja2,
# configured exactly as transformers' apply_chat_template configures it (sandbox, trim/lstrip
# blocks, loopcontrols, tojson/raise_exception/strftime_now). The C++ test compares against
# these files byte for byte; CI never runs this script. Usage: gen_expected.py (needs jinja2).
import json
import sys
from datetime import datetime
from pathlib import Path

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

HERE = Path(__file__).resolve().parent
FIXTURES = HERE / "fixtures"
REPO = HERE.parents[2]
ASSETS = REPO / "assets"  # tokenizer folders bundled with the repository
SPECIAL_TOKENS = ["bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token",
                  "mask_token"]


class AssistantTracker(jinja2.ext.Extension):
    """transformers' {% generation %} tag; outside assistant-mask mode it renders its body."""
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def make_environment():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(format):
        return datetime.now().strftime(format)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[AssistantTracker, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def token_text(token):
    return token["content"] if isinstance(token, dict) else token


def special_tokens_map(config):
    """tokenizer.special_tokens_map: set special tokens as strings."""
    tokens = {}
    for name in SPECIAL_TOKENS:
        value = config.get(name)
        if value:
            text = token_text(value)
            if text:
                tokens[name] = text
    extra = [token_text(t) for t in config.get("additional_special_tokens") or []]
    if extra:
        tokens["additional_special_tokens"] = extra
    return tokens


def load_case_template(case):
    """Returns (template source, tokenizer_config) for a case."""
    if "tokenizer" in case:
        config = json.loads((ASSETS / case["tokenizer"] / "tokenizer_config.json")
                            .read_text(encoding="utf-8"))
        templates = config["chat_template"]
        if isinstance(templates, list):
            templates = {t["name"]: t["template"] for t in templates}
            templates = templates[case.get("template_name", "default")]
        return templates, config
    source = (FIXTURES / "templates" / case["template"]).read_text(encoding="utf-8")
    return source, case.get("tokenizer_config", {})


def render_case(env, case):
    """apply_chat_template(messages, tools, add_generation_prompt, **kwargs), tokenize=False."""
    source, config = load_case_template(case)
    request = case["request"]
    context = {
        "messages": request["messages"],
        "tools": request.get("tools"),
        "documents": request.get("documents"),
        "add_generation_prompt": request.get("add_generation_prompt", True),
        "continue_final_message": False,
    }
    context.update(special_tokens_map(config))
    context.update(request.get("kwargs", {}))
    return env.from_string(source).render(**context)


def generate_cases(env):
    cases = json.loads((FIXTURES / "cases.json").read_text(encoding="utf-8"))
    out_dir = FIXTURES / "expected"
    out_dir.mkdir(exist_ok=True)
    for stale in out_dir.iterdir():
        stale.unlink()
    for case in cases:
        try:
            text = render_case(env, case)
            (out_dir / f"{case['name']}.txt").write_bytes(text.encode("utf-8"))
        except jinja2.exceptions.TemplateError as e:
            (out_dir / f"{case['name']}.error").write_bytes(str(e).encode("utf-8"))
    return len(cases)


def generate_snippets(env):
    data = json.loads((FIXTURES / "snippets.json").read_text(encoding="utf-8"))
    results = []
    for snippet in data["snippets"]:
        context = dict(data["default_context"], **snippet.get("context", {}))
        result = {"template": snippet["template"]}
        try:
            template = env.from_string(snippet["template"])
        except Exception as e:  # TemplateSyntaxError, or SyntaxError from jinja's compiler
            result.update(error="syntax", message=f"{type(e).__name__}: {e}")
            results.append(result)
            continue
        try:
            result["output"] = template.render(**context)
        except Exception as e:
            result.update(error="render", message=f"{type(e).__name__}: {e}")
        results.append(result)
    (FIXTURES / "snippets_expected.json").write_text(
        json.dumps(results, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    return len(results)


def main():
    env = make_environment()
    num_cases = generate_cases(env)
    num_snippets = generate_snippets(env)
    print(f"jinja2 {jinja2.__version__}: {num_cases} cases, {num_snippets} snippets")
    return 0


if __name__ == "__main__":
    sys.exit(main())
