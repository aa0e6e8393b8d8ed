"""bench/models/generate_large.py writes the decoder it says: the tiny shape
(grouped-query attention, 2 layers) in f32 agrees in ONNX Runtime with a
NumPy Llama decode step over the same weights; `tessera run` gives ONNX
Runtime's outputs; the bf16 model of the same seed holds the f32 weights
rounded to bf16 and runs in Tessera to the f32 outputs within bf16's error.
The --static-cache form (a fixed-length cache written at cache_position by
ScatterElements) computes the growing form's step at the same position,
in ONNX Runtime and in Tessera, and `tessera generate` loops over it to
ONNX Runtime's greedy ids."""
import os
import subprocess
import sys
import tempfile
import unittest

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

TESSERA = sys.argv.pop(1) if len(sys.argv) > 1 else "build/bin/tessera"
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GENERATOR = os.path.join(ROOT, "bench", "models", "generate_large.py")
PAST = 7
LAYERS, HIDDEN, HEADS, KV_HEADS, VOCAB = 2, 64, 4, 2, 512  # the generator's "tiny"
HEAD_DIM = HIDDEN // HEADS


def generate(folder, dtype):
    subprocess.run([sys.executable, GENERATOR, "--shape", "tiny", "--dtype", dtype, "--past", str(PAST),
                    "--seed", "3", "--out", folder], check=True, capture_output=True)
    return os.path.join(folder, "model.onnx")


def generate_static(folder, length):
    subprocess.run([sys.executable, GENERATOR, "--shape", "tiny", "--static-cache", str(length), "--seed", "3",
                    "--out", folder], check=True, capture_output=True)
    return os.path.join(folder, "model.onnx")


def feeds():
    rng = np.random.default_rng(11)
    mask = np.ones((1, PAST + 1), dtype=np.int64)
    mask[0, 2] = 0  # one cached position masked out
    f = {"input_ids": np.array([[37]], dtype=np.int64), "attention_mask": mask,
         "position_ids": np.array([[PAST]], dtype=np.int64)}
    for i in range(LAYERS):
        for kind in ("key", "value"):
            f[f"past_key_values.{i}.{kind}"] = rng.standard_normal((1, KV_HEADS, PAST, HEAD_DIM)).astype(np.float32)
    return f


def reference(weights, f):
    """A Llama decode step in NumPy (float64), as transformers' LlamaModel computes it."""
    w = {k: v.astype(np.float64) for k, v in weights.items()}

    def norm(x, name):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + 1e-5) * w[name]

    inv = 1.0 / 10000 ** (np.arange(0, HEAD_DIM, 2) / HEAD_DIM)
    ang = np.concatenate([PAST * inv] * 2)
    cos, sin = np.cos(ang), np.sin(ang)

    def rope(t):  # t [heads, d]
        half = HEAD_DIM // 2
        return t * cos + np.concatenate([-t[:, half:], t[:, :half]], axis=-1) * sin

    x = w["model.embed_tokens.weight"][f["input_ids"][0, 0]]
    presents = []
    for i in range(LAYERS):
        p = f"model.layers.{i}"
        h = norm(x, f"{p}.input_layernorm.weight")
        q = rope((h @ w[f"{p}.self_attn.q_proj.weight"]).reshape(HEADS, HEAD_DIM))
        k = rope((h @ w[f"{p}.self_attn.k_proj.weight"]).reshape(KV_HEADS, HEAD_DIM))
        v = (h @ w[f"{p}.self_attn.v_proj.weight"]).reshape(KV_HEADS, HEAD_DIM)
        keys = np.concatenate([f[f"past_key_values.{i}.key"][0], k[:, None]], axis=1)
        values = np.concatenate([f[f"past_key_values.{i}.value"][0], v[:, None]], axis=1)
        presents += [keys[None], values[None]]
        out = np.zeros((HEADS, HEAD_DIM))
        for head in range(HEADS):
            kv = head // (HEADS // KV_HEADS)
            s = keys[kv] @ q[head] / np.sqrt(HEAD_DIM)
            s = np.where(f["attention_mask"][0] != 0, s, -1e4)
            e = np.exp(s - s.max())
            out[head] = (e / e.sum()) @ values[kv]
        x = x + out.reshape(-1) @ w[f"{p}.self_attn.o_proj.weight"]
        h = norm(x, f"{p}.post_attention_layernorm.weight")
        g = h @ w[f"{p}.mlp.gate_proj.weight"]
        x = x + (g / (1 + np.exp(-g)) * (h @ w[f"{p}.mlp.up_proj.weight"])) @ w[f"{p}.mlp.down_proj.weight"]
    logits = norm(x, "model.norm.weight") @ w["lm_head.weight"]
    return [logits.reshape(1, 1, VOCAB)] + presents


