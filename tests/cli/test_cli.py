#!/usr/bin/env python3
"""End-to-end tests of the `deepinfer` binary: --help everywhere, `inspect` on both golden
checkpoints, and one clear error line (non-zero exit) for broken checkpoints and configs.
Usage: test_cli.py PATH/TO/deepinfer   (run by ctest)."""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

BINARY = None
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHARED = os.environ.get("DEEPINFER_SHARED_DIR", os.path.join(os.path.dirname(REPO), "shared"))
GOLDEN = os.path.join(SHARED, "testdata", "golden")


def run(*args, stdin=None):
    return subprocess.run([BINARY, *args], input=stdin, capture_output=True, text=True, timeout=300)


def error_lines(proc):
    return [line for line in proc.stderr.splitlines() if line.startswith("error:")]


class HelpTest(unittest.TestCase):
    def test_top_level_help_lists_subcommands(self):
        p = run("--help")
        self.assertEqual(p.returncode, 0, p.stderr)
        for sub in ("inspect", "tokenize", "detokenize", "chat-template", "env", "generate", "make-model"):
            self.assertIn(sub, p.stdout)

    def test_every_subcommand_has_help(self):
        for sub in ("inspect", "tokenize", "detokenize", "chat-template", "env", "generate", "make-model"):
            p = run(sub, "--help")
            self.assertEqual(p.returncode, 0, f"{sub}: {p.stderr}")
            self.assertIn("--help", p.stdout)

    def test_unknown_subcommand_fails(self):
        p = run("frobnicate")
        self.assertNotEqual(p.returncode, 0)

    def test_unknown_subcommand_is_named(self):
        for args, word in ((["nosuchcmd"], "nosuchcmd"), (["gen", "--prompt", "x"], "gen"),
                           (["bench", "nosuch"], "nosuch")):
            p = run(*args)
            self.assertEqual(p.returncode, 2, args)
            self.assertEqual(error_lines(p), [f"error: unknown command '{word}' (see --help)"], args)
        # no command at all is still "required"
        p = run()
        self.assertEqual(p.returncode, 2)
        self.assertIn("A subcommand is required", p.stderr)

    def test_int_options_past_their_type_say_so(self):
        # CLI11 said "Could not convert: --steps = 99999999999"
        for args in (["bench", "decode", "--model", "x", "--steps"], ["bench", "prefill", "--model", "x", "--timeline"],
                     ["bench", "serve", "--num-prompts"], ["bench", "serve", "--concurrency"],
                     ["bench", "serve", "--input-len"], ["bench", "serve", "--output-len"],
                     ["node", "--config", "x", "--rank"]):
            p = run(*args, "99999999999")
            self.assertEqual(p.returncode, 2, (args, p.stderr))
            self.assertEqual(len(error_lines(p)), 1, p.stderr)
            self.assertNotIn("Could not convert", p.stderr)
            self.assertIn(f"{args[-1]}: '99999999999' is ", error_lines(p)[0])
            self.assertIn("2147483647", error_lines(p)[0])

    def test_bench_values_out_of_range_are_usage_errors(self):
        # --steps 0 and the like exited 1 after the option parse ("--steps must be positive"),
        # where every other out-of-range value is a usage error (exit 2) naming the range
        cases = ((["bench", "decode", "--model", "x", "--steps", "0"], "--steps: '0' is out of range [1, 2147483647]"),
                 (["bench", "prefill", "--model", "x", "--timeline", "-1"],
                  "--timeline: '-1' is out of range [0, 2147483647]"),
                 (["bench", "decode", "--model", "x", "--batch", "1,0"], "--batch: '0' is not a positive integer"),
                 (["bench", "prefill", "--model", "x", "--context", "1,,2"], "--context: '1,,2' has an empty item"),
                 (["bench", "serve", "--num-prompts", "0"], "--num-prompts: '0' is out of range [1, 2147483647]"),
                 (["bench", "serve", "--concurrency", "-1"], "--concurrency: '-1' is out of range [0, 2147483647]"),
                 (["bench", "serve", "--input-len", "0"], "--input-len: '0' is out of range [1, 2147483647]"),
                 (["bench", "serve", "--output-len", "0"], "--output-len: '0' is out of range [1, 2147483647]"))
        for args, message in cases:
            p = run(*args)
            self.assertEqual(p.returncode, 2, (args, p.stderr))
            self.assertEqual(error_lines(p), [f"error: {message} (see --help)"], args)
        # the values at the bounds still get past the parse (to the missing model)
        p = run("bench", "decode", "--model", "/nonexistent", "--steps", "1", "--timeline", "0",
                "--batch", "1, 2", "--context", "+3")
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn("/nonexistent", p.stderr)

    def test_bench_help_flags_are_not_contradictory(self):
        # "--act-quant,--no-act-quant{false}" next to "(default on)" read as "default off"
        for phase in ("decode", "prefill"):
            p = run("bench", phase, "--help")
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertNotIn("{false}", p.stdout)
            self.assertIn("--no-act-quant", p.stdout)
            self.assertIn("--act-quant on|off", p.stdout)  # generate's spelling too (session 45)
            # decode's own options are decode's alone (prefill listed them and took them)
            for flag in ("--per-sequence-decode", "--batched-decode", "--cuda-graphs"):
                (self.assertIn if phase == "decode" else self.assertNotIn)(flag, p.stdout)
        p = run("bench", "prefill", "--model", "x", "--cuda-graphs", "both")
        self.assertEqual(p.returncode, 2)
        self.assertIn("--cuda-graphs", p.stderr)
        p = run("bench", "decode", "--model", "x", "--act-quant", "--no-act-quant")
        self.assertEqual(p.returncode, 2)

    def test_readme_lists_every_chat_template_flag(self):
        p = run("chat-template", "--help")
        flags = set(re.findall(r"^\s+(--[\w-]+)", p.stdout, re.M)) - {"--help"}
        self.assertIn("--continue-final-message", flags)
        with open(os.path.join(REPO, "README.md")) as f:
            row = next(line for line in f if line.startswith("| `deepinfer chat-template"))
        for flag in flags:
            self.assertIn(flag, row)

    def test_client_message_bound_out_of_range_is_refused(self):
        # checked before any connection is tried: the same range as cluster.max_message_bytes
        for value in ("10", "4294967296"):
            p = run("client", "--connect", "127.0.0.1:1", "--status", "--max-message-bytes", value)
            self.assertNotEqual(p.returncode, 0)
            self.assertIn(f"--max-message-bytes: '{value}' is out of range [1048576, 4294967295]", p.stderr)
        # a negative timeout said "not in range 0.000000 to " and DBL_MAX's ~310 digits
        p = run("client", "--connect", "127.0.0.1:1", "--status", "--connection-timeout-ms", "-1")
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("--connection-timeout-ms: must be a non-negative integer, got '-1'", p.stderr)
        self.assertLess(len(p.stderr), 200, p.stderr)

    def test_number_options_say_what_is_wrong_in_one_short_line(self):
        # CLI11's wording: "Value 70000 not in range 0 to 65535", "Could not convert: --temperature
        # = abc", and for --classify-ms -1 "not in range 0.000000 to " with DBL_MAX's ~310 digits
        cases = ((["serve", "--model", "x", "--port", "70000"], "--port: '70000' is out of range [0, 65535]"),
                 (["serve", "--model", "x", "--port", "-1"], "--port: '-1' is out of range [0, 65535]"),
                 (["generate", "--prompt", "x", "--temperature", "abc"], "--temperature: 'abc' is not a number"),
                 (["generate", "--prompt", "x", "--top-p", "0.5x"], "--top-p: '0.5x' is not a number"),
                 (["bench", "serve", "--timeout", "abc"], "--timeout: 'abc' is not a number"),
                 (["grammar", "bench", "--tokenizer", "x", "--schemas", "y", "--classify-ms", "-1"],
                  "--classify-ms: must be a non-negative number, got '-1'"),
                 (["grammar", "bench", "--tokenizer", "x", "--schemas", "y", "--classify-ms", "nan"],
                  "--classify-ms: must be a non-negative number, got 'nan'"))
        for args, message in cases:
            p = run(*args)
            self.assertEqual(p.returncode, 2, (args, p.stderr))
            self.assertEqual(error_lines(p), [f"error: {message} (see --help)"], args)
            self.assertLess(len(p.stderr), 200, p.stderr)
        # what was read before still is: a float in any spelling CLI11 takes, a port at the bounds
        p = run("serve", "--help")
        self.assertIn("--port INT:in [0, 65535]", p.stdout)
        p = run("grammar", "bench", "--tokenizer", "/nonexistent", "--schemas", "/nonexistent", "--classify-ms", "1e1")
        self.assertNotIn("--classify-ms", p.stderr)

    def test_client_names_why_the_router_cannot_be_reached(self):
        # CAF 0.17 says only "ip_connect failed"; the client names the cause and what --connect takes
        import socket
        with socket.socket() as s:  # a port that was just free: nothing listens on it
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        p = run("client", "--connect", f"127.0.0.1:{port}", "--prompt", "hi")
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertEqual(error_lines(p), [f"error: cannot connect to the router at 127.0.0.1:{port}: Connection "
                                          "refused (is the cluster running? --connect takes the HOST:PORT of "
                                          "launch's `ready:` line)"])
        p = run("client", "--connect", "no-such-host.invalid:7000", "--prompt", "hi")
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertNotIn("ip_connect failed", p.stderr)
        self.assertIn("cannot connect to the router at no-such-host.invalid:7000: ", p.stderr)

    def test_serve_in_process_needs_config(self):
        # --in-process beside --model was taken and ignored (--model runs in-process anyway)
        p = run("serve", "--model", "/nonexistent", "--in-process")
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertEqual(error_lines(p),
                         ["error: --in-process goes with --config (--model already runs the model in this process)"])

    def test_response_format_error_lists_what_help_offers(self):
        # the error listed tool_calls, a kind the server makes and --help does not offer
        p = run("generate", "--help")
        m = re.search(r"--response-format TEXT\s+Structured output: (.*?); JSON kinds", p.stdout, re.S)
        self.assertIsNotNone(m, p.stdout)
        offered = " ".join(m.group(1).split())
        self.assertEqual(offered, "json_schema:FILE, json_object, regex:PATTERN or ebnf:FILE")
        for spec, kind in (("foo", "foo"), ("tool_calls:tools.json", "tool_calls"), ("after:1:xregex:a", "after")):
            p = run("generate", "--prompt", "x", "--max-tokens", "1", "--response-format", spec)
            self.assertEqual(p.returncode, 1, (spec, p.stderr))
            self.assertEqual(error_lines(p), [f"error: unknown response format '{kind}' (expected {offered})"], spec)


