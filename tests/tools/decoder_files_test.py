"""The decoder files people have (optimum's exports), on a tiny decoder that
bench/models/merge_decoder.py builds with the onnx API (no torch): the
no-past and with-past decoders (dynamic past_sequence_length, grouped-query
heads) and the legacy merged decoder, If(use_cache_branch) of the two with
the shared weights in the outer graph.

- --input-value use_cache_branch=1 and =0 fold the If into the branch it
  selects; each matches ONNX Runtime on the same fixed inputs;
- --input-shape takes globs ('past_key_values.*=...');
- an If whose condition is not a constant is one line naming the node and
  op with the way out; --input-value's errors are one line each;
- plan.json records the fixed values; the plan passes the schema;
- --input-range replaces the range the check infers, and the report says
  the range came from the flag; a bad range is a one-line usage error;
- tessera generate runs the with-past decoder planned at one past length
  as a window (1 device, tp=2 as threads and under mpirun): the ids equal
  a growing-cache greedy loop in ONNX Runtime."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

import numpy as np
import onnx
from onnx import numpy_helper

TESSERA = sys.argv.pop(1) if len(sys.argv) > 1 else "build/bin/tessera"
CHECK_SCHEMA = sys.argv.pop(1) if len(sys.argv) > 1 else "build/bin/check_plan_schema"
MPIEXEC = sys.argv.pop(1) if len(sys.argv) > 1 else "mpirun"
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bench", "models"))
import merge_decoder  # noqa: E402

LAYERS, KV_HEADS, HEAD_DIM, VOCAB = 2, 2, 8, 64
PAST = 6
PROMPT, STEPS = [5, 9, 2], 4  # 6 tokens fed: a window of PAST = 6 slots holds them (at most PAST + 1)
CACHES = [f"past_key_values.{i}.{k}" for i in range(LAYERS) for k in ("key", "value")]


def tessera(*args, timeout=300):
    return subprocess.run([TESSERA, *args], capture_output=True, text=True, timeout=timeout)


def one_line_error(test, r, code, *words):
    test.assertEqual(r.returncode, code, r.stdout + r.stderr)
    lines = r.stderr.strip().splitlines()
    test.assertEqual(len(lines), 1, r.stderr)
    for w in words:
        test.assertIn(w, lines[0])


class DecoderFiles(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="tessera-decoders-")
        subprocess.run([sys.executable, os.path.join(ROOT, "bench", "models", "merge_decoder.py"), "--tiny", cls.dir],
                       check=True)
        cls.merged = os.path.join(cls.dir, "decoder_model_merged.onnx")
        cls.with_past = os.path.join(cls.dir, "decoder_with_past_model.onnx")
        rng = np.random.default_rng(7)
        cls.step_feeds = {"input_ids": np.array([[11]], np.int64),
                          "attention_mask": np.ones((1, PAST + 1), np.int64),
                          "position_ids": np.array([[PAST]], np.int64)}
        for n in CACHES:
            cls.step_feeds[n] = rng.standard_normal((1, KV_HEADS, PAST, HEAD_DIM)).astype(np.float32)
        cls.prefill_feeds = {"input_ids": np.array([[3, 17, 40]], np.int64),
                             "attention_mask": np.ones((1, 3), np.int64),
                             "position_ids": np.array([[0, 1, 2]], np.int64)}
        for n in CACHES:  # unread on the no-past branch
            cls.prefill_feeds[n] = np.zeros((1, KV_HEADS, 1, HEAD_DIM), np.float32)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir, ignore_errors=True)

    def write_inputs(self, feeds, folder):
        os.makedirs(folder, exist_ok=True)
        args = []
        for n, a in feeds.items():
            path = os.path.join(folder, n + ".pb")
            with open(path, "wb") as f:
                f.write(numpy_helper.from_array(a, n).SerializeToString())
            args += ["--input", f"{n}={path}"]
        return args

    def run_branch(self, branch, feeds, shapes):
        import onnxruntime as ort
        ort_feeds = dict(feeds, use_cache_branch=np.array([bool(branch)]))
        session = ort.InferenceSession(self.merged, providers=["CPUExecutionProvider"])
        want = session.run(None, ort_feeds)
        out = os.path.join(self.dir, f"out{branch}")
        args = ["run", self.merged, "--input-value", f"use_cache_branch={branch}", "--output-dir", out,
                *self.write_inputs(feeds, os.path.join(self.dir, f"in{branch}"))]
        for s in shapes:
            args += ["--input-shape", s]
        r = tessera(*args)
        self.assertEqual(r.returncode, 0, r.stderr)
        got = [numpy_helper.to_array(onnx.load_tensor(os.path.join(out, f"output_{i}.pb"))) for i in range(len(want))]
        return want, got

    def test_merged_decoder_with_past_branch_matches_onnxruntime(self):
        shapes = ["input_ids=1x1", "position_ids=1x1", f"attention_mask=1x{PAST + 1}",
                  f"past_key_values.*=1x{KV_HEADS}x{PAST}x{HEAD_DIM}"]  # one glob for the 2N caches
        want, got = self.run_branch(1, self.step_feeds, shapes)
        self.assertEqual([g.shape for g in got], [w.shape for w in want])
        self.assertEqual(got[1].shape, (1, KV_HEADS, PAST + 1, HEAD_DIM))
        for w, g in zip(want, got):
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)

    def test_merged_decoder_no_past_branch_matches_onnxruntime(self):
        shapes = ["input_ids=1x3", "position_ids=1x3", "attention_mask=1x3",
                  f"past_key_values.*=1x{KV_HEADS}x1x{HEAD_DIM}"]
        want, got = self.run_branch(0, self.prefill_feeds, shapes)
        self.assertEqual(got[1].shape, (1, KV_HEADS, 3, HEAD_DIM))  # no past: present is the prompt's
        for w, g in zip(want, got):
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)

    def shapes_args(self):
        return ["--input-shape", "input_ids=1x1", "--input-shape", "position_ids=1x1",
                "--input-shape", f"attention_mask=1x{PAST + 1}",
                "--input-shape", f"past_key_values.*=1x{KV_HEADS}x{PAST}x{HEAD_DIM}"]

    def test_if_on_an_input_not_fixed_is_one_line(self):
        r = tessera("inspect", self.merged, *self.shapes_args())
        one_line_error(self, r, 1, "decoder_model_merged.onnx", "optimum::if", "If",
                       "--input-value use_cache_branch=")

    def test_input_value_errors_are_one_line(self):
        cases = [("nope=1", "not an input of the model"),
                 ("use_cache_branch=maybe", "give 0, 1, true or false"),
                 ("position_ids=1.5", "give an integer"),
                 ("position_ids=abc", "is not a number"),
                 ("use_cache_branch", "expected NAME=VALUE")]
        for flag, words in cases:
            with self.subTest(flag=flag):
                r = tessera("inspect", self.merged, *self.shapes_args(), "--input-value", flag)
                one_line_error(self, r, 2, "--input-value", words)

    def test_input_shape_glob_that_matches_nothing(self):
        r = tessera("inspect", self.merged, "--input-shape", "past.values.*=1x2", "--input-value", "use_cache_branch=1")
        one_line_error(self, r, 2, "past.values.*", "matches no input")

    def test_plan_records_input_values(self):
        out = os.path.join(self.dir, "plan_merged")
        r = tessera("optimize", self.merged, "-o", out, "--no-calibrate", "--budget", "10", "--no-measure",
                    "--input-value", "use_cache_branch=true", *self.shapes_args())
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(os.path.join(out, "plan.json")) as f:
            j = json.load(f)
        self.assertEqual(j["input_values"], {"use_cache_branch": "true"})
        self.assertNotIn("use_cache_branch", j["input_shapes"])
        self.assertEqual(j["input_shapes"]["past_key_values.1.value"], [1, KV_HEADS, PAST, HEAD_DIM])
        r = subprocess.run([CHECK_SCHEMA, out], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)

    def test_input_range_is_the_stated_one(self):
        out = os.path.join(self.dir, "plan_range")
        # On a mesh, the caches split: the check runs (a plan equal to the
        # original has nothing to check).
        base = ["optimize", self.with_past, "--no-calibrate", "--budget", "10", "--no-measure", "--mesh", "tp=2",
                "--shard", "past_key_values.*=[S(1)]", *self.shapes_args()]
        r = tessera(*base, "-o", out + "_inferred")
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(os.path.join(out + "_inferred", "report.json")) as f:
            inferred = json.load(f)["end_to_end_check"]["integer_inputs"]
        # The position table has 64 rows: the check infers [0, 64).
        self.assertIn("position_ids over [0, 64)", inferred)
        r = tessera(*base, "-o", out, "--input-range", "position_ids=3:7")
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(os.path.join(out, "plan.json")) as f:
            stated = json.load(f)["end_to_end_check"]["integer_inputs"]
        self.assertIn("position_ids over [3, 7) (stated by --input-range)", stated)
        self.assertIn("input_ids over [0, 64)", stated)  # the others stay inferred
        self.assertIn("stated by --input-range", r.stdout)  # report.txt says it too

    def test_bad_input_range_is_one_line(self):
        base = ["optimize", self.with_past, "-o", os.path.join(self.dir, "bad"), "--no-calibrate", "--budget", "5",
                *self.shapes_args()]
        for flag, words in [("position_ids=7:3", "empty"), ("position_ids=a:9", "not an integer"),
                            ("position_ids=3", "expected NAME=LO:HI"), ("nope=0:4", "no input 'nope'"),
                            ("past_key_values.0.key=0:4", "not an integer tensor")]:
            with self.subTest(flag=flag):
                r = tessera(*base, "--input-range", flag)
                one_line_error(self, r, 2, "--input-range", words)

    def onnxruntime_ids(self):
        """Greedy decoding with a cache that grows (the with-past decoder at
        every past length, the first step at past length 0)."""
        import onnxruntime as ort
        s = ort.InferenceSession(self.with_past, providers=["CPUExecutionProvider"])
        out_names = [o.name for o in s.get_outputs()]
        caches = {n: np.zeros((1, KV_HEADS, 0, HEAD_DIM), np.float32) for n in CACHES}

        def step(token, t):
            feeds = {"input_ids": np.array([[token]], np.int64), "position_ids": np.array([[t]], np.int64),
                     "attention_mask": np.ones((1, t + 1), np.int64), **caches}
            outs = dict(zip(out_names, s.run(None, feeds)))
            for n in caches:
                caches[n] = outs[n.replace("past_key_values", "present")]
            return int(np.argmax(outs["logits"].reshape(-1)))

        for i, tok in enumerate(PROMPT):
            nxt = step(tok, i)
        ids = [nxt]
        while len(ids) < STEPS:
            ids.append(step(ids[-1], len(PROMPT) + len(ids) - 1))
        return ids

    def generate(self, prefix, path, *extra, steps=STEPS):
        r = subprocess.run(prefix + [TESSERA, "generate", path, "--input-ids", ",".join(map(str, PROMPT)),
                                     "--steps", str(steps), *extra],
                           capture_output=True, text=True, timeout=120)
        return r

    def test_generate_runs_a_dynamic_past_as_a_window(self):
        def ids(r):
            self.assertEqual(r.returncode, 0, r.stderr)
            return [int(t) for t in next(l for l in r.stdout.splitlines() if l.startswith("generated:")).split()[1:]]

        want = self.onnxruntime_ids()
        one = ids(self.generate([], self.with_past, *self.shapes_args()))
        self.assertEqual(one, want)
        plan = os.path.join(self.dir, "plan_tp2")
        r = tessera("optimize", self.with_past, "-o", plan, "--no-calibrate", "--budget", "10", "--no-measure",
                    "--mesh", "tp=2", "--shard", "past_key_values.*=[S(1)]", *self.shapes_args())
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(ids(self.generate([], plan)), want)
        mpi = [MPIEXEC, "--allow-run-as-root", "--oversubscribe", "-np", "2"]
        self.assertEqual(ids(self.generate(mpi, plan)), want)
        # More tokens than the window holds: one line, the way out named.
        r = self.generate([], self.with_past, *self.shapes_args(), steps=PAST)
        one_line_error(self, r, 2, f"past length is {PAST}", "--input-shape")


if __name__ == "__main__":
    unittest.main()