def write_inputs(folder, f, bf16):
    args = []
    for name, value in f.items():
        if bf16 and value.dtype == np.float32:
            bits = (value.view(np.uint32) >> 16).astype(np.uint16)  # exact: past values are rounded below
            proto = helper.make_tensor(name, TensorProto.BFLOAT16, list(value.shape), bits.tobytes(), raw=True)
        else:
            proto = numpy_helper.from_array(value, name)
        path = os.path.join(folder, f"{name}.pb")
        with open(path, "wb") as out:
            out.write(proto.SerializeToString())
        args += ["--input", f"{name}={path}"]
    return args


def tessera_run(model, f, folder, bf16=False):
    out = os.path.join(folder, "out")
    subprocess.run([TESSERA, "run", model, "--output-dir", out, "--threads", "2"] + write_inputs(folder, f, bf16),
                   check=True, capture_output=True)
    names = [o.name for o in onnx.load(model, load_external_data=False).graph.output]
    return [numpy_helper.to_array(onnx.load_tensor(os.path.join(out, f"output_{k}.pb"))).astype(np.float64)
            for k in range(len(names))]


def bf16_round(x):
    """f32 values rounded to nearest even bf16, as f32."""
    bits = x.view(np.uint32).astype(np.uint64)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16 << 16
    return bits.astype(np.uint32).view(np.float32)


def worst_error(got, want):
    return max(float(np.max(np.abs(g - w)) / max(np.max(np.abs(w)), 1e-30)) for g, w in zip(got, want))