class InspectTest(unittest.TestCase):
    def inspect_json(self, model):
        p = run("inspect", "--model", model, "--json")
        return p, (json.loads(p.stdout) if p.stdout.strip() else None)

    def test_golden_v41(self):
        p, j = self.inspect_json(os.path.join(GOLDEN, "v41_public"))
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertTrue(j["matches"])
        self.assertEqual(j["model_type"], "deepseek_v41")
        self.assertEqual(j["tensors"]["expected"], 821)
        self.assertEqual(j["tensors"]["found"], 821)
        self.assertEqual(j["tensors"]["missing"], [])
        self.assertEqual(j["tensors"]["unexpected"], [])
        self.assertEqual(sum(j["bytes_per_dtype"].values()), j["total_bytes"])
        # routed experts: 10 layers x 8 experts x 3 matrices x 64*32 params
        self.assertEqual(j["params_per_group"]["routed experts"], 10 * 8 * 3 * 64 * 32)

    def test_golden_v4(self):
        p, j = self.inspect_json(os.path.join(GOLDEN, "v4_public"))
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertTrue(j["matches"])
        self.assertEqual(j["model_type"], "deepseek_v4")
        self.assertEqual(j["tensors"]["found"], 498)
        self.assertEqual(j["params_per_group"]["routed experts"], 6 * 8 * 3 * 128 * 128)
        self.assertIn("I64", j["bytes_per_dtype"])  # tid2eid of the hash-routed layers

    def test_text_report(self):
        p = run("inspect", "--model", os.path.join(GOLDEN, "v41_public"))
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("KV source", p.stdout)
        self.assertIn("engram", p.stdout)
        self.assertIn("821 expected, 821 found, 0 missing", p.stdout)

    def test_config_implying_more_experts_reports_missing_tensors(self):
        with tempfile.TemporaryDirectory() as d:
            src = os.path.join(GOLDEN, "v4_public")
            for f in ("model.safetensors", "model.safetensors.index.json"):
                os.symlink(os.path.join(src, f), os.path.join(d, f))
            with open(os.path.join(src, "config.json")) as f:
                cfg = json.load(f)
            cfg["n_routed_experts"] = 9
            with open(os.path.join(d, "config.json"), "w") as f:
                json.dump(cfg, f)
            p = run("inspect", "--model", d)
            self.assertEqual(p.returncode, 1)
            self.assertIn("missing: layers.0.ffn.experts.8.w1.weight", p.stderr)
            self.assertIn("wrong: layers.0.ffn.gate.weight", p.stderr)  # [8, 128] vs [9, 128]
            errs = error_lines(p)
            self.assertEqual(len(errs), 1, p.stderr)
            self.assertIn("checkpoint does not match its config", errs[0])

    def test_broken_inputs_give_one_error_line(self):
        with tempfile.TemporaryDirectory() as d:
            # no config.json at all
            p = run("inspect", "--model", d)
            self.assertEqual(p.returncode, 1)
            self.assertEqual(len(error_lines(p)), 1, p.stderr)
            self.assertIn("config.json", error_lines(p)[0])
            # valid config, truncated safetensors
            shutil.copy(os.path.join(GOLDEN, "v4_public", "config.json"), d)
            with open(os.path.join(GOLDEN, "v4_public", "model.safetensors"), "rb") as f:
                head = f.read(4096)
            with open(os.path.join(d, "model.safetensors"), "wb") as f:
                f.write(head)
            p = run("inspect", "--model", d)
            self.assertEqual(p.returncode, 1)
            self.assertEqual(len(error_lines(p)), 1, p.stderr)
            self.assertIn("model.safetensors", error_lines(p)[0])
            # config that is not JSON
            with open(os.path.join(d, "config.json"), "w") as f:
                f.write("{not json")
            p = run("inspect", "--model", d)
            self.assertEqual(p.returncode, 1)
            self.assertIn("not valid JSON", p.stderr)

    def test_bytes_that_do_not_print_are_escaped_in_the_error_line(self):
        # A tokenizer file's invalid UTF-8 byte came through nlohmann's "last read: '...'" raw,
        # and an argument's ESC or newline reached the terminal / split the line: the line is
        # printable ASCII now, the bytes written \xHH.
        def error_bytes(args, stdin=b""):
            p = subprocess.run([BINARY, *args], input=stdin, capture_output=True, timeout=60)
            self.assertEqual(p.returncode, 1, p.stderr)
            self.assertTrue(p.stderr.endswith(b"\n"), p.stderr)
            line = p.stderr[:-1]
            self.assertTrue(all(32 <= b < 127 for b in line), p.stderr)  # one line, all printable
            return line.decode()
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "tokenizer.json"), "wb") as f:
                f.write(b'{"model": \xff\x1b[2J')
            self.assertIn("""tokenizer.json: not valid JSON: parse error at line 1, column 11: syntax error """
                          """while parsing value - invalid literal; last read: '"model": \\xFF'""",
                          error_bytes(["tokenize", "--tokenizer", d], b'{"text": "a"}\n'))
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "tokenizer_config.json"), "wb") as f:
                f.write(b'{"chat_template": "\xff')
            self.assertIn("""tokenizer_config.json: invalid JSON: parse error at line 1, column 20: """
                          """syntax error while parsing value - invalid string: ill-formed UTF-8 byte; """
                          """last read: '"\\xFF'""",
                          error_bytes(["chat-template", "--tokenizer", d], b'[{"role": "user", "content": "hi"}]'))
        self.assertEqual(error_bytes(["inspect", "--model", "x\x1b[2J\n"]),
                         "error: --model: 'x\\x1B[2J\\n': no such directory")

    def test_missing_required_option(self):
        p = run("inspect")
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("--model", p.stderr)


