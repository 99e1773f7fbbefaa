"""bench/bench_gpu_kernels.py: without a GPU, ``run`` says so in one line, writes nothing and exits 0;
a CPU rehearsal times every kernel of a small exported catalogue and reports per kind and per graph;
``--resume`` keeps an earlier run's kernels and refuses another catalogue's; its pure helpers (SAME
padding against TensorFlow, the timing order, the copy fit, reduction axes, the catalogue's JSON);
and the committed catalogue is complete and still what the exporter writes."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("tensorflow")

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"
SCRIPT = BENCH / "bench_gpu_kernels.py"
sys.path.insert(0, str(BENCH))  # bench/ is a folder of scripts, not a package
import bench_gpu_kernels as gk  # noqa: E402

#: An analytical device preset for hand-built catalogues (1 TFLOP/s, 1 TB/s, 1 µs per op).
DEVICE = {"peak_flops_per_s": 1e12, "memory_bandwidth_bytes_per_s": 1e12, "launch_overhead_us": 1.0}


def _script(*argv: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *argv], cwd=ROOT, capture_output=True, text=True,
                          check=False, timeout=timeout)


def _kernel(op: str = "AddV2", *, us: float = 1.0, inputs: Any = (((4,), "float32"),),
            outputs: Any = (((4,), "float32"),), attrs: Any = None, consts: Any = None) -> gk.Kernel:
    """A kernel whose roofline time on :data:`DEVICE` is ``us`` µs (memory bound)."""
    return gk.Kernel(op, gk.KINDS[op], tuple(inputs), tuple(outputs), dict(attrs or {}), dict(consts or {}),
                     1.0, us * 1e6)


def _multiset(catalog: gk.Catalog, graph: gk.GraphUse) -> Counter[str]:
    return Counter({json.dumps(catalog.kernels[k].to_json(), sort_keys=True): n for k, n in graph.kernels})


def _untimed_us(graph: gk.GraphUse, device: dict[str, float]) -> float:
    return sum(n * device["launch_overhead_us"]
               + max(f / device["peak_flops_per_s"], b / device["memory_bandwidth_bytes_per_s"]) * 1e6
               for n, f, b in graph.untimed.values())


# --------------------------------------------------------------------------------------------
# run without a GPU


def test_without_a_gpu_run_prints_one_line_writes_nothing_and_exits_0(tmp_path: Path) -> None:
    if gk.pick_backend("auto", False) is not None:
        pytest.skip("a GPU is visible to PyTorch or JAX here")
    out = tmp_path / "x.json"
    proc = _script("--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [gk.NO_GPU]
    assert not out.exists() and list(tmp_path.iterdir()) == []


# --------------------------------------------------------------------------------------------
# a CPU rehearsal of a small exported catalogue, and --resume


@pytest.fixture(scope="module")
def rehearsal(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """``export --small --models mlp`` then ``run --cpu-rehearsal --backend jax`` of it."""
    folder = tmp_path_factory.mktemp("gpu_kernels")
    cat, res = folder / "cat.json", folder / "res.json"
    exported = _script("export", "--small", "--models", "mlp", "--out", str(cat))
    assert exported.returncode == 0, exported.stderr
    catalog = gk.Catalog.load(cat)
    assert f"wrote {cat}: {len(catalog.kernels)} kernels of {len(catalog.graphs)} graphs" in exported.stdout
    proc = _script("run", "--cpu-rehearsal", "--backend", "jax", "--catalog", str(cat), "--out", str(res))
    assert proc.returncode == 0, proc.stderr
    return {"folder": folder, "cat": cat, "res": res, "catalog": catalog, "proc": proc,
            "doc": json.loads(res.read_text())}


@pytest.mark.slow
def test_cpu_rehearsal_times_every_kernel_of_a_small_catalogue(rehearsal: dict[str, Any]) -> None:
    catalog: gk.Catalog = rehearsal["catalog"]
    doc = rehearsal["doc"]
    # the small configuration at batches 8 and 1, each graph using some kernels, each kernel used
    assert [(g.model, g.batch) for g in catalog.graphs] == [("mlp", gk.SMALL_BATCH), ("mlp", 1)]
    used = {k for g in catalog.graphs for k, _ in g.kernels}
    assert catalog.kernels and used == set(range(len(catalog.kernels)))
    assert all(k.kind == gk.KINDS[k.op] for k in catalog.kernels)

    header = rehearsal["proc"].stdout.splitlines()[0]
    assert header.startswith("bench_gpu_kernels: ") and "(CPU rehearsal: not GPU figures)" in header
    assert doc["format"] == gk.RESULT_FORMAT == "celeritas-gpu-kernels/1"
    meta = doc["meta"]
    assert meta["rehearsal"] is True and meta["backend"] == "jax" and meta["analytical_device"] == "h100"
    assert meta["catalogue_sha256"] == hashlib.sha256(rehearsal["cat"].read_bytes()).hexdigest()
    assert "resumed_kernels" not in meta
    device = catalog.devices["h100"]
    assert doc["analytical_device"] == device
    assert doc["cut"] == {"max_kernels": 0, "max_bytes": 0, "budget_s": 0}
    assert doc["floor"]["eager_us"] > 0

    # every kernel timed once, without error, in the precisions its kind is timed in
    rows = doc["kernels"]
    assert sorted(r["index"] for r in rows) == list(range(len(catalog.kernels)))
    assert doc["errors"] == [] and all(r["error"] == "" for r in rows)
    for row in rows:
        kernel = catalog.kernels[row["index"]]
        assert (row["op"], row["kind"]) == (kernel.op, kernel.kind)
        assert row["analytical_us"] == pytest.approx(gk.analytical_us(kernel, device))
        assert row["roofline_us"] == pytest.approx(gk.roofline_us(kernel, device))
        expected = {"tf32", "fp32"} if kernel.kind in gk.PRECISION_KINDS else {"default"}
        assert set(row["times"]) == expected
        assert all(t["eager_us"] > 0 for t in row["times"].values())

    # per kind: every kind of the catalogue, each kernel counted once
    kinds = {k.kind for k in catalog.kernels}
    assert {"matmul", "elementwise", "reduce", "softmax", "optimizer"} <= kinds
    assert [r["kind"] for r in doc["kinds"]] == [k for k in gk.KIND_ORDER if k in kinds]
    timed = Counter(r["kind"] for r in rows if not r["error"])
    assert {r["kind"]: r["timed"] for r in doc["kinds"]} == timed
    assert sum(r["timed"] for r in doc["kinds"]) == len(rows)
    assert all(r["failed"] == 0 and r["weighted_ratio"] > 0 for r in doc["kinds"])

    # per graph: one row each, analytical time from the catalogue, nothing untimed
    assert [(g["model"], g["batch"]) for g in doc["graphs"]] == [(g.model, g.batch) for g in catalog.graphs]
    for row, graph in zip(doc["graphs"], catalog.graphs, strict=True):
        assert row["ops"] == graph.ops
        analytical = sum(n * gk.analytical_us(catalog.kernels[k], device) for k, n in graph.kernels)
        assert row["analytical_us"] == pytest.approx(analytical)
        assert row["measured_us"] > 0 and row["ratio"] > 0
        assert row["ratio"] == pytest.approx(row["measured_us"] / row["analytical_us"])
        share = _untimed_us(graph, device) / (analytical + _untimed_us(graph, device))
        assert row["untimed_share"] == pytest.approx(share, abs=1e-12)
    assert doc["copies"] == {"samples_us": {}, "fit": {}}


@pytest.mark.slow
def test_resume_keeps_the_earlier_kernels_and_refuses_another_catalogue(rehearsal: dict[str, Any]) -> None:
    folder: Path = rehearsal["folder"]
    first = rehearsal["doc"]
    cat, res = str(rehearsal["cat"]), str(rehearsal["res"])
    again = folder / "again.json"
    proc = _script("run", "--cpu-rehearsal", "--backend", "jax", "--catalog", cat, "--resume", res,
                   "--out", str(again))
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(again.read_text())
    assert doc["meta"]["resumed_kernels"] == len(first["kernels"]) == len(rehearsal["catalog"].kernels)
    assert doc["meta"]["resumed_from"] == res

    def by_index(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return sorted(rows, key=lambda r: r["index"])

    assert by_index(doc["kernels"]) == by_index(first["kernels"])  # kept, not timed again
    assert doc["kinds"] == first["kinds"]
    assert [g["measured_us"] for g in doc["graphs"]] == [g["measured_us"] for g in first["graphs"]]

    # another catalogue (the same one less a graph): its run cannot resume from this one's results
    other = json.loads(rehearsal["cat"].read_text())
    other["graphs"] = other["graphs"][:1]
    other_cat, refused = folder / "other.json", folder / "refused.json"
    other_cat.write_text(json.dumps(other))
    proc = _script("run", "--cpu-rehearsal", "--backend", "jax", "--catalog", str(other_cat), "--resume", res,
                   "--out", str(refused))
    assert proc.returncode == 2
    assert proc.stdout == ""
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith("bench_gpu_kernels: --resume") and res in line
    assert "not a run of this catalogue" in line
    assert not refused.exists()


@pytest.mark.slow
def test_report_rescores_a_run_against_other_presets_and_refuses_what_is_no_run(
        rehearsal: dict[str, Any], tmp_path: Path) -> None:
    """``report`` prints a run's tables with the analytical figures of the preset it names: the
    measured sums are the run's, the analytical sums follow the preset."""
    doc = rehearsal["doc"]
    cat, res = str(rehearsal["cat"]), str(rehearsal["res"])
    same = _script("report", res, "--catalog", cat, "--catalogue-presets")
    other = _script("report", res, "--catalog", cat, "--catalogue-presets", "--device", "v100")
    assert same.returncode == 0 and other.returncode == 0, same.stderr + other.stderr

    def graph_rows(stdout: str) -> list[list[str]]:
        return [line.split() for line in stdout.splitlines() if line.startswith("mlp ")]

    rows, rows_v100 = graph_rows(same.stdout), graph_rows(other.stdout)
    assert len(rows) == len(doc["graphs"]) == len(rows_v100)
    for row, row_v100, graph in zip(rows, rows_v100, doc["graphs"], strict=True):
        assert float(row[3]) == pytest.approx(graph["measured_us"] / 1e3, abs=0.006)  # the run's times
        assert float(row[2]) == pytest.approx(graph["analytical_us"] / 1e3, abs=0.006)
        assert row_v100[3] == row[3] and float(row_v100[2]) > float(row[2])  # a V100 is slower

    missing = _script("report", str(tmp_path / "none.json"), "--catalog", cat)
    assert missing.returncode == 2 and missing.stdout == ""
    assert len(missing.stderr.strip().splitlines()) == 1 and "none.json" in missing.stderr