class GenerateLarge(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="tessera-generate-large-")
        cls.f32 = generate(os.path.join(cls.tmp.name, "f32"), "f32")
        cls.bf16 = generate(os.path.join(cls.tmp.name, "bf16"), "bf16")
        cls.weights = {t.name: numpy_helper.to_array(t, os.path.dirname(cls.f32))
                       for t in onnx.load(cls.f32, load_external_data=False).graph.initializer}
        cls.feeds = feeds()
        cls.ort = ort.InferenceSession(cls.f32, providers=["CPUExecutionProvider"]).run(None, cls.feeds)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_weights_are_external_and_aligned(self):
        model = onnx.load(self.f32, load_external_data=False)
        external = [t for t in model.graph.initializer if t.data_location == TensorProto.EXTERNAL]
        self.assertEqual(len(external), 2 + LAYERS * 9 + 1)
        for t in external:
            offset = int({e.key: e.value for e in t.external_data}["offset"])
            self.assertEqual(offset % 64, 0, t.name)
        names = [i.name for i in model.graph.input]
        self.assertEqual(names[:3], ["input_ids", "attention_mask", "position_ids"])
        self.assertIn(f"past_key_values.{LAYERS - 1}.value", names)
        self.assertEqual([o.name for o in model.graph.output][:2], ["logits", "present.0.key"])

    def test_ort_matches_numpy_llama(self):
        want = reference(self.weights, self.feeds)
        self.assertLess(worst_error(self.ort, want), 1e-5)

    def test_tessera_matches_ort(self):
        got = tessera_run(self.f32, self.feeds, os.path.join(self.tmp.name, "f32"))
        self.assertLess(worst_error(got, self.ort), 1e-4)

    def test_bf16_holds_the_f32_weights_rounded(self):
        bf16 = onnx.load(self.bf16, load_external_data=False)
        folder = os.path.dirname(self.bf16)
        checked = 0
        for t in bf16.graph.initializer:
            if t.data_type != TensorProto.BFLOAT16:
                continue
            raw = numpy_helper.to_array(t, folder)  # bf16 as f32 values
            np.testing.assert_array_equal(np.asarray(raw, dtype=np.float32), bf16_round(self.weights[t.name]),
                                          err_msg=t.name)
            checked += 1
        self.assertEqual(checked, 2 + LAYERS * 9 + 1)

    def test_bf16_runs_close_to_f32(self):
        f = {k: bf16_round(v) if v.dtype == np.float32 else v for k, v in self.feeds.items()}
        want = ort.InferenceSession(self.f32, providers=["CPUExecutionProvider"]).run(None, f)
        got = tessera_run(self.bf16, f, os.path.join(self.tmp.name, "bf16"), bf16=True)
        self.assertLess(worst_error(got, want), 2e-2)  # measured 6.7e-3

    def test_static_cache_step_is_the_growing_step(self):
        length = 12  # PAST cached positions, the new one, and 4 never written
        static = generate_static(os.path.join(self.tmp.name, "static"), length)
        f = dict(self.feeds, attention_mask=np.ones((1, PAST + 1), dtype=np.int64))
        want = ort.InferenceSession(self.f32, providers=["CPUExecutionProvider"]).run(None, f)
        sf = {"input_ids": f["input_ids"], "cache_position": np.array([PAST], dtype=np.int64)}
        for i in range(LAYERS):
            for kind in ("key", "value"):
                cache = np.zeros((1, KV_HEADS, length, HEAD_DIM), np.float32)
                cache[:, :, :PAST] = f[f"past_key_values.{i}.{kind}"]
                sf[f"past_key_values.{i}.{kind}"] = cache
        got = ort.InferenceSession(static, providers=["CPUExecutionProvider"]).run(None, sf)
        self.assertLess(worst_error([got[0]], [want[0]]), 1e-5)
        for g, w in zip(got[1:], want[1:]):
            np.testing.assert_allclose(g[:, :, :PAST + 1], w, rtol=1e-5, atol=1e-6)
            self.assertEqual(float(np.abs(g[:, :, PAST + 1:]).max()), 0.0)
        ran = tessera_run(static, sf, os.path.join(self.tmp.name, "static"))
        self.assertLess(worst_error(ran, got), 1e-4)

    def test_generate_loops_over_the_static_cache_form(self):
        length, prompt, steps = 16, [5, 9, 2], 10
        static = generate_static(os.path.join(self.tmp.name, "loop"), length)
        s = ort.InferenceSession(static, providers=["CPUExecutionProvider"])
        caches = {i.name: np.zeros((1, KV_HEADS, length, HEAD_DIM), np.float32)
                  for i in s.get_inputs() if i.name.startswith("past")}
        names = [o.name for o in s.get_outputs()]

        def step(token, position):
            outs = dict(zip(names, s.run(None, {"input_ids": np.array([[token]], np.int64),
                                                "cache_position": np.array([position], np.int64), **caches})))
            for n in caches:
                caches[n] = outs[n.replace("past_key_values", "present")]
            return int(np.argmax(outs["logits"].reshape(-1)))

        for i, t in enumerate(prompt):
            nxt = step(t, i)
        want = [nxt]
        while len(want) < steps:
            want.append(step(want[-1], len(prompt) + len(want) - 1))
        r = subprocess.run([TESSERA, "generate", static, "--input-ids", ",".join(map(str, prompt)), "--steps",
                            str(steps), "--carry", "present.*=past_key_values.*", "--threads", "1"],
                           capture_output=True, text=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        line = [l for l in r.stdout.splitlines() if l.startswith("generated:")][0]
        self.assertEqual([int(t) for t in line.split()[1:]], want)


if __name__ == "__main__":
    unittest.main()