class ChatTemplateTest(unittest.TestCase):
    TOKENIZER = os.path.join(REPO, "assets", "deepseek-v3-tokenizer")

    def test_renders_the_deepseek_template(self):
        messages = [{"role": "system", "content": "Be brief."},
                    {"role": "user", "content": "Hi"},
                    {"role": "assistant", "content": "Hello!"},
                    {"role": "user", "content": "2+2?"}]
        p = run("chat-template", "--tokenizer", self.TOKENIZER, stdin=json.dumps(messages))
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stdout, "<\uff5cbegin\u2581of\u2581sentence\uff5c>Be brief."
                         "<\uff5cUser\uff5c>Hi<\uff5cAssistant\uff5c>Hello!<\uff5cend\u2581of\u2581sentence\uff5c>"
                         "<\uff5cUser\uff5c>2+2?<\uff5cAssistant\uff5c>")
        p = run("chat-template", "--tokenizer", self.TOKENIZER, "--no-generation-prompt",
                stdin=json.dumps(messages))
        self.assertTrue(p.stdout.endswith("2+2?"), p.stdout)

    def test_malformed_messages_give_one_error_line(self):
        p = run("chat-template", "--tokenizer", self.TOKENIZER, stdin="[{\"role\": ")
        self.assertEqual(p.returncode, 1)
        self.assertEqual(len(error_lines(p)), 1, p.stderr)

    def test_template_errors_name_the_position(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "bad.jinja")
            with open(path, "w") as f:
                f.write("{% for m in messages %}{{ m.content | nosuchfilter }}{% endfor %}")
            p = run("chat-template", "--template", path, stdin="[]")
            self.assertEqual(p.returncode, 1)
            errs = error_lines(p)
            self.assertEqual(len(errs), 1, p.stderr)
            self.assertIn("nosuchfilter", errs[0])


