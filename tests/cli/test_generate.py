#!/usr/bin/env python3
"""End-to-end tests of `deepinfer generate` on a generated tiny-v41 checkpoint: JSON output,
seeds, logprobs consistency between the prefill and decode paths, stop strings, and clear
errors for bad input. Usage: test_generate.py PATH/TO/deepinfer (run by ctest)."""
import json
import math
import os
import pty
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

BINARY = None
MODEL = None
WORK = None


def run(*args, stdin=None):
    return subprocess.run([BINARY, *args], input=stdin, capture_output=True, text=True, timeout=600)


def gen_json(*args):
    p = run("generate", "--model", MODEL, "--json", *args)
    if p.returncode != 0:
        raise AssertionError(p.stderr)
    return json.loads(p.stdout)


def error_lines(p):
    return [line for line in p.stderr.splitlines() if line.startswith("error:")]


class GenerateTest(unittest.TestCase):
    def test_json_shape_and_greedy_determinism(self):
        a = gen_json("--prompt", "The capital of France is", "--max-tokens", "8", "--temperature", "0")
        self.assertEqual(a["prompt_ids"][0], 0)  # BOS from tokenizer_config.json
        self.assertEqual(len(a["output_ids"]), 8)
        self.assertEqual(a["finish_reason"], "length")
        self.assertIsInstance(a["text"], str)
        b = gen_json("--prompt", "The capital of France is", "--max-tokens", "8", "--temperature", "0")
        self.assertEqual(a["output_ids"], b["output_ids"])

    def test_seeds(self):
        args = ["--prompt-ids", "0,100,200,300", "--max-tokens", "12", "--temperature", "1.0"]
        a = gen_json(*args, "--seed", "7")
        b = gen_json(*args, "--seed", "7")
        c = gen_json(*args, "--seed", "8")
        self.assertEqual(a["output_ids"], b["output_ids"])
        self.assertNotEqual(a["output_ids"], c["output_ids"])
        self.assertEqual(a["seed"], 7)
        # Any printed seed replays, 2^63 and above too (they were clamped to 2^63 - 1), and an
        # unseeded run's printed seed reproduces it.
        for seed in ("9223372036854775808", "18446744073709551615"):
            d = gen_json(*args, "--seed", seed)
            self.assertEqual(str(d["seed"]), seed)
            self.assertEqual(gen_json(*args, "--seed", seed)["output_ids"], d["output_ids"])
        self.assertNotEqual(gen_json(*args, "--seed", "9223372036854775807")["output_ids"],
                            gen_json(*args, "--seed", "9223372036854775808")["output_ids"])
        e = gen_json(*args)
        self.assertEqual(gen_json(*args, "--seed", str(e["seed"]))["output_ids"], e["output_ids"])
        # an empty --prompt is BOS alone
        self.assertEqual(gen_json("--prompt", "", "--max-tokens", "2")["prompt_ids"], [0])

    def test_n_generations_are_one_batch_equal_to_single_runs(self):
        # --n decodes the generations together; each must equal a run of its own with its seed
        # (the engine is batch-invariant), in order, with seeds seed, seed + 1, ...
        args = ["--prompt-ids", "0,100,200,300", "--max-tokens", "10", "--temperature", "1.0"]
        p = run("generate", "--model", MODEL, "--json", *args, "--seed", "11", "--n", "3")
        self.assertEqual(p.returncode, 0, p.stderr)
        lines = [json.loads(line) for line in p.stdout.splitlines()]
        self.assertEqual([r["seed"] for r in lines], [11, 12, 13])
        for r in lines:
            single = gen_json(*args, "--seed", str(r["seed"]))
            self.assertEqual(r["output_ids"], single["output_ids"])
            self.assertEqual(len(r["output_ids"]), 10)
        self.assertNotEqual(lines[0]["output_ids"], lines[1]["output_ids"])

    def test_logprobs_are_sorted_and_greedy_picks_the_top(self):
        r = gen_json("--prompt-ids", "0,5,6,7", "--max-tokens", "5", "--temperature", "0", "--logprobs", "4")
        self.assertEqual(len(r["logprobs"]), 5)
        for token, top, lp in zip(r["output_ids"], r["logprobs"], r["token_logprobs"]):
            self.assertEqual(len(top), 4)
            values = [v for _, v in top]
            self.assertEqual(values, sorted(values, reverse=True))
            self.assertEqual(top[0][0], token)
            self.assertAlmostEqual(top[0][1], lp, places=5)
            self.assertLessEqual(sum(math.exp(v) for v in values), 1.0 + 1e-5)

    def test_prompt_logprobs_match_decode_logprobs(self):
        # Decode-path logprobs of generated tokens == prefill-path prompt logprobs of the same
        # tokens fed back as a prompt (entry i predicts token i; entry 0 is null).
        prompt = [0, 11, 12, 13, 14]
        r = gen_json("--prompt-ids", ",".join(map(str, prompt)), "--max-tokens", "6",
                     "--temperature", "0", "--logprobs", "3")
        full = prompt + r["output_ids"][:-1]
        q = gen_json("--prompt-ids", ",".join(map(str, full)), "--max-tokens", "1",
                     "--temperature", "0", "--prompt-logprobs", "3")
        self.assertIsNone(q["prompt_logprobs"][0])
        self.assertEqual(len(q["prompt_logprobs"]), len(full))
        for k, token in enumerate(r["output_ids"][:-1]):
            i = len(prompt) + k
            self.assertAlmostEqual(q["prompt_token_logprobs"][i], r["token_logprobs"][k], places=3)
            self.assertEqual([t for t, _ in q["prompt_logprobs"][i]], [t for t, _ in r["logprobs"][k]])
        self.assertEqual(q["output_ids"][0], r["output_ids"][-1])

    def test_stop_string(self):
        r = gen_json("--prompt-ids", "0,1000,2000", "--max-tokens", "12", "--temperature", "0")
        text = r["text"]
        self.assertGreaterEqual(len(text), 4, text)
        cut = text[2:4]
        s = gen_json("--prompt-ids", "0,1000,2000", "--max-tokens", "12", "--temperature", "0",
                     "--stop", cut)
        self.assertEqual(s["finish_reason"], "stop")
        self.assertEqual(s["text"], text[:text.index(cut)])

    def test_streaming_text_equals_json_text(self):
        args = ["--prompt-ids", "0,42,43", "--max-tokens", "10", "--temperature", "0"]
        p = run("generate", "--model", MODEL, "--no-stats", *args)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stdout, gen_json(*args)["text"] + "\n")
        # the decode rate counts the tokens after the first (that one is the prefill's)
        p = run("generate", "--model", MODEL, "--ignore-eos", *args)
        self.assertIn("10 generated, the 9 after the first in", p.stderr)

    def test_chat_input(self):
        path = os.path.join(WORK, "chat.json")
        with open(path, "w") as f:
            json.dump([{"role": "user", "content": "Hi"}], f)
        r = gen_json("--chat", path, "--max-tokens", "3", "--temperature", "0")
        self.assertEqual(r["prompt_ids"][0], 0)
        self.assertEqual(len(r["output_ids"]), 3)
        # The server's message rules: "developer" renders as "system", text parts are joined with
        # a newline (as vLLM joins them).
        with open(path, "w") as f:
            json.dump({"messages": [{"role": "developer", "content": "Be brief."},
                                    {"role": "user", "content": [{"type": "text", "text": "H"},
                                                                 {"type": "text", "text": "i"}]}]}, f)
        a = gen_json("--chat", path, "--max-tokens", "1", "--temperature", "0")
        with open(path, "w") as f:
            json.dump([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "H\ni"}], f)
        b = gen_json("--chat", path, "--max-tokens", "1", "--temperature", "0")
        self.assertEqual(a["prompt_ids"], b["prompt_ids"])

    def test_chat_takes_an_assistant_refusal_part_as_the_server_does(self):
        # {"type": "refusal", "refusal": ...} in an assistant message (OpenAI's schema): its text
        # is the message's content, as on the chat endpoint; in a user message it stays an error
        convo = [{"role": "user", "content": "hi"},
                 {"role": "assistant", "content": [{"type": "refusal", "refusal": "No."}]},
                 {"role": "user", "content": "why"}]
        as_text = [dict(m, content="No.") if m["role"] == "assistant" else m for m in convo]
        outs = []
        for messages in (convo, as_text):
            path = os.path.join(WORK, "refusal.json")
            with open(path, "w") as f:
                json.dump(messages, f)
            outs.append(gen_json("--chat", path, "--max-tokens", "3", "--temperature", "0"))
        self.assertEqual(outs[0]["prompt_ids"], outs[1]["prompt_ids"])
        with open(path, "w") as f:
            json.dump([{"role": "user", "content": [{"type": "refusal", "refusal": "x"}]}], f)
        p = run("generate", "--model", MODEL, "--chat", path)
        self.assertEqual(p.returncode, 1)
        self.assertIn("messages[0].content: only text content parts", error_lines(p)[0])

    def test_chat_messages_the_template_would_drop_are_errors(self):
        cases = [([{"role": 5, "content": "Hi"}], "messages[0].role: a message needs a string 'role'"),
                 ([{"role": "user", "content": "Hi"}, {"role": "usr", "content": "x"}],
                  "messages[1].role: unknown role 'usr'"),
                 ([{"role": "user"}], "messages[0].content: only assistant messages may omit 'content'"),
                 ([{"role": "user", "content": [{"type": "image_url"}]}], "only text content parts"),
                 ([], "messages: 'messages' must be a non-empty list"),
                 (["Hi"], "messages[0]: each message must be an object"),
                 ([{"role": "user", "content": "a"}, {"role": "assistant"}],
                  "messages[1].content: an assistant message needs 'content' or a non-empty 'tool_calls'"),
                 ({"messages": [{"role": "user", "content": "Hi"}], "tools": "x"}, "'tools' must be a list"),
                 ({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3},
                  "'max_tokens' is not read from the file")]
        path = os.path.join(WORK, "bad_chat.json")
        for messages, expect in cases:
            with open(path, "w") as f:
                json.dump(messages, f)
            p = run("generate", "--model", MODEL, "--chat", path, "--max-tokens", "1")
            self.assertEqual(p.returncode, 1, f"{messages}: {p.stderr}")
            errs = error_lines(p)
            self.assertEqual(len(errs), 1, f"{messages}: {p.stderr}")
            self.assertIn(expect, errs[0], messages)

    def test_chat_file_template_fields_and_depth(self):
        path = os.path.join(WORK, "chat_fields.json")
        msgs = [{"role": "user", "content": "Hi"}]
        with open(path, "w") as f:
            json.dump(msgs, f)
        full = gen_json("--chat", path, "--max-tokens", "1", "--temperature", "0")["prompt_ids"]
        # the chat endpoint's add_generation_prompt reaches the template: no assistant header
        with open(path, "w") as f:
            json.dump({"messages": msgs, "add_generation_prompt": False}, f)
        bare = gen_json("--chat", path, "--max-tokens", "1", "--temperature", "0")["prompt_ids"]
        self.assertEqual(bare, full[:-1])
        # a deeply nested document is refused before it is copied (it overflowed the stack)
        deep = '[{"role": "user", "content": "x", "e": ' + "[" * 150000 + "]" * 150000 + "}]"
        with open(path, "w") as f:
            f.write(deep)
        p = run("generate", "--model", MODEL, "--chat", path, "--max-tokens", "1")
        self.assertEqual(p.returncode, 1, p.stderr[-300:])
        self.assertIn("nested more than 512 levels deep", error_lines(p)[0])
        p = run("chat-template", "--tokenizer", MODEL, stdin="[" * 150000 + "]" * 150000)
        self.assertEqual(p.returncode, 1, p.stderr[-300:])
        self.assertIn("stdin is nested more than 512 levels deep", error_lines(p)[0])
        # a key given twice was taken silently, the last one winning (a user message rendered
        # as a system one); syntax errors carry no nlohmann tag
        dup = '[{"role": "user", "content": "Hi", "role": "system"}]'
        with open(path, "w") as f:
            f.write(dup)
        p = run("generate", "--model", MODEL, "--chat", path, "--max-tokens", "1")
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn("key 'role' is given twice in one object", error_lines(p)[0])
        p = run("chat-template", "--tokenizer", MODEL, stdin=dup)
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn("stdin: key 'role' is given twice in one object", error_lines(p)[0])
        p = run("chat-template", "--tokenizer", MODEL, stdin='[{"role": "user" "content": "x"}]')
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn("stdin is not valid JSON: parse error at line 1", error_lines(p)[0])
        self.assertNotIn("json.exception", p.stderr)

    def test_deep_json_inputs_are_errors_not_crashes(self):
        # echoing (or compiling) a value nested 60,000+ levels deep overflowed the stack: SIGSEGV
        deep = "[" * 100000 + "]" * 100000
        schema = os.path.join(WORK, "deep-schema.json")
        strings = os.path.join(WORK, "deep-strings.jsonl")
        with open(schema, "w") as f:
            f.write(deep)
        with open(strings, "w") as f:
            f.write('{"text": "1"}\n')
        for args, rc in ((["grammar", "check", "--json-schema", schema, "--strings", strings], 2),
                         (["generate", "--model", MODEL, "--prompt", "hi", "--max-tokens", "1",
                           "--response-format", "json_schema:" + schema], 1)):
            p = run(*args)
            self.assertEqual(p.returncode, rc, (args, p.stderr[-300:]))
            self.assertIn("not valid JSON: nested deeper than 512 levels", error_lines(p)[0])
        for cmd, line in (("tokenize", '{"text": ' + deep + "}"), ("tokenize", deep),
                          ("detokenize", '{"ids": ' + deep + "}")):
            p = run(cmd, "--tokenizer", MODEL, stdin=line + "\n")
            self.assertEqual(p.returncode, 1, (cmd, p.stderr[-300:]))
            err = error_lines(p)[0]
            self.assertIn("stdin line 1: ", err)
            self.assertLess(len(err), 400, err)  # the value is echoed in brief

    def test_lenient_schema_names_what_it_skipped(self):
        # `+lenient` / `grammar check --lenient` skip keywords that cannot be enforced, and an
        # unknown keyword or format is an annotation: the README's "they become warnings" was
        # never printed (the warnings were dropped), so a skipped uniqueItems or a misspelt
        # "maxLenght" left no trace.
        schema = os.path.join(WORK, "lenient-schema.json")
        strings = os.path.join(WORK, "lenient-strings.jsonl")
        with open(schema, "w") as f:
            json.dump({"type": "array", "items": {"type": "string", "maxLenght": 3, "format": "color"},
                       "uniqueItems": True, "maxItems": 2}, f)
        with open(strings, "w") as f:
            f.write('{"text": "[\\"a\\",\\"a\\"]"}\n')
        for args in (["grammar", "check", "--lenient", "--json-schema", schema, "--strings", strings],
                     ["generate", "--model", MODEL, "--prompt", "x", "--max-tokens", "2", "--seed", "1",
                      "--response-format", "json_schema+lenient:" + schema]):
            p = run(*args)
            self.assertEqual(p.returncode, 0, (args, p.stderr))
            warnings = [line for line in p.stderr.splitlines() if line.startswith("warning:")]
            for word in ("'uniqueItems'", "'maxLenght'", "'color'"):
                self.assertEqual(sum(word in w for w in warnings), 1, (args, word, p.stderr))
        self.assertEqual(run("grammar", "check", "--lenient", "--json-schema", schema, "--strings",
                             strings).stdout, '{"accepted": true}\n')

    def test_act_quant_off_changes_numerics_not_shape(self):
        a = gen_json("--prompt-ids", "0,7,8", "--max-tokens", "2", "--temperature", "0", "--logprobs", "1")
        b = gen_json("--prompt-ids", "0,7,8", "--max-tokens", "2", "--temperature", "0", "--logprobs", "1",
                     "--act-quant", "off")
        self.assertEqual(len(b["output_ids"]), 2)
        self.assertNotEqual(a["token_logprobs"], b["token_logprobs"])
        # bench's spelling works too
        c = gen_json("--prompt-ids", "0,7,8", "--max-tokens", "2", "--temperature", "0", "--logprobs", "1",
                     "--no-act-quant")
        self.assertEqual(c["token_logprobs"], b["token_logprobs"])

    def test_bench_reports_against_measured_bandwidth(self):
        p = run("bench", "decode", "--model", MODEL, "--batch", "1,2", "--context", "16", "--steps", "2", "--json")
        self.assertEqual(p.returncode, 0, p.stderr)
        j = json.loads(p.stdout)
        self.assertGreater(j["copy_gbs"], 0)
        self.assertEqual([r["batch"] for r in j["results"]], [1, 2])
        for r in j["results"]:
            self.assertGreater(r["tokens_per_s"], 0)
            self.assertAlmostEqual(r["bytes_read"], r["weight_bytes"] + r["cache_bytes"], delta=1)
            self.assertAlmostEqual(r["share_of_copy"], r["achieved_gbs"] / j["copy_gbs"], places=6)
        # a second sequence touches more routed experts
        self.assertGreater(j["results"][1]["weight_bytes"], j["results"][0]["weight_bytes"])
        p = run("bench", "prefill", "--model", MODEL, "--context", "8", "--steps", "2", "--json")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertGreater(json.loads(p.stdout)["results"][0]["tokens_per_s"], 0)
        p = run("bench", "decode", "--model", MODEL, "--batch", "0")
        self.assertEqual(p.returncode, 2)  # a usage error, as every option's range (exit 1 before)
        self.assertIn("--batch", error_lines(p)[0])
        p = run("bench", "decode", "--model", MODEL, "--device", "tpu")
        self.assertEqual(p.returncode, 1)
        self.assertIn("expected cpu, cuda or cuda:N", error_lines(p)[0])
        # CUDA-only flags on the CPU were ignored (--cuda-graphs both printed one row a batch)
        for flag in (["--cuda-graphs", "both"], ["--logits", "host"], ["--per-sequence-decode"],
                     ["--device-weights", "f32"]):
            p = run("bench", "decode", "--model", MODEL, "--steps", "1", *flag)
            self.assertEqual(p.returncode, 1, flag)
            self.assertIn(f"{flag[0]} is for CUDA runs: it needs --device cuda", error_lines(p)[0])

    def test_bench_takes_generates_act_quant_spellings(self):
        # bench had only the flags --act-quant / --no-act-quant: `--act-quant off` (generate's
        # spelling) was a usage error there
        for args, is_on in (([], True), (["--act-quant", "on"], True), (["--act-quant=off"], False),
                            (["--act-quant", "off"], False), (["--no-act-quant"], False)):
            p = run("bench", "decode", "--model", MODEL, "--batch", "1", "--context", "8", "--steps", "1",
                    "--json", *args)
            self.assertEqual(p.returncode, 0, (args, p.stderr))
            self.assertIs(json.loads(p.stdout)["act_quant"], is_on, args)
        p = run("bench", "prefill", "--model", MODEL, "--context", "8", "--steps", "1", "--act-quant", "off")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("| act-quant off", p.stdout.splitlines()[0])
        for cmd in (["bench", "decode"], ["generate", "--prompt", "x"]):
            p = run(*cmd, "--model", MODEL, "--act-quant", "maybe")
            self.assertEqual(p.returncode, 2, (cmd, p.stderr))
            self.assertEqual(error_lines(p), ["error: --act-quant: must be on or off, got 'maybe' (see --help)"], cmd)
            p = run(*cmd, "--model", MODEL, "--act-quant", "off", "--no-act-quant")
            self.assertEqual(p.returncode, 2, (cmd, p.stderr))
            self.assertIn("--act-quant excludes --no-act-quant", error_lines(p)[0], cmd)

    def test_unusable_cuda_device_is_a_clear_error(self):
        # Checked before the model loads; the reason depends on the machine: a build without the
        # backend, no usable device (CI: no GPU), or an index past the visible devices.
        env = run("env").stdout
        no_gpu = "cuda devices: none" in env or "cuda backend: built" not in env
        for args in (("generate", "--prompt", "hi", "--max-tokens", "2"),
                     ("bench", "decode", "--model", MODEL, "--steps", "1")):
            devices = ["cuda", "cuda:0"] if no_gpu else []
            for dev in devices + ["cuda:999"]:
                p = run(*args, "--device", dev)
                self.assertEqual(p.returncode, 1, p.stdout)
                line = error_lines(p)[0]
                self.assertIn(f"device '{'cuda:0' if dev == 'cuda' else dev}'", line)
                if no_gpu:
                    self.assertTrue("no usable CUDA device" in line or "no CUDA backend" in line, line)
                    self.assertIn("--device cpu", line)
                else:
                    self.assertIn("CUDA device(s) visible", line)
                self.assertNotIn("in cudaGetDevice", line)
        p = run("bench", "decode", "--model", MODEL, "--ordered-splits")  # a CUDA-only switch
        self.assertEqual(p.returncode, 1)
        self.assertIn("--ordered-splits needs --device cuda", error_lines(p)[0])
        p = run("bench", "decode", "--model", MODEL, "--logits", "gpu")
        self.assertEqual(p.returncode, 1)
        self.assertIn("--logits must be device or host", error_lines(p)[0])
        p = run("bench", "decode", "--model", MODEL, "--cuda-graphs", "maybe")  # before the load
        self.assertEqual(p.returncode, 1)
        self.assertIn("--cuda-graphs must be off, on or both", error_lines(p)[0])
        p = run("bench", "decode", "--model", MODEL, "--timeline", "4")  # CUDA decode only
        self.assertEqual(p.returncode, 1)
        self.assertIn("--timeline traces CUDA steps: it needs --device cuda", error_lines(p)[0])
        p = run("bench", "decode", "--model", MODEL, "--timeline", "-1")
        self.assertEqual(p.returncode, 2)
        self.assertIn("--timeline: '-1' is out of range [0, 2147483647]", error_lines(p)[0])
        p = run("bench", "prefill", "--model", MODEL, "--timeline", "2")  # CUDA prefill too
        self.assertEqual(p.returncode, 1)
        self.assertIn("--timeline traces CUDA steps: it needs --device cuda", error_lines(p)[0])
        # a context past the model's positions is refused before any row runs
        p = run("bench", "decode", "--model", MODEL, "--context", "1100000", "--steps", "1")
        self.assertEqual(p.returncode, 1)
        self.assertIn("the sequences reach 1100002 positions", error_lines(p)[0])
        self.assertIn("max_position_embeddings", error_lines(p)[0])
        # on the CPU the logits are host memory either way; the JSON says so
        p = run("bench", "decode", "--model", MODEL, "--context", "8", "--steps", "1", "--json")
        self.assertEqual(json.loads(p.stdout)["logits"], "host")

    def test_bad_input_gives_one_clear_error(self):
        bad_schema = os.path.join(WORK, "bad-schema.json")
        with open(bad_schema, "w") as f:
            f.write('{"type": "object", "properties": {')  # ends at line 1, column 35
        cases = [
            (["--prompt-ids", "0,999999"], "outside the tokenizer's ids"),
            # past the tokenizer's 128815 ids but inside the head's 129280 logits: no token
            (["--prompt-ids", "128900"], "outside the tokenizer's ids [0, 128815)"),
            (["--prompt", "x", "--device", "cuda:abc"], "device 'cuda:abc': expected cpu, cuda or cuda:N"),
            (["--prompt-ids", "0,abc"], "--prompt-ids"),
            (["--prompt-ids", ""], "--prompt-ids is empty"),
            (["--prompt-ids", "", "--prompt", "x"], "exactly one of"),
            (["--prompt", "x", "--temperature", "-1"], "temperature"),
            (["--prompt", "x", "--top-p", "0"], "top_p"),
            (["--prompt", "x", "--top-p", "1.5"], "top_p"),
            (["--prompt", "x", "--min-p", "2"], "min_p"),
            (["--prompt", "x", "--presence-penalty", "3"], "presence_penalty"),
            (["--prompt", "x", "--logprobs", "100"], "logprobs"),
            (["--prompt", "x", "--max-tokens", "0"], "--max-tokens"),
            (["--prompt", "x", "--act-quant", "maybe"], "--act-quant"),
            (["--prompt", "x", "--prompt-ids", "1"], "exactly one of"),
            (["--chat", os.path.join(WORK, "missing.json")], "missing.json"),
            (["--prompt", "x", "--n", "0"], "--n: '0' is out of range [1, 2147483647]"),
            (["--prompt", "x", "--n", "2"], "--n above 1 needs --json"),
            (["--prompt", "x", "--n", "1000000", "--json"], "--n must be at most 4096 (one batch)"),
            # usage errors are one "error:" line too; seeds are 64-bit, never negative
            (["--prompt", "x", "--seed", "-1"], "--seed"),
            (["--prompt", "x", "--seed", "18446744073709551616"], "--seed"),
            (["--prompt", "x", "--logprobs", "-1"], "--logprobs"),
            (["--prompt", "x", "--logprobs", "2"], "--logprobs and --prompt-logprobs need --json"),
            (["--prompt", "x", "--max-tokens", "abc"], "--max-tokens"),
            # CUDA-only flags on the CPU were ignored
            (["--prompt", "x", "--device-weights", "f32"], "--device-weights is for CUDA runs: it needs --device cuda"),
            (["--prompt", "x", "--cuda-graphs", "off"], "--cuda-graphs is for CUDA runs: it needs --device cuda"),
            (["--prompt", "x", "--response-format", "json_schema:" + WORK], "is a directory, not a file"),
            (["--prompt", "x", "--response-format", "json_schema:" + bad_schema],
             f"--response-format json_schema:{bad_schema}: the JSON Schema is not valid JSON: parse error at line 1, "
             "column 35"),
        ]
        for args, expect in cases:
            p = run("generate", "--model", MODEL, *args)
            # 1 for a bad value, 2 for a usage error the argument parser finds
            self.assertIn(p.returncode, (1, 2), f"{args}: {p.stderr}")
            errs = error_lines(p)
            self.assertEqual(len(errs), 1, f"{args}: {p.stderr}")
            self.assertIn(expect, errs[0], args)
        # an empty --model (an unset $VAR) ran the built-in model instead
        p = run("generate", "--model", "", "--prompt", "x", "--max-tokens", "1")
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("--model: is empty", error_lines(p)[0])

    def test_grammar_check_warns_of_an_empty_language(self):
        # a grammar that matches nothing is checked (every string refused, as the schema
        # `false` must be) with a warning that generation refuses it; it passed silently
        gbnf = os.path.join(WORK, "empty.gbnf")
        strings = os.path.join(WORK, "a.jsonl")
        with open(gbnf, "w") as f:
            f.write('root ::= "a" root\n')
        with open(strings, "w") as f:
            f.write('{"text": "a"}\n')
        p = run("grammar", "check", "--ebnf", gbnf, "--strings", strings)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stdout.strip(), '{"accepted": false}')
        self.assertIn("warning: the grammar matches no string at all", p.stderr)
        p = run("grammar", "check", "--regex", "a", "--strings", strings)
        self.assertEqual(p.stdout.strip(), '{"accepted": true}')
        self.assertNotIn("warning", p.stderr)
        # the empty regex is a regex (it matches the empty string): it read as "no grammar given"
        with open(strings, "w") as f:
            f.write('{"text": ""}\n{"text": "a"}\n')
        p = run("grammar", "check", "--regex", "", "--strings", strings)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stdout.split(), ['{"accepted":', 'true}', '{"accepted":', 'false}'])

    def test_directories_and_negative_sizes_are_refused(self):
        # a directory opens as a file and reads as empty: it was taken for an empty input
        for args in (["grammar", "check", "--regex", "a", "--strings", WORK], ["launch", WORK],
                     ["client", "--connect", "127.0.0.1:1", "--file", WORK]):
            p = run(*args)
            self.assertEqual(p.returncode, 1, args)
            self.assertIn("is a directory, not a file", error_lines(p)[0], args)
        p = run("make-model", "--preset", "tiny-v41", "--out", os.path.join(WORK, "neg"), "--max-shard-size", "-5")
        self.assertEqual(p.returncode, 2)
        self.assertIn("--max-shard-size: must not be negative", error_lines(p)[0])
        for size in ("500MB", "4GiB", "20000000"):  # sizes with units are not decimal integers
            p = run("make-model", "--preset", "tiny-v41", "--dry-run", "--max-shard-size", size)
            self.assertEqual(p.returncode, 0, (size, p.stderr))
        # client --logprobs without --json was ignored (generate refuses it)
        p = run("client", "--connect", "127.0.0.1:1", "--prompt", "hi", "--logprobs", "2")
        self.assertEqual(p.returncode, 1)
        self.assertIn("--logprobs and --prompt-logprobs need --json", error_lines(p)[0])
        # client --status beside a prompt or a file ignored them silently
        for extra in (["--prompt", "hi"], ["--prompt-ids", "1,2"], ["--file", MODEL]):
            p = run("client", "--connect", "127.0.0.1:1", "--status", *extra)
            self.assertEqual(p.returncode, 1, extra)
            self.assertIn("give exactly one of --prompt, --prompt-ids, --file and --status",
                          error_lines(p)[0], extra)
        # serve --port wrapped to 16 bits (70000 listened on 4464) and took -1 as the default
        for port in ("70000", "-1"):
            p = run("serve", "--model", MODEL, "--port", port)
            self.assertEqual(p.returncode, 2, p.stderr)
            self.assertIn(f"--port: '{port}' is out of range [0, 65535]", error_lines(p)[0])

    def test_output_that_cannot_be_written_fails(self):
        # a full disk (or any write error) is exit 1 with one error line, not rc 0 and no output
        with open("/dev/full", "w") as full:
            p = subprocess.run([BINARY, "generate", "--model", MODEL, "--prompt", "x", "--max-tokens", "2", "--json"],
                               stdout=full, stderr=subprocess.PIPE, text=True, timeout=600)
        self.assertEqual(p.returncode, 1)
        self.assertIn("cannot write the output", error_lines(p)[0])

    def test_long_prefill_shows_progress_on_a_terminal(self):
        # A long prompt ran its prefill in silence (8,000 tokens: 98 s). On a terminal the
        # prefill now advances in 512-token chunks and a line says how far it has come (from 1 s
        # on); the line is cleared before the text, and the tokens and logprobs are those of the
        # one-pass prefill off a terminal (chunks compute the same bits on the CPU).
        ids = ",".join(str(100 + (i * 7) % 5000) for i in range(1500))
        args = [BINARY, "generate", "--model", MODEL, "--prompt-ids", ids, "--max-tokens", "3",
                "--seed", "5", "--json", "--logprobs", "3"]
        plain = subprocess.run(args, capture_output=True, text=True, timeout=600)
        self.assertEqual(plain.returncode, 0, plain.stderr)
        self.assertNotIn("prefill:", plain.stderr)  # not a terminal: no progress line
        master, slave = pty.openpty()
        t0 = time.monotonic()
        p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=slave)
        os.close(slave)
        err = b""
        while True:
            try:
                chunk = os.read(master, 4096)
            except OSError:  # the child closed the terminal
                break
            if not chunk:
                break
            err += chunk
        out = p.stdout.read()
        p.wait(timeout=600)
        os.close(master)
        seconds = time.monotonic() - t0
        self.assertEqual(p.returncode, 0, err)
        self.assertEqual(json.loads(out), json.loads(plain.stdout))
        text = err.decode()
        shown = re.findall(r"\rprefill: (\d+)/1500 prompt tokens \((\d+) s\)\x1b\[K", text)
        if seconds < 3:  # a prefill done within the first second shows nothing
            self.assertEqual(shown, [], text)
            return
        self.assertTrue(shown, text)
        done = [int(d) for d, _ in shown]
        self.assertTrue(all(d in (0, 512, 1024) for d in done), done)
        self.assertEqual(done, sorted(done))
        self.assertTrue(text.endswith("\r\x1b[K"), repr(text[-80:]))  # cleared before the text

    def test_prompt_longer_than_the_context(self):
        small = os.path.join(WORK, "small-context")
        if not os.path.exists(small):
            shutil.copytree(MODEL, small, symlinks=True)
            with open(os.path.join(small, "config.json")) as f:
                cfg = json.load(f)
            cfg["text_config"]["max_position_embeddings"] = 8
            with open(os.path.join(small, "config.json"), "w") as f:
                json.dump(cfg, f)
        p = run("generate", "--model", small, "--prompt-ids", ",".join(["5"] * 9))
        self.assertEqual(p.returncode, 1)
        self.assertIn("context", error_lines(p)[0])
        p = run("generate", "--model", small, "--prompt-ids", "0,1,2", "--max-tokens", "6")
        self.assertEqual(p.returncode, 1)
        self.assertIn("exceeds the model's context", error_lines(p)[0])

    def _mismatched_copy(self, name, edit):
        """A copy of MODEL (weights symlinked) whose config.json `edit` changes."""
        d = os.path.join(WORK, name)
        if not os.path.exists(d):
            os.mkdir(d)
            for f in os.listdir(MODEL):
                if f != "config.json":
                    os.symlink(os.path.join(MODEL, f), os.path.join(d, f))
            with open(os.path.join(MODEL, "config.json")) as f:
                cfg = json.load(f)
            edit(cfg["text_config"])
            with open(os.path.join(d, "config.json"), "w") as f:
                json.dump(cfg, f)
        return d

    def test_checkpoint_not_matching_its_config_is_refused_before_running(self):
        # generate and bench verify the tensors against config.json as inspect does: one line
        # naming the first problem and the count, not an internal error from inside a step
        # (hidden_size) nor text from a model whose extra layers were ignored (layers).
        def wider(t):
            t["hidden_size"] = 256

        def fewer_layers(t):
            t["num_hidden_layers"] = 9
            t["compress_ratios"] = t["compress_ratios"][:9]

        cases = [(self._mismatched_copy("wider", wider),
                  "wrong: embed.weight: expected BF16 [129280, 256], found BF16 [129280, 128]"),
                 (self._mismatched_copy("fewer-layers", fewer_layers), "unexpected: layers.9.")]
        for d, first in cases:
            self.assertEqual(run("inspect", "--model", d).returncode, 1)
            for cmd in (["generate", "--prompt", "hi", "--max-tokens", "2"],
                        ["bench", "decode", "--steps", "1", "--context", "4"]):
                p = run(*cmd, "--model", d)
                self.assertEqual(p.returncode, 1, p.stderr)
                self.assertEqual(p.stdout, "")
                self.assertEqual(len(p.stderr.strip().splitlines()), 1, p.stderr)
                err = error_lines(p)[0]
                self.assertTrue(err.startswith("error: the checkpoint does not match its config.json: " + first), err)
                self.assertIn("problems; `deepinfer inspect --model " + d + "` lists them)", err)
        self.assertIn("(126 problems;", run("generate", "--model", cases[1][0], "--prompt", "x").stderr)

    def test_make_model_interrupted_removes_its_files(self):
        # SIGINT left GBs of shards without a config.json ("folder is not empty" on the rerun)
        # (and the folders it had made for --out stayed behind, empty)
        parent = os.path.join(WORK, "interrupted-parent")
        out = os.path.join(parent, "interrupted")
        p = subprocess.Popen([BINARY, "make-model", "--preset", "v4-flash-L4", "--out", out, "--quiet"],
                             stderr=subprocess.PIPE, text=True)
        deadline = time.time() + 30
        while time.time() < deadline and not (os.path.isdir(out) and os.listdir(out)):
            time.sleep(0.05)
        time.sleep(1.0)  # writing the shards
        p.send_signal(signal.SIGINT)
        err = p.communicate(timeout=120)[1]
        self.assertEqual(p.returncode, -signal.SIGINT, err)
        self.assertIn("make-model: interrupted; removed the files it had written", err)
        self.assertFalse(os.path.exists(parent), "the folders make-model created are left")
        # a folder that was there before stays (empty)
        os.makedirs(out)
        p = subprocess.Popen([BINARY, "make-model", "--preset", "v4-flash-L4", "--out", out, "--quiet"],
                             stderr=subprocess.PIPE, text=True)
        deadline = time.time() + 30
        while time.time() < deadline and not os.listdir(out):
            time.sleep(0.05)
        time.sleep(0.5)
        p.send_signal(signal.SIGINT)
        p.communicate(timeout=120)
        self.assertEqual(os.listdir(out), [])
        os.rmdir(out)
        os.rmdir(parent)

    def test_serve_says_it_waits_for_the_cluster(self):
        # serve --config with no cluster running waited in silence until startup_timeout_s
        path = os.path.join(WORK, "nocluster.toml")
        with open(path, "w") as f:
            f.write('[model]\nrunner = "toy"\n[router]\nport = 1\n[[nodes]]\nport = 2\n'
                    '[[groups]]\nexecutors = [0]\n')
        with self.assertRaises(subprocess.TimeoutExpired) as cm:
            subprocess.run([BINARY, "serve", "--config", path], capture_output=True, text=True, timeout=3)
        err = cm.exception.stderr or b""  # bytes: TimeoutExpired keeps them undecoded
        self.assertIn("serve: waiting for the cluster's router at 127.0.0.1:1",
                      err.decode() if isinstance(err, bytes) else err)

    def test_unreadable_stdin_and_unwritable_help_fail(self):
        # a directory or a closed stdin read as empty input (exit 0, no output); --help to a full
        # device exited 0; --tokenizer "" read ./tokenizer.json
        for cmd in ("tokenize", "detokenize"):
            fd = os.open(WORK, os.O_RDONLY)  # a directory as stdin
            try:
                p = subprocess.run([BINARY, cmd, "--tokenizer", MODEL], stdin=fd, capture_output=True,
                                   text=True, timeout=60)
            finally:
                os.close(fd)
            self.assertEqual(p.returncode, 1, (cmd, p.stderr))
            self.assertIn(f"{cmd}: cannot read stdin: Is a directory", error_lines(p)[0])
            p = run(cmd, "--tokenizer", "")
            self.assertEqual(p.returncode, 2, p.stderr)
            self.assertIn("--tokenizer: is empty", error_lines(p)[0])
        with open("/dev/full", "w") as full:
            p = subprocess.run([BINARY, "--help"], stdout=full, stderr=subprocess.PIPE, text=True,
                               timeout=60)
        self.assertEqual(p.returncode, 1)
        self.assertIn("cannot write the output", p.stderr)

    def test_empty_cache_variables_are_unset(self):
        # XDG_CACHE_HOME= (empty) put the built-in model under ./deepinfer of the working directory
        cwd = os.path.join(WORK, "cwd-xdg")
        os.makedirs(cwd, exist_ok=True)
        env = dict(os.environ, XDG_CACHE_HOME="", DEEPINFER_CACHE="")
        p = subprocess.run([BINARY, "generate", "--prompt", "hi", "--max-tokens", "1", "--no-stats"],
                           cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(os.listdir(cwd), [])

    def test_damaged_builtin_model_is_generated_again(self):
        # a damaged cached default model failed every run, without a word of the cache
        cache = os.path.join(WORK, "cache-damaged")
        env = dict(os.environ, DEEPINFER_CACHE=cache)
        cmd = [BINARY, "generate", "--prompt", "hi", "--max-tokens", "2", "--temperature", "0", "--json"]
        first = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
        self.assertEqual(first.returncode, 0, first.stderr)
        weights = os.path.join(cache, "models", "tiny-v41", "model.safetensors")
        with open(weights, "r+b") as f:
            f.truncate(os.path.getsize(weights) // 2)
        again = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
        self.assertEqual(again.returncode, 0, again.stderr)
        self.assertIn("does not load", again.stderr)
        self.assertIn("generating it again", again.stderr)
        self.assertEqual(json.loads(again.stdout)["output_ids"], json.loads(first.stdout)["output_ids"])
        # --model given: its damage is an error, nothing is regenerated
        with open(weights, "r+b") as f:
            f.truncate(os.path.getsize(weights) // 2)
        p = run("generate", "--model", os.path.dirname(weights), "--prompt", "x")
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertNotIn("generating it again", p.stderr)

    def test_model_must_be_a_directory(self):
        for f in ("config.json", "tokenizer.json", "model.safetensors"):
            path = os.path.join(MODEL, f)
            for cmd in (["inspect"], ["generate", "--prompt", "x"], ["bench", "decode"], ["bench", "prefill"]):
                p = run(*cmd, "--model", path)
                self.assertEqual(p.returncode, 1, p.stderr)
                self.assertEqual(len(error_lines(p)), 1, p.stderr)
                self.assertIn(f"error: --model: '{path}' is not a directory (the checkpoint folder", error_lines(p)[0])
        p = run("generate", "--model", os.path.join(WORK, "no-such-model"), "--prompt", "x")
        self.assertEqual(p.returncode, 1)
        self.assertIn("no such directory", error_lines(p)[0])
        # serve says the same (it said "no config.json there" for a folder that does not exist)
        p = run("serve", "--model", os.path.join(WORK, "no-such-model"), "--port", "0")
        self.assertEqual(p.returncode, 1)
        self.assertIn("no such directory", error_lines(p)[0])
        p = run("serve", "--model", os.path.join(MODEL, "config.json"), "--port", "0")
        self.assertEqual(p.returncode, 1)
        self.assertIn("is not a directory", error_lines(p)[0])

    def test_make_model_refuses_a_folder_where_it_writes_a_file(self):
        # a folder named tokenizer.json: the library's "filesystem error: cannot copy file", and
        # the old checkpoint's files already removed
        out = os.path.join(WORK, "dir-in-the-way")
        os.makedirs(os.path.join(out, "tokenizer.json"))
        with open(os.path.join(out, "config.json"), "w") as f:
            f.write("{}")
        p = run("make-model", "--preset", "tiny-v41", "--out", out, "--force", "--quiet")
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertEqual(error_lines(p), [f"error: {out}/tokenizer.json: is not a file, and make-model "
                                          "writes a file of that name there; move it away first"])
        self.assertTrue(os.path.exists(os.path.join(out, "config.json")))  # nothing removed
        shutil.rmtree(out)

    def test_make_model_seed_out_of_range_is_refused(self):
        # the parser used to wrap -1 and clamp 2^64 and above to 2^64 - 1
        for seed, why in (("-1", "is below zero"), ("18446744073709551616", "is out of range"),
                          ("99999999999999999999999", "is out of range"),
                          ("1x", "is not a whole decimal number"), ("", "is not a whole decimal number")):
            p = run("make-model", "--preset", "tiny-v41", "--out", os.path.join(WORK, "seed"), "--seed", seed)
            self.assertEqual(p.returncode, 2, seed)
            self.assertEqual(error_lines(p), [f"error: --seed: '{seed}' {why} (see --help)"], seed)
        self.assertFalse(os.path.exists(os.path.join(WORK, "seed")))
        p = run("make-model", "--preset", "tiny-v41", "--dry-run", "--seed", "18446744073709551615")
        self.assertEqual(p.returncode, 0, p.stderr)

    def test_integer_options_take_decimal_digits_only(self):
        # the parser read "0x10" as 16, "0b11" as 3, "1'000" as 1000 and " 5" as 5 (and "" as 0)
        for value in ("0x10", "0b11", "1'000", " 5", "5 ", ""):
            p = run("generate", "--model", MODEL, "--prompt", "x", "--max-tokens", value)
            self.assertEqual(p.returncode, 2, (value, p.stderr))
            self.assertEqual(error_lines(p),
                             [f"error: --max-tokens: '{value}' is not a whole decimal number (see --help)"], value)
        p = run("generate", "--model", MODEL, "--prompt", "x", "--max-tokens", "0x1", "--seed", "0x1")
        self.assertEqual(p.returncode, 2, p.stderr)
        for value in ("+2", "2", "002"):  # a sign and digits stay fine
            p = run("generate", "--model", MODEL, "--prompt", "x", "--max-tokens", value, "--json")
            self.assertEqual(p.returncode, 0, (value, p.stderr))
            self.assertEqual(len(json.loads(p.stdout)["output_ids"]), 2)
        # a leading zero is not octal (CLI11 read "010" as 8)
        p = run("generate", "--model", MODEL, "--prompt", "x", "--max-tokens", "010", "--ignore-eos",
                "--seed", "010", "--json")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(len(json.loads(p.stdout)["output_ids"]), 10)
        self.assertEqual(json.loads(p.stdout)["seed"], 10)
        # an unsigned option below zero or past 64 bits is refused, not wrapped or saturated
        for value, why in (("-1", "is below zero"), ("18446744073709551616", "is out of range")):
            p = run("generate", "--model", MODEL, "--prompt", "x", "--seed", value)
            self.assertEqual(p.returncode, 2, (value, p.stderr))
            self.assertEqual(error_lines(p), [f"error: --seed: '{value}' {why} (see --help)"], value)
        p = run("generate", "--model", MODEL, "--prompt", "x", "--max-tokens", "9223372036854775808")
        self.assertEqual(error_lines(p),
                         ["error: --max-tokens: '9223372036854775808' is out of range (see --help)"])

    def test_integer_options_out_of_range_name_the_range(self):
        # a value past an int option's type said "Could not convert: --max-tokens = 99999999999"
        for args, msg in ((["--max-tokens", "99999999999"], "--max-tokens: '99999999999' is out of range [1, 2147483647]"),
                          (["--max-tokens", "0"], "--max-tokens: '0' is out of range [1, 2147483647]"),
                          (["--n", "2147483648", "--json"], "--n: '2147483648' is out of range [1, 2147483647]"),
                          (["--logprobs", "2147483648", "--json"],
                           "--logprobs: '2147483648' is out of range [0, 2147483647]"),
                          # -1 is off, as the HTTP API's top_k; below it was taken silently
                          (["--top-k", "-5"], "--top-k: '-5' is out of range [-1, 2147483647]"),
                          (["--top-k", "-2147483649"], "--top-k: '-2147483649' is out of range [-1, 2147483647]")):
            p = run("generate", "--model", MODEL, "--prompt", "x", *args)
            self.assertEqual(p.returncode, 2, (args, p.stderr))
            self.assertEqual(error_lines(p), [f"error: {msg} (see --help)"], args)
        for k in ("-1", "0"):
            p = run("generate", "--model", MODEL, "--prompt", "x", "--top-k", k, "--max-tokens", "2", "--json")
            self.assertEqual(p.returncode, 0, (k, p.stderr))
        p = run("client", "--connect", "127.0.0.1:1", "--prompt", "x", "--concurrency", "99999999999")
        self.assertEqual(error_lines(p),
                         ["error: --concurrency: '99999999999' is out of range [1, 2147483647] (see --help)"])
        p = run("generate", "--help")
        self.assertIn("(0 or -1 = off)", p.stdout)

    def test_an_option_given_twice_is_refused(self):
        # CLI11 said "--max-tokens: At Most 1 required but received 2"
        for name, args in (("--max-tokens", ["generate", "--model", MODEL, "--prompt", "Hi", "--max-tokens", "0",
                                             "--max-tokens", "2"]),
                           ("--model", ["generate", "--model", MODEL, "--model", MODEL, "--prompt", "Hi"]),
                           ("--tokenizer", ["tokenize", "--tokenizer", MODEL, "--tokenizer", MODEL]),
                           ("--regex", ["grammar", "check", "--regex", "a", "--regex", "b", "--strings", MODEL])):
            p = run(*args)
            self.assertEqual(p.returncode, 2, (args, p.stderr))
            self.assertEqual(error_lines(p), [f"error: {name}: given more than once (see --help)"], args)
        # repeatable options and flags stay repeatable
        p = run("generate", "--model", MODEL, "--prompt", "Hi", "--max-tokens", "2", "--stop", "a", "--stop", "b",
                "--json", "--json")
        self.assertEqual(p.returncode, 0, p.stderr)

    def test_grammar_check_usage_errors_are_not_blamed_on_the_grammar(self):
        strings = os.path.join(WORK, "usage-strings.jsonl")
        with open(strings, "w") as f:
            f.write('{"text": "a"}\n')
        for args in ([], ["--regex", "a", "--ebnf", strings]):
            p = run("grammar", "check", *args, "--strings", strings)
            self.assertEqual(p.returncode, 2, (args, p.stderr))
            self.assertEqual(error_lines(p), ["error: give exactly one of --json-schema, --regex and --ebnf "
                                              "(see --help)"], args)
            self.assertEqual(p.stdout, "")
        p = run("grammar", "check", "--regex", "a", "--json-whitespace", "tight", "--strings", strings)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertEqual(error_lines(p), ["error: --json-whitespace: must be any, compact or pretty, got 'tight' "
                                          "(see --help)"])
        p = run("grammar", "check", "--regex", "a", "--strings", strings)
        self.assertEqual((p.returncode, p.stdout), (0, '{"accepted": true}\n'), p.stderr)

    def test_help_texts_say_what_the_commands_do(self):
        p = run("grammar", "bench", "--help")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("--no-shared-cache ", p.stdout)
        self.assertNotIn("{false}", p.stdout)
        p = run("generate", "--help")
        flat = " ".join(p.stdout.split())
        self.assertIn("$DEEPINFER_CACHE, else $XDG_CACHE_HOME/deepinfer, else ~/.cache/deepinfer", flat)
        self.assertIn("+any (the default)", flat)

    def test_tokenize_and_detokenize_refuse_a_key_given_twice(self):
        # the last one won silently, where chat-template, generate --chat and client --file refuse it
        for cmd, line, key in (("tokenize", '{"text":"a","text":"b"}', "text"),
                               ("detokenize", '{"ids":[1],"ids":[2]}', "ids")):
            p = run(cmd, "--tokenizer", MODEL, stdin='{"%s": %s}\n%s\n' % (key, '"a"' if key == "text" else "[1]", line))
            self.assertEqual(p.returncode, 1, (cmd, p.stderr))
            self.assertEqual(error_lines(p), [f"error: stdin line 2: key '{key}' is given twice in one object"])
            self.assertEqual(len(p.stdout.splitlines()), 1, cmd)  # the first line was written
        # (the same strict parser: syntax errors lose nlohmann's "[json.exception.parse_error.101]" tag)
        p = run("tokenize", "--tokenizer", MODEL, stdin="{nope\n")
        self.assertEqual(len(error_lines(p)), 1, p.stderr)
        self.assertTrue(error_lines(p)[0].startswith("error: stdin line 1: not valid JSON: parse error at line 1, "
                                                     "column 3: "), p.stderr)

    def test_bench_lists_take_positive_integers_only(self):
        # each used to be truncated ("1e2" ran batch 1) or, for "1,", accepted
        for flag, value, why in (("--batch", "1e2", "'1e2' is not a positive integer"),
                                 ("--batch", "3e1", "'3e1' is not a positive integer"),
                                 ("--batch", "2x", "'2x' is not a positive integer"),
                                 ("--batch", "1.5", "'1.5' is not a positive integer"),
                                 ("--batch", "0", "'0' is not a positive integer"),
                                 ("--batch", "-1", "'-1' is not a positive integer"),
                                 ("--batch", "99999999999", "'99999999999' is not a positive integer"),
                                 ("--batch", "1,", "'1,' has an empty item"),
                                 ("--batch", "1,,2", "'1,,2' has an empty item"),
                                 ("--context", "16.9", "'16.9' is not a positive integer"),
                                 ("--context", "8abc", "'8abc' is not a positive integer"),
                                 ("--context", ",", "',' has an empty item")):
            for phase in ("decode", "prefill"):
                p = run("bench", phase, "--model", MODEL, flag + "=" + value)
                self.assertEqual(p.returncode, 2, (flag, value, p.stderr))  # usage errors (exit 1 before)
                self.assertEqual(error_lines(p), [f"error: {flag}: {why} (see --help)"], (flag, value))
                self.assertNotIn("bench:", p.stderr)  # refused before any row ran
        # the same rule as --prompt-ids (which took "1, 2" and a trailing comma, where these
        # refused "1, 2" and "+1"): spaces around an item and a leading '+' are fine, an empty
        # item is not
        p = run("bench", "decode", "--model", MODEL, "--batch", " 1, +2", "--context", "8",
                "--steps", "1", "--json")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual([r["batch"] for r in json.loads(p.stdout)["results"]], [1, 2])
        for ids, ok in (("1, 2", True), ("+1,2", True), ("1,2,", False), (",1", False), ("1,,2", False)):
            p = run("generate", "--model", MODEL, "--prompt-ids", ids, "--max-tokens", "1")
            self.assertEqual(p.returncode, 0 if ok else 1, (ids, p.stderr))
            if not ok:
                self.assertIn("has an empty item", error_lines(p)[0])


if __name__ == "__main__":
    BINARY = os.path.abspath(sys.argv.pop(1))
    WORK = tempfile.mkdtemp(prefix="deepinfer-generate-")
    MODEL = os.path.join(WORK, "tiny-v41")
    made = subprocess.run([BINARY, "make-model", "--preset", "tiny-v41", "--out", MODEL, "--quiet"],
                          capture_output=True, text=True)
    if made.returncode != 0:
        sys.exit(made.stderr)
    try:
        unittest.main(verbosity=2)
    finally:
        shutil.rmtree(WORK, ignore_errors=True)
