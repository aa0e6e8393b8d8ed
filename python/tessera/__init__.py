"""Tessera: a superoptimizer for ONNX models.

    import tessera
    plan = tessera.optimize(model, device="cpu", budget=10)   # onnx.ModelProto or a path
    outputs = plan.run({"x": x})                              # dict of numpy arrays
    plan.model                                                # the optimized onnx.ModelProto
    plan.save("out")                                          # what `tessera optimize -o out` writes

Nothing is written to disk unless `Plan.save` is called. Errors are
`tessera.Error`, whose message is the one the `tessera` command prints.
The compiled bindings are `tessera._tessera`; this file only adapts their
arguments and results to Python's (ModelProto, dicts).
"""
import json
import os

from . import _tessera
from ._tessera import Error, Model, Verdict

__all__ = ["Error", "Model", "Plan", "Verdict", "load", "optimize", "verify", "cost", "list_rules"]


def load(model, input_shapes=None):
    """An imported model from a path, an onnx.ModelProto, serialized bytes or a Model."""
    shapes = {k: list(v) for k, v in (input_shapes or {}).items()}
    if isinstance(model, Model):
        if shapes:
            raise ValueError("input_shapes apply when a model is imported, not to a tessera.Model")
        return model
    if isinstance(model, (str, os.PathLike)):
        return _tessera.load(os.fspath(model), shapes)
    if isinstance(model, (bytes, bytearray)):
        return _tessera.load_bytes(bytes(model), "<model bytes>", shapes)
    if hasattr(model, "SerializeToString") and hasattr(model, "graph"):
        name = "<ModelProto %s>" % model.graph.name if model.graph.name else "<ModelProto>"
        return _tessera.load_bytes(model.SerializeToString(), name, shapes)
    raise TypeError("expected an onnx.ModelProto, a path, bytes or a tessera.Model, got %s" % type(model).__name__)


class Plan:
    """An optimized model in memory: what `tessera optimize` would write, unwritten."""

    def __init__(self, plan):
        self._plan = plan
        self._models = None

    @property
    def mesh(self):
        """The device mesh the plan uses ("tp=2"), or None for one device."""
        return self._plan.mesh if self._plan.is_mesh else None

    @property
    def model(self):
        """The optimized onnx.ModelProto; for a mesh plan, a list with one per rank."""
        if self._models is None:
            import onnx
            if self._plan.is_mesh:
                self._models = [onnx.load_from_string(self._plan.model_bytes(r)) for r in range(self._plan.num_ranks)]
            else:
                self._models = onnx.load_from_string(self._plan.model_bytes(0))
        return self._models

    def run(self, feeds, backend="cpu", threads=0):
        """Runs the plan (every rank, for a mesh) on numpy inputs by name; returns the outputs by name."""
        return self._plan.run(feeds, backend, threads)

    def session(self, carry=(), backend="cpu", threads=0):
        """A session: the plan compiled once, run step by step with `session.step(feeds)`. Its carried
        state (optimize's carry, and `carry`: "OUT=IN" pairs or globs such as "present.*=past_key_values.*")
        stays on the ranks between steps; step returns the outputs that are not carried."""
        return _tessera.session(self._plan, list(carry), backend, int(threads))

    def save(self, directory):
        """Writes the plan folder, byte for byte what `tessera optimize -o DIR` writes."""
        self._plan.save(os.fspath(directory))

    @property
    def files(self):
        """The files save() writes."""
        return list(self._plan.files)

    @property
    def report(self):
        """report.json, as a dict."""
        return json.loads(self._plan.report_json)

    @property
    def report_text(self):
        """report.txt."""
        return self._plan.report_text

    @property
    def report_html(self):
        """report.html: one self-contained page (inline SVG, nothing fetched)."""
        return self._plan.report_html

    @property
    def plan(self):
        """plan.json, as a dict."""
        return json.loads(self._plan.plan_json)

    @property
    def mutations(self):
        """The rewrites applied: dicts with stage, rule, verification (and, for search, description...)."""
        return self._plan.mutations

    def __repr__(self):
        where = "mesh %s" % self.mesh if self.mesh else "one device"
        return "<tessera.Plan %s, %d mutations>" % (where, len(self.mutations))


def optimize(model, device="cpu", mesh=None, budget=30.0, seed=0, *, input_shapes=None, partial=True,
             disabled_rules=(), shards=(), shard_file=None, shard_search=True, device_memory=0, threads=0,
             measure=True, carry=()):
    """Optimizes a model (onnx.ModelProto, path, bytes or Model) in memory; returns a Plan.

    The arguments are `tessera optimize`'s flags: device (cpu, a100, h100, h200
    or a profile file), mesh ("tp=2", "dp=2,tp=4"), budget in seconds, seed,
    shards (--shard specs), carry (--carry OUT=IN pairs: outputs that feed
    inputs at the next step of a session) and so on. measure times both models on this
    machine's CPU runtime for device cpu (the report's measured gain).
    """
    m = load(model, input_shapes)
    return Plan(_tessera.optimize(m, device, mesh or "", float(budget), int(seed), bool(partial),
                                  list(disabled_rules), list(shards), os.fspath(shard_file) if shard_file else "",
                                  bool(shard_search), int(device_memory), int(threads), bool(measure),
                                  list(carry)))


def verify(original, candidate, seed=None, input_shapes=None):
    """Whether candidate computes original's outputs: a Verdict (truthy when equivalent) with
    the output boxes where they differ."""
    a, b = load(original, input_shapes), load(candidate, input_shapes)
    return _tessera.verify(a, b) if seed is None else _tessera.verify(a, b, int(seed))


def cost(model, device="cpu", *, fuse=True, cold=False, top=10, input_shapes=None):
    """The cost model's prediction per kernel, as `tessera cost --json` prints it (a dict)."""
    return json.loads(_tessera.cost_json(load(model, input_shapes), device, bool(fuse), bool(cold), int(top)))


def list_rules():
    """The canonicalization passes and rewrite rules: dicts with name, kind, identity, obligation, mesh_only."""
    return _tessera.list_rules()
