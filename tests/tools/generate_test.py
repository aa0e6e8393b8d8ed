"""`tessera generate` on a KV-cache decoder with grouped-query attention
(bench/models/generate.py's llama_static_step: 2 layers, hidden 128, 8
query and 2 KV heads, a fixed-length cache of 64 positions written in place
at cache_position), planned for tp=2 with Megatron's split and the caches
carried and sharded by KV heads:

- the ids equal one device's and ONNX Runtime's greedy loop, as threads and
  under a real mpirun (time-bounded), on 2 ranks and on 4 (more ranks than
  KV heads), with Megatron's K and V split, and with the KV heads held in
  groups of 2 ranks (S(1/2)): then no rank gathers K or V and each holds
  one KV head of the cache;
- under the sharding search, with no annotation on the caches, the search
  chooses to carry them split by KV heads;
- each step moves no KV bytes: the rank files' only collectives are the
  formula's 2 AllReduces of the hidden size per layer;
- each rank's cache inputs and outputs are 1/tp of the cache;
- with no annotation on the caches, the plan chooses to keep them split
  by KV heads across its boundary (by predicted time);
- with the head split by vocabulary columns (a vocab-parallel argmax of
  (max, index) pairs), the ids are the same and no logits are gathered;
- a rank that fails mid-generation, or is killed there, ends the others
  (mpirun ends the job; each other rank says so in one line, naming its
  step), time-bounded;
- a carried tensor of the wrong shape is a one-line error naming it."""
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

import numpy as np
import onnx

TESSERA = sys.argv.pop(1) if len(sys.argv) > 1 else "build/bin/tessera"
CHECK_SCHEMA = sys.argv.pop(1) if len(sys.argv) > 1 else "build/bin/check_plan_schema"
MPIEXEC = sys.argv.pop(1) if len(sys.argv) > 1 else "mpirun"
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LAYERS, HIDDEN, KV_HEADS, MAX_LEN, HEAD_DIM = 2, 128, 2, 64, 16
PROMPT, STEPS = [1, 2, 3], 8
MEGATRON = ["*/q/MatMul:in1=[S(1)]", "*/k/MatMul:in1=[S(1)]", "*/v/MatMul:in1=[S(1)]", "*/o/MatMul:in1=[S(0)]",
            "*/gate/MatMul:in1=[S(1)]", "*/up/MatMul:in1=[S(1)]", "*/down/MatMul:in1=[S(0)]"]
CARRY = "present.*=past_key_values.*"
# A fixed CPU profile: the plans below must not depend on what the host's
# calibration measured (under a sanitizer it measures a much slower host).
PROFILE = os.path.join(ROOT, "cost", "profiles", "cpu.json")


def rank_pid(root, rank):
    """The pid of the process of MPI rank `rank` among root's descendants
    (Open MPI gives each its rank in OMPI_COMM_WORLD_RANK), or None."""
    children = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(d))
    todo = list(children.get(root, []))
    while todo:
        pid = todo.pop()
        todo += children.get(pid, [])
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = f.read().split(b"\0")
        except OSError:
            continue
        if f"OMPI_COMM_WORLD_RANK={rank}".encode() in env:
            return pid
    return None


def generated(stdout):
    for line in stdout.splitlines():
        if line.startswith("generated:"):
            return [int(t) for t in line.split()[1:]]
    raise AssertionError("no 'generated:' line in:\n" + stdout)