# --------------------------------------------------------------------------------------------
# pure functions


@pytest.mark.parametrize("size", [7, 8, 9, 10])
@pytest.mark.parametrize(("window", "stride", "dilation"),
                         [(1, 2, 1), (2, 2, 1), (3, 2, 1), (4, 2, 1), (5, 2, 1), (3, 1, 1), (4, 1, 1),
                          (3, 3, 1), (2, 3, 1), (3, 1, 2), (2, 1, 3)])
def test_same_padding_is_what_tensorflow_pads(size: int, window: int, stride: int, dilation: int) -> None:
    from celeritas_tf.tf import tensorflow

    tf = tensorflow()  # graph mode, as every TensorFlow test of this process
    rng = np.random.default_rng(size * 100 + window * 10 + stride)
    explicit = [[0, 0], list(gk.same_padding(size, window, stride, dilation)),
                list(gk.same_padding(size + 1, window, stride, dilation)), [0, 0]]
    graph = tf.Graph()
    with graph.as_default():
        x = tf.constant(rng.random((1, size, size + 1, 1)), tf.float32)  # an odd and an even dimension
        w = tf.constant(rng.random((window, window, 1, 1)), tf.float32)
        same = tf.nn.conv2d(x, w, stride, "SAME", dilations=dilation)
        padded = tf.nn.conv2d(x, w, stride, explicit, dilations=dilation)
        # max pooling pads the same way (with -inf: here only the shape can tell)
        pooled = tf.nn.max_pool2d(x, window, stride, "SAME")
        explicit_pool = tf.nn.max_pool2d(tf.pad(x, explicit, constant_values=-1.0), window, stride, "VALID")
    with tf.compat.v1.Session(graph=graph) as session:
        same_v, padded_v, pooled_v, explicit_pool_v = session.run([same, padded, pooled, explicit_pool])
    assert padded_v.shape == same_v.shape
    np.testing.assert_allclose(padded_v, same_v, rtol=1e-6)
    if dilation == 1:
        assert explicit_pool_v.shape == pooled_v.shape
        np.testing.assert_array_equal(explicit_pool_v, pooled_v)