class GrammarCheckTest(unittest.TestCase):
    def test_an_unreadable_grammar_file_is_an_input_error(self):
        # a missing --ebnf / --json-schema file said "the grammar does not compile: F: cannot
        # open" with the compile-error code 2; it is an input error (1), as a missing --strings
        # file or `generate --chat missing.json` is
        with tempfile.TemporaryDirectory() as d:
            strings = os.path.join(d, "s.jsonl")
            with open(strings, "w") as f:
                f.write('{"text": "a"}\n')
            missing = os.path.join(d, "missing")
            for opt in ("--ebnf", "--json-schema"):
                p = run("grammar", "check", opt, missing, "--strings", strings)
                self.assertEqual(p.returncode, 1, (opt, p.stderr))
                self.assertEqual(error_lines(p), [f"error: {opt}: {missing}: cannot open: No such file or directory"])
                self.assertEqual(p.stdout, "")
            p = run("grammar", "check", "--ebnf", d, "--strings", strings)
            self.assertEqual(p.returncode, 1, p.stderr)
            self.assertEqual(error_lines(p), [f"error: --ebnf: {d}: is a directory, not a file"])
            p = run("grammar", "check", "--regex", "a", "--strings", missing)
            self.assertEqual(p.returncode, 1, p.stderr)
            # a grammar that does not compile keeps exit code 2
            bad = os.path.join(d, "bad.gbnf")
            with open(bad, "w") as f:
                f.write("root ::= (\n")
            p = run("grammar", "check", "--ebnf", bad, "--strings", strings)
            self.assertEqual(p.returncode, 2, p.stderr)
            self.assertIn("error: the grammar does not compile", error_lines(p)[0])

    def test_help_gives_the_exit_codes(self):
        p = run("grammar", "check", "--help")
        self.assertEqual(p.returncode, 0, p.stderr)
        text = " ".join(p.stdout.split())
        for words in ("Exit codes: 0 checked", "1 an input that cannot be read",
                      "2 a usage error or a grammar that does not compile"):
            self.assertIn(words, text)