class Generate(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="tessera-generate-")
        subprocess.run([sys.executable, os.path.join(ROOT, "bench", "models", "generate.py"), "--only",
                        "llama_static_step", "--out", cls.dir, "--no-check"], check=True, capture_output=True)
        cls.model = os.path.join(cls.dir, "llama_static_step", "model.onnx")
        megatron = [a for s in MEGATRON for a in ("--shard", s)]

        def optimize(out, *extra, annotations=megatron):
            args = [TESSERA, "optimize", cls.model, "-o", out, "--device", PROFILE, "--budget", "10",
                    "--carry", CARRY, *annotations, *extra]
            r = subprocess.run(args, capture_output=True, text=True)
            assert r.returncode == 0, r.stderr
            return out

        cls.plan = optimize(os.path.join(cls.dir, "plan"), "--mesh", "tp=2", "--shard", "past_key_values.*=[S(1)]")
        # The head split by vocabulary columns, the logits left on the ranks.
        cls.vocab_plan = optimize(os.path.join(cls.dir, "vocab"), "--mesh", "tp=2",
                                  "--shard", "past_key_values.*=[S(1)]",
                                  "--shard", "*/head/MatMul:in1=[S(1)]", "--shard", "logits=[S(2)]")
        # No annotation on the caches: the plan chooses how carried state
        # crosses its boundary (by predicted time), from the weights' split.
        cls.chosen_plan = optimize(os.path.join(cls.dir, "chosen"), "--mesh", "tp=2", "--no-shard-search")
        # tp=4 over 2 KV heads with Megatron's K and V split [S(1)] (within
        # heads at tp=4), the caches' boundary chosen after propagation.
        cls.tp4_plan = optimize(os.path.join(cls.dir, "tp4"), "--mesh", "tp=4", "--no-shard-search")
        # tp=4 over 2 KV heads with the K and V projections and the caches
        # in 2 groups (S(d/2)): each KV head held by 2 ranks, as Megatron-LM
        # and vLLM replicate KV heads; nothing gathered.
        grouped = [a for s in MEGATRON if "/k/" not in s and "/v/" not in s for a in ("--shard", s)]
        grouped += ["--shard", "*/k/MatMul:in1=[S(1/2)]", "--shard", "*/v/MatMul:in1=[S(1/2)]"]
        cls.tp4_grouped = optimize(os.path.join(cls.dir, "tp4g"), "--mesh", "tp=4", "--no-shard-search",
                                   "--shard", "past_key_values.*=[S(1/2)]", annotations=grouped)
        # The sharding search with Megatron's weights and no annotation on
        # the caches: the caches' boundary is one of its decisions.
        cls.searched_carry = optimize(os.path.join(cls.dir, "searched"), "--mesh", "tp=2")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir, ignore_errors=True)

    def generate(self, prefix, path, *extra):
        r = subprocess.run(prefix + [TESSERA, "generate", path, "--input-ids", ",".join(map(str, PROMPT)),
                                     "--steps", str(STEPS), *extra], capture_output=True, text=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        return generated(r.stdout)

    def caches_cross_split_by_heads(self, plan):
        """Asserts every cache enters and leaves `plan` as [S(1)]; returns its plan.json."""
        import json
        with open(os.path.join(plan, "plan.json")) as f:
            j = json.load(f)
        for i in range(LAYERS):
            for kind in ("key", "value"):
                self.assertEqual(j["sharding"]["inputs"][f"past_key_values.{i}.{kind}"], "[S(1)]")
                self.assertEqual(j["sharding"]["outputs"][f"present.{i}.{kind}"], "[S(1)]")
        return j

    def onnxruntime_ids(self):
        import onnxruntime as ort
        s = ort.InferenceSession(self.model, providers=["CPUExecutionProvider"])
        names = [i.name for i in s.get_inputs()]
        caches = {n: np.zeros((1, KV_HEADS, MAX_LEN, HEAD_DIM), np.float32) for n in names if n.startswith("past")}
        out_names = [o.name for o in s.get_outputs()]

        def step(token, position):
            feeds = {"input_ids": np.array([[token]], np.int64), "cache_position": np.array([position], np.int64)}
            outs = dict(zip(out_names, s.run(None, {**feeds, **caches})))
            for n in caches:
                caches[n] = outs[n.replace("past_key_values", "present")]
            return int(np.argmax(outs["logits"].reshape(-1)))

        for i, t in enumerate(PROMPT):
            nxt = step(t, i)
        ids = [nxt]
        while len(ids) < STEPS:
            ids.append(step(ids[-1], len(PROMPT) + len(ids) - 1))
        return ids

    def test_plan_records_the_boundary_and_the_carry(self):
        r = subprocess.run([CHECK_SCHEMA, self.plan], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        import json
        with open(os.path.join(self.plan, "plan.json")) as f:
            j = json.load(f)
        self.assertEqual(len(j["carry"]), 2 * LAYERS)
        for i in range(LAYERS):
            for kind in ("key", "value"):
                self.assertEqual(j["sharding"]["inputs"][f"past_key_values.{i}.{kind}"], "[S(1)]")
                # given to the carried output by --carry: the caches stay split
                self.assertEqual(j["sharding"]["outputs"][f"present.{i}.{kind}"], "[S(1)]")
        self.assertEqual(j["sharding"]["outputs"]["logits"], "[R]")

    def test_ids_equal_one_device_threads_and_mpirun(self):
        one = self.generate([], self.model, "--carry", CARRY)
        self.assertEqual(len(one), STEPS)
        self.assertEqual(one, self.onnxruntime_ids())
        self.assertEqual(self.generate([], self.plan), one)
        mpi = [MPIEXEC, "--allow-run-as-root", "--oversubscribe", "-np", "2"]
        self.assertEqual(self.generate(mpi, self.plan), one)
        # Vocab-parallel: the ranks' (max, index) pairs pick the same ids.
        self.assertEqual(self.generate([], self.vocab_plan), one)
        self.assertEqual(self.generate(mpi, self.vocab_plan), one)

    def test_the_plan_chooses_to_keep_unannotated_carried_state_split(self):
        j = self.caches_cross_split_by_heads(self.chosen_plan)
        self.assertEqual([c["kind"] for c in j["collectives"]], ["AllReduce"] * (2 * LAYERS))
        self.assertEqual(self.generate([], self.chosen_plan), self.generate([], self.model, "--carry", CARRY))

    def test_ids_equal_on_four_ranks(self):
        one = self.generate([], self.model, "--carry", CARRY)
        self.assertEqual(self.generate([], self.tp4_plan), one)
        mpi = [MPIEXEC, "--allow-run-as-root", "--oversubscribe", "-np", "4"]
        self.assertEqual(self.generate(mpi, self.tp4_plan), one)

    def test_kv_heads_in_groups_on_four_ranks(self):
        one = self.generate([], self.model, "--carry", CARRY)
        self.assertEqual(self.generate([], self.tp4_grouped), one)
        mpi = [MPIEXEC, "--allow-run-as-root", "--oversubscribe", "-np", "4"]
        self.assertEqual(self.generate(mpi, self.tp4_grouped), one)
        import json
        with open(os.path.join(self.tp4_grouped, "plan.json")) as f:
            j = json.load(f)
        self.assertEqual(j["sharding"]["outputs"]["present.0.key"], "[S(1/2)]")
        for r in range(4):
            model = onnx.load(os.path.join(self.tp4_grouped, f"rank{r}.onnx"), load_external_data=False)
            kinds = [n.op_type for n in model.graph.node if n.domain == "tessera"]
            # No AllGather of K or V: the formula's AllReduces only.
            self.assertEqual(kinds, ["AllReduce"] * (2 * LAYERS), r)
            for edge in (model.graph.input, model.graph.output):
                for v in edge:
                    if v.name.startswith(("past_key_values", "present")):
                        # 1/kv_heads of the cache: one KV head of two.
                        self.assertEqual([d.dim_value for d in v.type.tensor_type.shape.dim],
                                         [1, 1, MAX_LEN, HEAD_DIM], v.name)

    def test_the_search_chooses_the_carried_boundary(self):
        j = self.caches_cross_split_by_heads(self.searched_carry)
        # No KV bytes move: no collective reads a cache-length tensor.
        model = onnx.shape_inference.infer_shapes(onnx.load(os.path.join(self.searched_carry, "rank0.onnx")))
        shapes = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
                  for v in list(model.graph.value_info) + list(model.graph.input)}
        for n in model.graph.node:
            if n.domain == "tessera":
                self.assertNotIn(MAX_LEN, shapes[n.input[0]], n.name)
        self.assertEqual(self.generate([], self.searched_carry), self.generate([], self.model, "--carry", CARRY))

    def test_a_vocab_parallel_head_gathers_no_logits(self):
        model = onnx.shape_inference.infer_shapes(onnx.load(os.path.join(self.vocab_plan, "rank0.onnx")))
        kinds = [n.op_type for n in model.graph.node if n.domain == "tessera"]
        self.assertEqual(kinds, ["AllReduce"] * (2 * LAYERS))
        logits = [o for o in model.graph.output if o.name == "logits"][0]
        self.assertEqual([d.dim_value for d in logits.type.tensor_type.shape.dim], [1, 1, 500])

    def test_each_step_moves_exactly_the_formula_bytes(self):
        for r in range(2):
            model = onnx.shape_inference.infer_shapes(onnx.load(os.path.join(self.plan, f"rank{r}.onnx")))
            shapes = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
                      for v in list(model.graph.value_info) + list(model.graph.input)}
            moved = {}
            for n in model.graph.node:
                if n.domain != "tessera":
                    continue
                shape = shapes[n.input[0]]
                moved.setdefault(n.op_type, []).append(shape)
                self.assertNotIn(MAX_LEN, shape, f"{n.name} moves cache positions {shape}")
            # 2 AllReduces of the hidden size per layer, f32; nothing else.
            self.assertEqual(sorted(moved), ["AllReduce"], moved)
            self.assertEqual(moved["AllReduce"], [[1, 1, HIDDEN]] * (2 * LAYERS))
            step_bytes = sum(4 * int(np.prod(s)) for s in moved["AllReduce"])
            self.assertEqual(step_bytes, 2 * LAYERS * HIDDEN * 4)

    def test_each_rank_holds_half_the_cache(self):
        whole = onnx.load(self.model, load_external_data=False)
        cache = [i for i in whole.graph.input if i.name.startswith("past_key_values")]
        cache_bytes = sum(4 * int(np.prod([d.dim_value for d in i.type.tensor_type.shape.dim])) for i in cache)
        for r in range(2):
            model = onnx.load(os.path.join(self.plan, f"rank{r}.onnx"), load_external_data=False)
            for edge in (model.graph.input, model.graph.output):
                mine = [v for v in edge if v.name.startswith(("past_key_values", "present"))]
                self.assertEqual(len(mine), 2 * LAYERS)
                for v in mine:
                    self.assertEqual([d.dim_value for d in v.type.tensor_type.shape.dim],
                                     [1, KV_HEADS // 2, MAX_LEN, HEAD_DIM], v.name)
                held = sum(4 * int(np.prod([d.dim_value for d in v.type.tensor_type.shape.dim])) for v in mine)
                self.assertEqual(2 * held, cache_bytes)

    def test_a_step_that_fails_mid_generation_ends_the_job(self):
        # The 62nd decode step writes position 64 of a 64-position cache:
        # every rank fails there and mpirun ends (bounded by the timeout).
        mpi = [MPIEXEC, "--allow-run-as-root", "--oversubscribe", "-np", "2"]
        r = subprocess.run(mpi + [TESSERA, "generate", self.plan, "--input-ids", "1,2,3", "--steps", "70"],
                           capture_output=True, text=True, timeout=60)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("out of range", r.stderr)
        self.assertNotIn("generated:", r.stdout)

    def test_one_rank_failing_mid_generation_ends_the_others(self):
        # Two programs in one job (mpirun's MPMD form): rank 1's prompt has
        # an id outside the vocabulary at its 3rd token, so rank 1's step 2
        # fails in the embedding lookup while rank 0's step 2 waits for it
        # in a collective. Rank 1 says why; mpirun ends rank 0, which says
        # it was ended and where. Bounded by the timeout.
        mpi = [MPIEXEC, "--allow-run-as-root", "--oversubscribe"]
        rank = lambda ids: ["-np", "1", TESSERA, "generate", self.plan, "--input-ids", ids, "--steps", "40"]
        r = subprocess.run(mpi + rank("1,2,3,4") + [":"] + rank("1,2,100000,4"), capture_output=True, text=True,
                           timeout=60)
        self.assertNotEqual(r.returncode, 0)
        self.assertNotIn("generated:", r.stdout)
        ours = [l for l in r.stderr.splitlines() if l.startswith("tessera: error:")]
        self.assertEqual(len([l for l in ours if l.startswith("tessera: error: rank 1:")]), 1, r.stderr)
        self.assertIn("out of range", [l for l in ours if "rank 1:" in l][0])
        ended = [l for l in ours if l.startswith("tessera: error: rank 0: ended by signal")]
        self.assertEqual(len(ended), 1, r.stderr)
        self.assertIn("at step 2 of the generation", ended[0])

    def test_a_rank_killed_mid_generation_ends_the_others(self):
        # Rank 1 is killed (SIGKILL) as soon as rank 0 has streamed its first
        # generated id: mpirun notices and ends rank 0, which is waiting for
        # rank 1 in a collective; rank 0 says so in one line. Rank 1's pid is
        # found before the first id, so the kill follows it at once; a loop
        # that nonetheless ran to its end before the kill landed (a loaded
        # host) proves nothing either way and is run again, at most 5 times.
        mpi = [MPIEXEC, "--allow-run-as-root", "--oversubscribe", "-np", "2"]
        for attempt in range(5):
            p = subprocess.Popen(mpi + [TESSERA, "generate", self.plan, "--input-ids", "1,2,3", "--steps", "60",
                                        "--stream"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                 start_new_session=True)
            try:
                victim = None
                for _ in range(600):
                    victim = rank_pid(p.pid, 1)
                    if victim is not None or p.poll() is not None:
                        break
                    time.sleep(0.05)
                self.assertIsNotNone(victim, "no rank 1 process under mpirun")
                first = p.stdout.readline()
                self.assertTrue(first.startswith("token 0:"), first)
                try:
                    os.kill(victim, signal.SIGKILL)
                except ProcessLookupError:
                    pass  # rank 1 ended first: the loop ran to its end
                out, err = p.communicate(timeout=60)
            finally:
                if p.poll() is None:
                    os.killpg(p.pid, signal.SIGKILL)
                    p.wait()
            if p.returncode == 0 and "generated:" in out:
                continue
            break
        self.assertNotEqual(p.returncode, 0, "the loop ran to its end before the kill in 5 tries")
        self.assertNotIn("generated:", out)
        ended = [l for l in err.splitlines() if l.startswith("tessera: error: rank 0: ended by signal")]
        self.assertEqual(len(ended), 1, err)

    def test_carried_tensor_of_the_wrong_shape_is_a_one_line_error(self):
        r = subprocess.run([TESSERA, "generate", self.model, "--input-ids", "1", "--steps", "2", "--carry",
                            "logits=past_key_values.0.key"], capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 1, r.stderr)
        lines = r.stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, r.stderr)
        self.assertIn("carried tensor 'logits'", lines[0])
        self.assertIn("past_key_values.0.key", lines[0])


if __name__ == "__main__":
    unittest.main()