def test_kernel_order_interleaves_the_graphs_heaviest_kernels() -> None:
    kernels = (
        _kernel("Relu", us=5.0),  # 0: heavier than 1 alone, lighter in graph a (run once, 1 ten times)
        _kernel("AddV2", us=1.0),  # 1: graph a's heaviest (10 × 2 µs), also once in b
        _kernel("MatMul", us=100.0),  # 2: graph b's heaviest
        _kernel("Mul", us=2.0),  # 3: graph b's second
        _kernel("Sum", us=1000.0),  # 4: in no graph
    )
    graphs = (
        gk.GraphUse("a", 8, 20, ((0, 1), (1, 10)), {}),
        gk.GraphUse("b", 8, 20, ((1, 1), (2, 1), (3, 1)), {}),
    )
    order = gk.kernel_order(gk.Catalog({"d": DEVICE}, kernels, graphs), DEVICE)
    assert sorted(order) == list(range(len(kernels)))  # each once
    assert order[:2] == [1, 2]  # a's heaviest, b's heaviest
    assert order[2:4] == [0, 3]  # then their second-ranked (1, b's third, is already in)
    assert order[-1] == 4


def test_fit_copies_recovers_latency_and_bandwidth() -> None:
    samples: dict[int, dict[str, float]] = {
        size: {"h2d": 10.0 + size / 50e3, "d2h": 25.0 + size / 20e3} for size in gk.COPY_SIZES
    }
    samples[123_456] = {"d2d": 3.0}  # one sample: no fit
    fit = gk.fit_copies(samples)
    assert set(fit) == {"h2d", "d2h"}
    assert fit["h2d"]["latency_us"] == pytest.approx(10.0, rel=0.01)
    assert fit["h2d"]["bandwidth_gb_per_s"] == pytest.approx(50.0, rel=0.01)
    assert fit["d2h"]["latency_us"] == pytest.approx(25.0, rel=0.01)
    assert fit["d2h"]["bandwidth_gb_per_s"] == pytest.approx(20.0, rel=0.01)
    largest = max(gk.COPY_SIZES)  # 1 GiB in about 21.5 ms: a little under 50 GB/s
    assert fit["h2d"]["largest_copy_gb_per_s"] == pytest.approx(largest / (10.0 + largest / 50e3) / 1e3)
    assert 49.0 < fit["h2d"]["largest_copy_gb_per_s"] < 50.0