class GrammarBenchTest(unittest.TestCase):
    TOKENIZER = os.path.join(REPO, "assets", "deepseek-v3-tokenizer")
    ROWS = [
        {"id": "obj", "schema": {"type": "object", "properties": {"a": {"type": "integer"},
                                                                  "b": {"enum": ["x", "y"]}},
                                 "required": ["a"], "additionalProperties": False},
         "tests": [{"data": {"a": 12, "b": "y"}, "valid": True}]},
        {"id": "arr", "schema": {"type": "array", "items": {"type": "boolean"}, "maxItems": 3},
         "tests": [{"data": [True, False], "valid": True}]},
    ]

    def bench(self, *flags):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "s.jsonl")
            with open(path, "w") as f:
                f.write("".join(json.dumps(r) + "\n" for r in self.ROWS))
            return run("grammar", "bench", "--tokenizer", self.TOKENIZER, "--schemas", path,
                       "--json", *flags)

    def test_classify_ms_classifies_small_grammars_before_the_first_mask(self):
        p = self.bench("--classify-ms", "60000")
        self.assertEqual(p.returncode, 0, p.stderr)
        j = json.loads(p.stdout)
        self.assertEqual(j["compiled"], 2)
        self.assertEqual(j["fully_classified"], 2)  # both fit the budget
        self.assertEqual(j["classify_ms"], 60000)
        self.assertEqual(j["mask_violations"], 0)
        self.assertEqual(j["refused_tokens"], 0)
        lazy = json.loads(self.bench().stdout)
        self.assertEqual(lazy["fully_classified"], 0)  # none asked for
        self.assertEqual(lazy["mask_violations"], 0)

    def test_classify_ms_excludes_precompute(self):
        p = self.bench("--classify-ms", "10", "--precompute")
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("excludes", p.stderr)


if __name__ == "__main__":
    BINARY = os.path.abspath(sys.argv.pop(1))
    unittest.main(verbosity=2)
