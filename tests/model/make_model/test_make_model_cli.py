#!/usr/bin/env python3
"""End-to-end tests of `deepinfer make-model`: --list, --dry-run tables, generating the tiny
presets and verifying them with `deepinfer inspect`, --force, and one clear error line for bad
input. Usage: test_make_model_cli.py PATH/TO/deepinfer   (run by ctest)."""
import json
import os
import shutil
import sys
import tempfile
import unittest
import subprocess

BINARY = None
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def run(*args):
    return subprocess.run([BINARY, *args], capture_output=True, text=True, timeout=600)


def error_lines(proc):
    return [line for line in proc.stderr.splitlines() if line.startswith("error:")]


class MakeModelCliTest(unittest.TestCase):
    def test_listed_in_help_and_lists_presets(self):
        self.assertIn("make-model", run("--help").stdout)
        p = run("make-model", "--list")
        self.assertEqual(p.returncode, 0, p.stderr)
        names = [line.split()[0] for line in p.stdout.splitlines()]
        self.assertEqual(names, ["tiny-v41", "tiny-v4", "v41-flash-L4", "v4-flash-L4"])

    def test_dry_run_prints_the_size_table_and_writes_nothing(self):
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "never")
            p = run("make-model", "--preset", "v41-flash-L4", "--dry-run", "--out", out)
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertFalse(os.path.exists(out))
        self.assertIn("routed experts", p.stdout)
        self.assertIn("I8", p.stdout)
        self.assertIn("9 file(s)", p.stdout)
        # 4 layers x 384 experts x 3 matrices x 2304 x 5120 parameters
        self.assertIn(f"{4 * 384 * 3 * 2304 * 5120:,}", p.stdout)

    def test_generate_and_inspect_tiny_presets(self):
        for preset, model_type in (("tiny-v41", "deepseek_v41"), ("tiny-v4", "deepseek_v4")):
            with self.subTest(preset=preset), tempfile.TemporaryDirectory() as d:
                out = os.path.join(d, "m")
                p = run("make-model", "--preset", preset, "--out", out, "--seed", "3")
                self.assertEqual(p.returncode, 0, p.stderr)
                self.assertIn(f"wrote {preset} (seed 3)", p.stdout)
                q = run("inspect", "--model", out, "--json")
                self.assertEqual(q.returncode, 0, q.stderr)
                j = json.loads(q.stdout)
                self.assertTrue(j["matches"])
                self.assertEqual(j["model_type"], model_type)
                self.assertEqual(j["tensors"]["found"], j["tensors"]["expected"])
                dry = run("make-model", "--preset", preset, "--dry-run")
                self.assertIn(f"{j['total_bytes']:,}", dry.stdout)
                # not empty now: refused without --force, accepted with it
                again = run("make-model", "--preset", preset, "--out", out)
                self.assertNotEqual(again.returncode, 0)
                self.assertEqual(len(error_lines(again)), 1, again.stderr)
                self.assertIn("--force", again.stderr)
                forced = run("make-model", "--preset", preset, "--out", out, "--force", "--quiet")
                self.assertEqual(forced.returncode, 0, forced.stderr)
                self.assertEqual(forced.stdout, "")

    def test_installed_layout_assets_come_first(self):
        # <bin>/../share/deepinfer/assets is where an installed binary finds the tokenizer
        with tempfile.TemporaryDirectory() as d:
            os.makedirs(os.path.join(d, "bin"))
            binary = os.path.join(d, "bin", "deepinfer")
            shutil.copy(BINARY, binary)
            tok = os.path.join(d, "share", "deepinfer", "assets", "deepseek-v3-tokenizer")
            shutil.copytree(os.path.join(REPO, "assets", "deepseek-v3-tokenizer"), tok)
            with open(os.path.join(tok, "tokenizer_config.json")) as f:
                config = json.load(f)
            config["installed_copy"] = True
            with open(os.path.join(tok, "tokenizer_config.json"), "w") as f:
                json.dump(config, f)
            out = os.path.join(d, "m")
            p = subprocess.run([binary, "make-model", "--preset", "tiny-v4", "--out", out, "--quiet"],
                               capture_output=True, text=True, timeout=600)
            self.assertEqual(p.returncode, 0, p.stderr)
            with open(os.path.join(out, "tokenizer_config.json")) as f:
                self.assertTrue(json.load(f)["installed_copy"])

    def test_bad_input_is_one_clear_error(self):
        with tempfile.TemporaryDirectory() as d:
            p = run("make-model", "--preset", "nope", "--out", os.path.join(d, "x"))
            self.assertNotEqual(p.returncode, 0)
            self.assertEqual(error_lines(p), ["error: unknown preset 'nope' (available: tiny-v41, "
                                              "tiny-v4, v41-flash-L4, v4-flash-L4)"])
            self.assertFalse(os.path.exists(os.path.join(d, "x")))
            p = run("make-model", "--preset", "tiny-v41")
            self.assertEqual(len(error_lines(p)), 1, p.stderr)
            self.assertIn("--out", p.stderr)
            p = run("make-model", "--out", os.path.join(d, "x"))
            self.assertIn("--preset", p.stderr)
            # a folder that cannot be made: a file where a parent folder should be; it said
            # "error: filesystem error: cannot create directories: Not a directory [...]"
            blocker = os.path.join(d, "a-file")
            with open(blocker, "w") as f:
                f.write("x")
            out = os.path.join(blocker, "sub", "model")
            p = run("make-model", "--preset", "tiny-v41", "--out", out)
            self.assertEqual(p.returncode, 1, p.stderr)
            self.assertEqual(error_lines(p), [f"error: --out {out}: cannot create the folder: Not a directory"])
            # a size past 2^64 - 1 was taken as 2^64 - 1 (exit 0), where other unsigned options refuse it
            for value in ("18446744073709551616", "99999999999999999999999"):  # (with a unit: CLI11 refuses)
                p = run("make-model", "--preset", "tiny-v41", "--dry-run", "--max-shard-size", value)
                self.assertEqual(p.returncode, 2, (value, p.stderr))
                self.assertEqual(error_lines(p), [f"error: --max-shard-size: '{value}' is out of range "
                                                  "[1, 18446744073709551615] bytes (see --help)"], value)
            # zero, in any unit: it was "error: the largest shard must hold at least one byte"
            # (exit 1) after the parse, naming no option, and the range said 0 was in it
            for value in ("0", "00", "0MB"):  # (with a unit the check sees the bytes: '0')
                p = run("make-model", "--preset", "tiny-v41", "--dry-run", "--max-shard-size", value)
                self.assertEqual(p.returncode, 2, (value, p.stderr))
                self.assertEqual(error_lines(p), [f"error: --max-shard-size: '{value if value != '0MB' else '0'}' is "
                                                  "out of range [1, 18446744073709551615] bytes (see --help)"], value)
            for value in ("1", "1b", "1KB"):
                p = run("make-model", "--preset", "tiny-v41", "--dry-run", "--max-shard-size", value)
                self.assertEqual(p.returncode, 0, (value, p.stderr))
            p = run("make-model", "--preset", "tiny-v41", "--dry-run", "--max-shard-size", "18446744073709551615")
            self.assertEqual(p.returncode, 0, p.stderr)  # the largest is fine


if __name__ == "__main__":
    BINARY = os.path.abspath(sys.argv.pop(1))
    unittest.main(verbosity=2)