def test_axes_of_constants_bias_add_grad_and_run_time_axes() -> None:
    total = _kernel("Sum", inputs=(((4, 5, 6), "float32"), ((2,), "int32")), outputs=(((5,), "float32"),),
                    consts={1: [-1, 0, 2]})
    assert gk.axes_of(total, 1, 3) == (0, 2)  # negative axes wrap, duplicates go
    for data_format, axes in (("NHWC", (0, 1, 2)), ("NCHW", (0, 2, 3))):
        bias = _kernel("BiasAddGrad", inputs=(((2, 3, 4, 5), "float32"),), outputs=(((5,), "float32"),),
                       attrs={"data_format": data_format})
        assert gk.axes_of(bias, 1, 4) == axes
    bias2d = _kernel("BiasAddGrad", inputs=(((8, 64), "float32"),), outputs=(((64,), "float32"),))
    assert gk.axes_of(bias2d, 1, 2) == (0,)
    l2 = _kernel("L2Loss", inputs=(((3, 4), "float32"),), outputs=(((), "float32"),))
    assert gk.axes_of(l2, 1, 2) == (0, 1)
    # a broadcast's gradient: the axes come from BroadcastGradientArgs at run time
    runtime = _kernel("Sum", inputs=(((8, 50, 64), "float32"), ((2,), "int32")),
                      outputs=(((64,), "float32"),))
    assert gk.axes_of(runtime, 1, 3) == (0, 1)
    from celeritas_tf.tf import tensorflow

    tf = tensorflow()
    with tf.Graph().as_default():
        assert tf.reduce_sum(tf.ones((8, 50, 64)), axis=gk.axes_of(runtime, 1, 3)).shape == (64,)


def test_catalog_json_round_trip(tmp_path: Path) -> None:
    conv = gk.Kernel("Conv2D", "conv", (((8, 32, 32, 3), "float32"), ((3, 3, 3, 16), "float32")),
                     (((8, 16, 16, 16), "float32"),),
                     {"strides": [1, 2, 2, 1], "padding": "SAME", "data_format": "NHWC"}, {}, 3.5e7, 2.5e5)
    transpose = gk.Kernel("Transpose", "copy", (((2, 3, 4), "float32"), ((3,), "int32")),
                          (((4, 2, 3), "float32"),), {}, {1: [2, 0, 1]}, 0.0, 192.0)
    catalog = gk.Catalog(
        {"h100": dict(DEVICE)},
        (conv, transpose),
        (gk.GraphUse("m", 8, 30, ((0, 2), (1, 1)), {"ConcatOffset": (3, 12.0, 96.0)}),
         gk.GraphUse("m", 1, 30, ((1, 4),), {})),
    )
    path = tmp_path / "catalog.json"
    path.write_text(json.dumps(catalog.to_json()))
    loaded = gk.Catalog.load(path)
    assert loaded == catalog
    assert loaded.to_json() == catalog.to_json() and loaded.to_json()["format"] == gk.FORMAT
    assert loaded.kernels[1].consts == {1: [2, 0, 1]}  # integer positions again
    path.write_text(json.dumps({**catalog.to_json(), "format": "something else"}))
    with pytest.raises(gk.BadInput, match="is not a celeritas-gpu-kernel-catalog/1 file"):
        gk.Catalog.load(path)


# --------------------------------------------------------------------------------------------
# the committed catalogue


@pytest.fixture(scope="module")
def committed() -> gk.Catalog:
    return gk.Catalog.load(gk.DEFAULT_CATALOG)


def test_committed_catalogue_is_complete_and_leaves_little_untimed(committed: gk.Catalog) -> None:
    from celeritas_tf.zoo import ZOO

    expected = [(m, b) for m in gk.EXPORT_MODELS
                for b in sorted({max(1, ZOO[m].paper_batch_size // d) for d in gk.BATCH_DIVISORS},
                                reverse=True)]
    assert len(expected) == 3 * len(gk.EXPORT_MODELS) == 12
    assert [(g.model, g.batch) for g in committed.graphs] == expected
    used = {k for g in committed.graphs for k, _ in g.kernels}
    assert used == set(range(len(committed.kernels)))  # every kernel indexed and used
    assert all(k.kind == gk.KINDS[k.op] for k in committed.kernels)
    device = committed.devices["h100"]
    for graph in committed.graphs:
        timed = sum(n * gk.analytical_us(committed.kernels[k], device) for k, n in graph.kernels)
        untimed = _untimed_us(graph, device)
        assert timed > 0
        assert untimed / (timed + untimed) < 0.05, (graph.model, graph.batch, dict(graph.untimed))


@pytest.mark.slow
def test_committed_catalogue_is_what_the_exporter_writes(committed: gk.Catalog) -> None:
    from celeritas_tf.zoo import ZOO

    assert ZOO["tensor_holography"].paper_batch_size == 32  # so the divisor 32 gives batch 1
    fresh = gk.export_catalog(["tensor_holography"], (32,), paper=True, log=lambda _: None)
    [graph] = fresh.graphs
    assert (graph.model, graph.batch) == ("tensor_holography", 1)
    [stored] = [g for g in committed.graphs if (g.model, g.batch) == ("tensor_holography", 1)]
    assert graph.ops == stored.ops
    assert _multiset(fresh, graph) == _multiset(committed, stored)
    assert graph.untimed == stored.untimed
