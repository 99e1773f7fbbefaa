"""Reference column: Baechi's own placers (beomyeol/baechi; Jeon et al., SoCC 2020) run on our graphs.

``celeritas_core.placers`` re-implements Baechi's m-TOPO, m-ETF and m-SCT (``celeritas_core/placers/etf.py``,
``grouping.py``). This module runs **Baechi's code itself**, outside the product, so that a benchmark can
replay Baechi's placements with our simulator next to our re-implementations. Baechi's code is never
copied into this repository: the caller names a checkout (``baechi_dir``; the CLI's ``--baechi-dir`` or
``$BAECHI_DIR``), or :func:`checkout_baechi` extracts ``placer/`` and ``utils/`` from a git mirror into a
build folder.

What runs, and what does not
----------------------------
Baechi's ``placer/placer_lib.py`` uses TF1 APIs at import (``tf.app.flags``) and cannot be imported under
TensorFlow 2. Its modules that can be are imported as they are: ``placer.placer_utils``, ``placer.m_etf``,
``placer.m_topo``, ``placer.virtual_scheduler``, ``placer.grouper`` (that one defines a ``tf.app.flags``
flag at import: it imports with ``tensorflow.app`` briefly set to a stand-in flags object, so no absl flag
is registered, and the attribute is removed again) and ``placer.m_sct`` (which needs ``cvxopt``; its LP
calls ``cvxopt.solvers.lp(..., solver='mosek')``; MOSEK needs a licence, and without it m-SCT's module
sees a ``cvxopt`` whose ``solvers.lp`` uses cvxopt's own LP solver, :data:`SCT_SOLVER`; without cvxopt
the m-SCT configurations are left out of :data:`BAECHI_CONFIGS` and listed in
:data:`UNAVAILABLE_CONFIGS`). From ``placer_lib.py`` the functions that take networkx graphs are read
from the checkout's source and executed, unchanged (its ``ast``, at their own line numbers, in a
namespace that gives them the names they use): ``get_comm_cost``, ``create_device_graph``,
``DefaultPlacer._initialize_placement_fn`` (so each method is configured exactly as Baechi does),
``FusedOpPlacer._generate_fused_op_graph`` with its two helpers, and the ``tf.app.flags.DEFINE_*``
defaults (``sct_threshold`` 0.1, ``placer_memory_fraction`` 1.0, ``fusion_check_disjoint_paths`` and
``fusion_allow_cycle`` false). Baechi's own modules are loaded as the packages ``placer`` and ``utils``
only while they import (the previous ``sys.modules`` entries are restored afterwards), so they cannot
shadow or be shadowed by other modules of those generic names.

The placement follows ``DefaultPlacer`` / ``FusedOpPlacer``: build the op graph (below), run the grouper
(``TFColocationGrouper``: TensorFlow's co-location lists become one group name; or
``CoplacementGrouper``), build the device graph, run the placement function, for ``fusion`` first fuse
the ops of each group that are directly connected (``_generate_fused_op_graph``) and give every fused op's
device to its members (the loop of ``FusedOpPlacer.run_placement_algorithm``, re-typed here because it is
a method on a TensorFlow-bound object); the adjuster is Baechi's default ``noop``. Baechi's own estimate
of the step (its ``VirtualScheduler``, as ``DefaultPlacer.run`` logs it) comes back with the placement.
Baechi's third placer type, ``colocation`` (``ColocationGraphPlacer``), is not offered: it reads an op
``memory`` attribute that ``PlacementGraphGenerator`` never sets, builds merged nodes without the memory
fields and ``topo_order`` its placers need, and saves figures on a cycle; it fails inside Baechi too.

Configurations (:data:`BAECHI_CONFIGS`): ``m-etf``, ``m-etf-reserve``, ``m-topo``, ``m-topo-nonuniform``,
``m-sct``, ``m-sct-reserve`` are ``--placer_type=default --grouper=tf --placement_method=NAME`` (dashes for
underscores); each ``NAME/fusion`` is ``--placer_type=fusion --grouper=coplace``, the setting of Baechi's
README.

The op graph (``PlacementGraphGenerator._add_nodes`` / ``_add_edges``)
---------------------------------------------------------------------
One ``networkx.DiGraph`` node per op of our graph, node id = our node index (Baechi numbers ops in TF
creation order; no op is pruned: Baechi's ``prune_dangling_ops`` drops ops without edges, which TF then
places itself, and here every op needs a device). Attributes:

* ``weight``: compute time, µs, ``max(1, int(round(time_us / speed)))`` (Baechi forces every op to cost at
  least 1 µs); devices must have one speed (Baechi models identical devices).
* ``name``, ``id``; ``colocation_group``: the raw list TensorFlow gives (``tf_op.colocation_groups()``):
  ``["loc:@GROUP"]`` for an op of our group ``GROUP``, ``["loc:@OPNAME"]`` for an op without one, as TF
  co-locates every op with itself. The grouper turns the lists into one name per op, as in Baechi.
* memory (bytes, ints). Baechi counts an op's persistent memory *inside* its outputs, as TensorFlow
  reports a variable (its output's allocation is the variable's buffer, and ``persistent_memory_size``
  the same bytes): ``m_etf`` allocates ``temporary_memory + sum(output_memory)`` when an op runs and
  frees ``sum(output_memory) - persistent_memory`` when its last consumer has run; ``m_topo`` charges
  ``temporary_memory + sum(output_memory)``; a co-location group needs ``persistent_memory`` summed.
  So ``persistent_memory`` is also added to output 0. With liveness fields (a modelled op):
  ``output_memory`` = its ``output_bytes`` (an output that aliases an input: 0, it adds no bytes),
  plus ``persistent_bytes`` on output 0; ``persistent_memory`` = ``persistent_bytes``;
  ``temporary_memory`` = ``scratch_bytes``. (Our variables declare a 0-byte output and their size as
  persistent bytes; given as they are, Baechi would free a negative amount after the consumers, i.e.
  allocate the variable late and unchecked, and overfill devices.) Without liveness fields (the sum
  model: ``memory_bytes`` live all step): ``persistent_memory`` = ``memory_bytes`` and
  ``output_memory`` = ``[memory_bytes, 0, …]``, so the whole ``memory_bytes`` is held from the op's
  start to the end of the step (Baechi's own stats path sets ``persistent_memory = sum(outputs)`` the
  same way). Outputs are padded so that every port an edge reads exists (``max src_output + 1``); a
  padded liveness output is sized by its largest edge, as our simulator does.

One edge per (producer, consumer) pair, merged as ``_add_edges`` does: ``tensor`` lists the distinct
tensors (``name`` ``"SRC:PORT"``, ``num_bytes``, ``weight``) and the edge ``weight`` is the sum of their
communication costs. A tensor's ``weight`` is ``get_comm_cost`` = ``int(round(k * bytes + b))`` of the
bytes our simulator sends for it (its largest edge) with the cluster's flat model; its ``num_bytes`` is
``output_memory[port]`` as in ``_add_edges`` (Baechi reads it back only when fusing ops, to recompute the
fused op's outputs). Baechi takes both from ``output_memory``; here they differ because a sum-model op's
``memory_bytes`` is no tensor size. An edge of 0 bytes is a control dependency: Baechi's ``"^SRC"`` of 4
bytes, dropped when the pair already has a data edge (TensorFlow drops such control inputs). Edges are
added per consumer in node order, data inputs before control inputs, as ``_add_edges`` walks TF ops, and
numbered ``id`` 0, 1, … (m-SCT's LP indexes its variables by them). Then
``placer_utils.assign_topo_order``. The device graph is ``create_device_graph``'s (``memory_limit`` = each
device's memory); only flat clusters (no topology), as Baechi has one transfer model.

Failures, and Baechi's behaviour to expect
------------------------------------------
Baechi's placers raise or assert when the ops do not fit (m-TOPO: ``RuntimeError: N operators cannot be
placed``; m-ETF: ``AssertionError: # scheduled ops=…``, when every device is too full for every ready op).
:func:`baechi_run` reports that as :attr:`BaechiRun.error`; :func:`baechi_place` raises
:class:`BaechiPlacementError`. A checkout that cannot be loaded, or a configuration whose dependencies are
missing, raises :class:`BaechiUnavailableError`. As written in Baechi, and seen on our graphs:

* m-ETF has no look-ahead: on tight devices it fills them with forward activations and then has no op
  that fits (a failure, not an over-full placement). Without ``reserve`` it checks a co-location group's
  memory when the group's first op is placed but reserves none of it, so later groups can take it.
* After fusion a fused op's ``output_memory`` is recomputed from its outgoing tensors while its
  ``persistent_memory`` is the sum over its ops, so m-ETF frees a negative amount (allocates, unchecked)
  when its consumers have run; devices can end over their limit and m-ETF then stops (the failure above).
  The same makes ``m-topo/fusion`` refuse groups whose persistent memory exceeds its per-device share.
* Uniform m-TOPO (``m-topo``) ignores the devices' memory: it spreads memory evenly up to
  ``total / devices + largest op``. ``m-topo-nonuniform`` fills devices in order up to their memory, as
  Baechi counts it. Our simulator's liveness-aware peak can exceed a device's memory for any of them.

Run: ``.venv/bin/python bench/baechi_reference.py GRAPH.json --devices 4 --device-memory 8GiB
--config m-etf --config m-etf/fusion`` (``--help`` for the rest).
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import copy
import functools
import importlib
import importlib.machinery
import importlib.util
import logging
import os
import subprocess
import sys
import tempfile
import time
import types
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from celeritas_core.graphs.cluster import Cluster
from celeritas_core.graphs.graph import Graph

#: Environment variable naming an existing Baechi checkout (a folder holding ``placer/`` and ``utils/``).
BAECHI_DIR_ENV = "BAECHI_DIR"
#: Environment variable naming the git mirror of beomyeol/baechi that :func:`checkout_baechi` reads.
BAECHI_MIRROR_ENV = "BAECHI_MIRROR"
#: Where this workplace keeps the mirror when ``$BAECHI_MIRROR`` is not set.
DEFAULT_MIRROR = Path("/work/.mirror/beomyeol+baechi/repo")

#: Baechi's module files this module imports or reads (relative to the checkout).
_REQUIRED_FILES = ("placer/placer_utils.py", "placer/device.py", "placer/m_etf.py", "placer/m_topo.py",
                   "placer/grouper.py", "placer/virtual_scheduler.py", "placer/placer_lib.py",
                   "utils/logger.py")
#: The parts of placer_lib.py executed from the checkout's source: top-level functions, and class methods.
_PLACER_LIB_FUNCTIONS = ("get_comm_cost", "create_device_graph")
_PLACER_LIB_METHODS = {
    "DefaultPlacer": ("_initialize_placement_fn",),
    "FusedOpPlacer": ("_add_fused_edge", "_assign_new_ids", "_generate_fused_op_graph"),
}
#: Bytes Baechi charges a control dependency (``_add_edges``: "use 4 bytes for control edges").
_CONTROL_EDGE_BYTES = 4


class BaechiUnavailableError(RuntimeError):
    """Baechi cannot run here: no checkout, a module that does not import, or a missing dependency."""


class BaechiPlacementError(RuntimeError):
    """Baechi's placer raised or asserted on this graph (typically: the ops do not fit in memory)."""


# ---------------------------------------------------------------------------- configurations
@dataclass(frozen=True)
class BaechiConfig:
    """One way of running Baechi: the flags ``--placement_method``, ``--placer_type``, ``--grouper``."""

    method: str
    """Baechi's placement method (``m_etf``, ``m_etf_reserve``, ``m_topo``, ``m_topo_nonuniform``,
    ``m_sct``, ``m_sct_reserve``), configured by ``DefaultPlacer._initialize_placement_fn``."""
    placer_type: str
    """``"default"`` (``DefaultPlacer``) or ``"fusion"`` (``FusedOpPlacer``)."""
    grouper: str
    """``"tf"`` (``TFColocationGrouper``) or ``"coplace"`` (``CoplacementGrouper``)."""

    @property
    def needs_sct(self) -> bool:
        """Whether the method is m-SCT (needs cvxopt; MOSEK, or cvxopt's own solver instead)."""
        return self.method.startswith("m_sct")

    @property
    def flags(self) -> str:
        """The configuration as Baechi's command-line flags."""
        return (f"--placement_method={self.method} --placer_type={self.placer_type} "
                f"--grouper={self.grouper}")


_METHODS = ("m_etf", "m_etf_reserve", "m_topo", "m_topo_nonuniform", "m_sct", "m_sct_reserve")

#: Every configuration, available here or not: ``NAME`` (default placer, TF grouper) and ``NAME/fusion``
#: (fused-op placer, co-placement grouper, as in Baechi's README).
ALL_BAECHI_CONFIGS: dict[str, BaechiConfig] = {
    **{m.replace("_", "-"): BaechiConfig(m, "default", "tf") for m in _METHODS},
    **{m.replace("_", "-") + "/fusion": BaechiConfig(m, "fusion", "coplace") for m in _METHODS},
}


def _sct_missing() -> str | None:
    """Why m-SCT cannot run here (no cvxopt), or None."""
    try:
        import cvxopt  # noqa: F401
    except ImportError as exc:
        return f"m-SCT needs cvxopt ({exc})"
    return None


#: Baechi's m-SCT solves its LP with ``cvxopt.solvers.lp(..., solver='mosek')``; MOSEK needs a licence.
#: Without it the LP goes to cvxopt's own solver (the same LP and optimum; where the optimum is not
#: unique the favourite children may differ), and :data:`SCT_SOLVER` says so.
SCT_SOLVER = "mosek" if importlib.util.find_spec("mosek") is not None else "cvxopt (MOSEK absent)"


class _CvxoptWithoutMosek(types.ModuleType):
    """``cvxopt`` as Baechi's m_sct sees it when MOSEK is absent: everything as is, except that
    ``solvers.lp`` drops ``solver='mosek'`` and solves with cvxopt's own LP solver."""

    def __init__(self, cvxopt: types.ModuleType) -> None:
        super().__init__("cvxopt")
        self._real = cvxopt
        real_lp = cvxopt.solvers.lp

        def lp(*args: Any, **kwargs: Any) -> Any:
            if kwargs.get("solver") == "mosek":
                kwargs.pop("solver")
                kwargs.setdefault("options", {"show_progress": False})  # its iteration log, quiet
            return real_lp(*args, **kwargs)

        self.solvers = types.SimpleNamespace(lp=lp, options=cvxopt.solvers.options)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


_SCT_MISSING = _sct_missing()

#: The configurations whose dependencies import here (m-SCT only with cvxopt).
BAECHI_CONFIGS: dict[str, BaechiConfig] = {
    name: config for name, config in ALL_BAECHI_CONFIGS.items() if not (config.needs_sct and _SCT_MISSING)}
#: The configurations left out of :data:`BAECHI_CONFIGS`, with the reason.
UNAVAILABLE_CONFIGS: dict[str, str] = {
    name: str(_SCT_MISSING) for name in ALL_BAECHI_CONFIGS if name not in BAECHI_CONFIGS}


# ---------------------------------------------------------------------------- getting the code
def checkout_baechi(dest: Path, mirror: Path) -> Path:
    """Extract Baechi's ``placer/`` and ``utils/`` at ``HEAD`` of a git mirror into ``dest``.

    The equivalent of ``git -C MIRROR archive HEAD placer utils | tar -x -C DEST``: nothing of Baechi
    is kept in this repository, and the mirror is only read.

    Parameters
    ----------
    dest : pathlib.Path
        Folder to extract into (created if missing); existing files of the same names are replaced.
    mirror : pathlib.Path
        A git directory of beomyeol/baechi (bare or not).

    Returns
    -------
    pathlib.Path
        ``dest``, to pass as ``baechi_dir``.

    Raises
    ------
    BaechiUnavailableError
        When the mirror is missing or ``git archive`` / ``tar`` fails.
    """
    mirror = Path(mirror)
    if not mirror.exists():
        raise BaechiUnavailableError(f"no Baechi mirror at {mirror}")
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    with subprocess.Popen(["git", "-C", str(mirror), "archive", "HEAD", "placer", "utils"],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE) as git:
        assert git.stdout is not None
        tar = subprocess.run(["tar", "-x", "-C", str(dest)], stdin=git.stdout, capture_output=True,
                             check=False)
        git.stdout.close()
        git_err = git.stderr.read().decode(errors="replace") if git.stderr else ""
        git_rc = git.wait()
    if git_rc != 0 or tar.returncode != 0:
        reason = git_err.strip() or tar.stderr.decode(errors="replace").strip()
        raise BaechiUnavailableError(f"cannot extract Baechi from {mirror}: {reason}")
    return dest


def default_baechi_dir(build_dir: Path | None = None) -> Path:
    """The checkout to use: ``$BAECHI_DIR`` when set, else a fresh extraction of the mirror
    (``$BAECHI_MIRROR`` or :data:`DEFAULT_MIRROR`) into ``build_dir`` (default a new temporary folder).

    Parameters
    ----------
    build_dir : pathlib.Path, optional
        Where to extract the mirror when ``$BAECHI_DIR`` is not set.

    Returns
    -------
    pathlib.Path
        A folder holding ``placer/`` and ``utils/``.

    Raises
    ------
    BaechiUnavailableError
        As :func:`checkout_baechi`.
    """
    env = os.environ.get(BAECHI_DIR_ENV)
    if env:
        return Path(env)
    mirror = Path(os.environ.get(BAECHI_MIRROR_ENV) or DEFAULT_MIRROR)
    dest = build_dir if build_dir is not None else Path(tempfile.mkdtemp(prefix="baechi-"))
    return checkout_baechi(dest, mirror)


# ---------------------------------------------------------------------------- loading the code
class _FlagsShim:
    """Stands in for ``tf.app.flags``: ``DEFINE_*(name, default, ...)`` records the default on
    :attr:`FLAGS` (Baechi's modules read flags only when no argument is given)."""

    def __init__(self) -> None:
        self.FLAGS = types.SimpleNamespace()

    def _define(self, name: str, default: Any, *args: Any, **kwargs: Any) -> None:
        setattr(self.FLAGS, name, default)

    DEFINE_enum = DEFINE_boolean = DEFINE_bool = DEFINE_float = DEFINE_string = DEFINE_integer = _define


@contextlib.contextmanager
def _tf_app_shim(flags: _FlagsShim) -> Iterator[None]:
    """Give ``tensorflow`` a ``tf.app.flags`` (gone in TF 2) while a Baechi module imports."""
    import tensorflow as tf

    missing = object()
    previous = tf.__dict__.get("app", missing)
    tf.app = types.SimpleNamespace(flags=flags)  # type: ignore[attr-defined]
    try:
        yield
    finally:
        if previous is missing:
            del tf.app  # type: ignore[attr-defined]
        else:
            tf.app = previous  # type: ignore[attr-defined]


@contextlib.contextmanager
def _baechi_packages(root: Path) -> Iterator[None]:
    """Make ``placer`` and ``utils`` Baechi's folders under ``root`` (they have no ``__init__.py``)
    while its modules import; restore whatever ``sys.modules`` held under those names afterwards."""
    names = ("placer", "utils")
    saved = {key: mod for key, mod in sys.modules.items()
             if key in names or key.startswith(tuple(f"{n}." for n in names))}
    for key in saved:
        del sys.modules[key]
    try:
        for name in names:
            spec = importlib.machinery.ModuleSpec(name, None, is_package=True)
            spec.submodule_search_locations = [str(root / name)]
            package = importlib.util.module_from_spec(spec)
            sys.modules[name] = package
        yield
    finally:
        for key in [k for k in sys.modules if k in names or k.startswith(tuple(f"{n}." for n in names))]:
            del sys.modules[key]
        sys.modules.update(saved)


@dataclass(frozen=True)
class _Baechi:
    """Baechi's loaded modules and the placer_lib functions executed from its source."""

    root: Path
    placer_utils: types.ModuleType
    grouper: types.ModuleType
    virtual_scheduler: types.ModuleType
    lib: Mapping[str, Any]
    flags: Any
    loggers: tuple[logging.Logger, ...]


_LOADED: dict[Path, _Baechi] = {}


def _placer_lib_subset(path: Path, namespace: dict[str, Any]) -> None:
    """Execute the parts of Baechi's placer_lib.py that take networkx graphs (and its flag defaults)
    into ``namespace``: the checkout's own source, at its own line numbers; classes keep only the
    named static methods and lose their bases."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    body: list[ast.stmt] = []
    found: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) and \
                ast.unparse(node.value.func).startswith("tf.app.flags.DEFINE_"):
            body.append(node)
        elif isinstance(node, ast.FunctionDef) and node.name in _PLACER_LIB_FUNCTIONS:
            body.append(node)
            found.add(node.name)
        elif isinstance(node, ast.ClassDef) and node.name in _PLACER_LIB_METHODS:
            keep = [f for f in node.body
                    if isinstance(f, ast.FunctionDef) and f.name in _PLACER_LIB_METHODS[node.name]]
            found.update(f"{node.name}.{f.name}" for f in keep)
            node.bases, node.keywords, node.decorator_list, node.body = [], [], [], keep
            body.append(node)
    wanted = {*_PLACER_LIB_FUNCTIONS, *(f"{c}.{m}" for c, ms in _PLACER_LIB_METHODS.items() for m in ms)}
    if wanted - found:
        raise BaechiUnavailableError(f"{path} has no {', '.join(sorted(wanted - found))}")
    code = compile(ast.Module(body=body, type_ignores=[]), str(path), "exec")
    exec(code, namespace)


def _load(baechi_dir: Path) -> _Baechi:
    """Import Baechi's modules from ``baechi_dir`` (once per folder) and read placer_lib's functions."""
    root = Path(baechi_dir).resolve()
    if root in _LOADED:
        return _LOADED[root]
    missing = [f for f in _REQUIRED_FILES if not (root / f).is_file()]
    if missing:
        raise BaechiUnavailableError(f"{root} is not a Baechi checkout (no {', '.join(missing)})")
    flags = _FlagsShim()
    try:
        with _baechi_packages(root):
            logger_mod = importlib.import_module("utils.logger")
            placer_utils = importlib.import_module("placer.placer_utils")
            m_etf = importlib.import_module("placer.m_etf")
            m_topo = importlib.import_module("placer.m_topo")
            virtual_scheduler = importlib.import_module("placer.virtual_scheduler")
            with _tf_app_shim(flags):
                grouper = importlib.import_module("placer.grouper")
            m_sct: types.ModuleType | None = None
            if _SCT_MISSING is None:
                m_sct = importlib.import_module("placer.m_sct")
                if SCT_SOLVER != "mosek":  # its module's own cvxopt name, nobody else's
                    m_sct.cvxopt = _CvxoptWithoutMosek(m_sct.cvxopt)  # type: ignore[attr-defined]
    except (ImportError, AttributeError, SyntaxError) as exc:
        raise BaechiUnavailableError(
            f"cannot import Baechi from {root}: {type(exc).__name__}: {exc}") from exc
    lib_path = root / "placer" / "placer_lib.py"
    namespace: dict[str, Any] = {
        "__name__": "placer.placer_lib", "__file__": str(lib_path),
        "copy": copy, "functools": functools, "time": time, "deque": deque,
        "nx": importlib.import_module("networkx"), "placer_utils": placer_utils,
        "m_etf": m_etf.m_etf, "m_topo": m_topo.m_topo, "m_sct": m_sct.m_sct if m_sct is not None else None,
        "tf": types.SimpleNamespace(app=types.SimpleNamespace(flags=flags)), "FLAGS": flags.FLAGS,
        "_LOGGER": logger_mod.get_logger(str(lib_path), level=logging.INFO),
    }
    _placer_lib_subset(lib_path, namespace)
    names = ("placer_utils", "device", "m_etf", "m_topo", "m_sct", "grouper", "virtual_scheduler",
             "placer_lib")
    loggers = tuple(logging.getLogger(n) for n in names)
    for log in loggers:
        log.setLevel(logging.WARNING)
    loaded = _Baechi(root, placer_utils, grouper, virtual_scheduler, namespace, flags.FLAGS, loggers)
    _LOADED[root] = loaded
    return loaded


@contextlib.contextmanager
def _log_level(baechi: _Baechi, verbose: bool) -> Iterator[None]:
    """Baechi's INFO logs while ``verbose``, else only its warnings."""
    level = logging.INFO if verbose else logging.WARNING
    previous = [log.level for log in baechi.loggers]
    for log in baechi.loggers:
        log.setLevel(level)
    try:
        yield
    finally:
        for log, old in zip(baechi.loggers, previous, strict=True):
            log.setLevel(old)


def baechi_available(baechi_dir: Path | str | None) -> str | None:
    """Whether Baechi's placers can run from ``baechi_dir``.

    Parameters
    ----------
    baechi_dir : pathlib.Path or str or None
        A checkout holding ``placer/`` and ``utils/`` (None: not given).

    Returns
    -------
    str or None
        None when its modules import here, else one line saying why not. The m-SCT configurations
        have their own reasons in :data:`UNAVAILABLE_CONFIGS`.
    """
    if baechi_dir is None:
        return f"no Baechi checkout given (--baechi-dir or ${BAECHI_DIR_ENV})"
    try:
        _load(Path(baechi_dir))
    except BaechiUnavailableError as exc:
        return str(exc)
    return None


# ---------------------------------------------------------------------------- our graph as Baechi's
def _config(config: str) -> BaechiConfig:
    if config not in ALL_BAECHI_CONFIGS:
        raise ValueError(f"unknown Baechi configuration {config!r} (known: {', '.join(ALL_BAECHI_CONFIGS)})")
    if config not in BAECHI_CONFIGS:
        raise BaechiUnavailableError(f"{config}: {UNAVAILABLE_CONFIGS[config]}")
    return BAECHI_CONFIGS[config]


def _check_cluster(cluster: Cluster) -> float:
    """The one device speed; ValueError for a topology or mixed speeds (Baechi has neither)."""
    if not cluster.is_flat:
        raise ValueError("Baechi models one transfer model between every pair of devices: "
                         "give a flat cluster (Cluster.flat()), not one with a topology")
    speed = np.asarray(cluster.speed, dtype=np.float64)
    if not np.all(speed == speed[0]):
        raise ValueError("Baechi models identical devices: the cluster's devices have different speeds")
    return float(speed[0])


def _whole(x: float) -> int:
    """``x`` rounded to an int, half to even (Python's ``round``, as Baechi's ``int(round(x))``)."""
    return int(np.rint(x))


def _memory_fields(graph: Graph) -> tuple[list[int], list[int], list[list[int]]]:
    """Per op: Baechi's ``temporary_memory``, ``persistent_memory`` and ``output_memory`` (bytes);
    the persistent bytes are added to output 0 (Baechi counts persistent memory inside the outputs)."""
    n = graph.num_nodes
    data = graph.edge_bytes > 0
    ports = np.zeros(n, dtype=np.int64)
    np.maximum.at(ports, graph.edge_src[data], graph.edge_src_output[data] + 1)
    tensors = graph.tensors
    live = graph.liveness
    temp, persistent, outputs = [0] * n, [0] * n, []
    for i in range(n):
        if live is not None and live.modelled[i]:
            aliases = live.aliases(i)
            out = [0 if aliases[o] is not None else _whole(b) for o, b in enumerate(live.outputs(i))]
            for port in range(len(out), int(ports[i])):  # undeclared outputs: sized by their largest edge
                tid = int(tensors.ids(np.array([i]), np.array([port]))[0])
                out.append(_whole(tensors.nbytes[tid]) if tid >= 0 else 0)
            temp[i] = _whole(live.scratch_bytes[i])
            persistent[i] = _whole(live.persistent_bytes[i])
            if persistent[i] and not out:
                out = [0]
        else:  # the sum model: memory_bytes live from the op's start to the end of the step
            persistent[i] = _whole(graph.memory_bytes[i])
            out = [0] * max(int(ports[i]), 1)
        if out:
            out[0] += persistent[i]
        outputs.append(out)
    return temp, persistent, outputs


def _colocation_lists(graph: Graph) -> list[list[str]]:
    """TensorFlow's raw co-location lists: ``loc:@GROUP``, or ``loc:@OPNAME`` for an op without a
    group (renamed ``loc:@OPNAME#k`` where that would join an unrelated group of the same name)."""
    groups = {g for g in graph.colocation if g is not None}
    out = []
    for name, group in zip(graph.node_names, graph.colocation, strict=True):
        if group is None:
            own, k = name, 0
            while own in groups:
                k += 1
                own = f"{name}#{k}"
            group = own
        out.append([f"loc:@{group}"])
    return out


def _build_op_graph(graph: Graph, cluster: Cluster, baechi: _Baechi) -> Any:
    """Baechi's placement graph of ``graph`` (see the module docstring), topologically numbered."""
    import networkx as nx

    speed = _check_cluster(cluster)
    comm_cost = functools.partial(baechi.lib["get_comm_cost"], coef=cluster.slope_us_per_byte,
                                  intercept=cluster.intercept_us)
    temp, persistent, outputs = _memory_fields(graph)
    groups = _colocation_lists(graph)
    op_graph = nx.DiGraph()
    for i, name in enumerate(graph.node_names):
        op_graph.add_node(i, weight=max(1, _whole(graph.time_us[i] / speed)), name=name, id=i,
                          temporary_memory=temp[i], persistent_memory=persistent[i],
                          output_memory=outputs[i], colocation_group=groups[i])
    tensors = graph.tensors
    control = graph.edge_bytes <= 0
    # per consumer, in node order: its data inputs, then its control inputs (as _add_edges walks TF ops)
    order = np.lexsort((np.arange(graph.num_edges), control, graph.edge_dst))
    names = graph.node_names
    edge_id = 0
    for e in order.tolist():
        u, v = int(graph.edge_src[e]), int(graph.edge_dst[e])
        if control[e]:
            if op_graph.has_edge(u, v):
                continue  # TensorFlow drops a control input that is also a data input
            weight = comm_cost(_CONTROL_EDGE_BYTES)
            tensor = {"name": f"^{names[u]}", "weight": weight, "num_bytes": _CONTROL_EDGE_BYTES}
        else:
            port = int(graph.edge_src_output[e])
            weight = comm_cost(_whole(tensors.nbytes[tensors.edge_tensor[e]]))
            tensor = {"name": f"{names[u]}:{port}", "weight": weight, "num_bytes": outputs[u][port]}
        if op_graph.has_edge(u, v):
            prev = op_graph[u][v]
            if all(t["name"] != tensor["name"] for t in prev["tensor"]):
                prev["weight"] += weight
                prev["tensor"].append(tensor)
        else:
            op_graph.add_edge(u, v, id=edge_id, weight=weight, tensor=[tensor])
            edge_id += 1
    baechi.placer_utils.assign_topo_order(op_graph)
    return op_graph


def baechi_op_graph(graph: Graph, cluster: Cluster, baechi_dir: Path | str) -> Any:
    """Baechi's placement graph of ``graph`` (before grouping), as ``PlacementGraphGenerator`` builds it.

    Parameters
    ----------
    graph : Graph
        Our graph (µs, bytes).
    cluster : Cluster
        A flat cluster of devices of one speed: its transfer model gives the edge weights.
    baechi_dir : pathlib.Path or str
        A Baechi checkout.

    Returns
    -------
    networkx.DiGraph
        Node ``i`` is op ``i`` of ``graph``, with Baechi's attributes (module docstring) and
        ``topo_order``; edges carry ``id``, ``weight`` (µs) and ``tensor``.

    Raises
    ------
    ValueError
        For a cluster with a topology or devices of different speeds.
    BaechiUnavailableError
        When Baechi cannot be loaded from ``baechi_dir``.
    """
    return _build_op_graph(graph, cluster, _load(Path(baechi_dir)))


# ---------------------------------------------------------------------------- running
@dataclass(frozen=True)
class BaechiRun:
    """Outcome of one configuration: Baechi's placement of our graph, or why it failed."""

    config: str
    assignment: np.ndarray | None
    """Device index per node of our graph (int64); None when Baechi failed."""
    error: str | None
    """Baechi's exception (type and message) when it failed, else None."""
    placement_seconds: float
    """Wall time of Baechi's placement (fusion included), as Baechi's ``placement_time`` log."""
    total_seconds: float
    """Wall time of the whole run: graph conversion, grouping, placement and Baechi's estimate."""
    baechi_makespan_us: int | None
    """Baechi's own estimate of the step (its ``VirtualScheduler``), µs; None when it failed."""
    placed_ops: int
    """Nodes of the graph Baechi's placer scheduled (fewer than the ops with ``fusion``)."""


def _placement(op_graph: Any, device_graph: Any, config: BaechiConfig, baechi: _Baechi) -> tuple[Any, int]:
    """Run the placement as DefaultPlacer / FusedOpPlacer do; ``op_graph`` gets ``p`` on every op."""
    lib, flags = baechi.lib, baechi.flags
    placement_fn = lib["DefaultPlacer"]._initialize_placement_fn(config.method,
                                                                 sct_threshold=flags.sct_threshold)
    if config.placer_type == "default":
        return placement_fn(op_graph, device_graph), op_graph.number_of_nodes()
    fused_op_graph = lib["FusedOpPlacer"]._generate_fused_op_graph(
        op_graph, flags.fusion_check_disjoint_paths, flags.fusion_allow_cycle)
    fused_op_graph = placement_fn(fused_op_graph, device_graph)
    # FusedOpPlacer.run_placement_algorithm: every fused op's device goes to the ops fused into it
    for _, op_data in fused_op_graph.nodes.items():
        op_graph.nodes[op_data["old_id"]]["p"] = op_data["p"]
        for fused_op_data in op_data.get("fused_ops", []):
            op_graph.nodes[fused_op_data["id"]]["p"] = op_data["p"]
    return op_graph, fused_op_graph.number_of_nodes()


def baechi_run(graph: Graph, cluster: Cluster, config: str, baechi_dir: Path | str, *,
               verbose: bool = False) -> BaechiRun:
    """Place ``graph`` on ``cluster`` with Baechi's own code; a failure of Baechi's placer is reported.

    Parameters
    ----------
    graph : Graph
        Our graph (µs, bytes); co-location groups and liveness fields are given to Baechi as the
        module docstring says.
    cluster : Cluster
        A flat cluster (no topology) of devices of one speed.
    config : str
        A key of :data:`BAECHI_CONFIGS` (``"m-etf"``, ``"m-topo/fusion"``…).
    baechi_dir : pathlib.Path or str
        A Baechi checkout (:func:`checkout_baechi`, ``$BAECHI_DIR``).
    verbose : bool, optional
        Let Baechi's INFO logs through (default: only its warnings).

    Returns
    -------
    BaechiRun
        The assignment (device per node of ``graph``), Baechi's estimated makespan and the timings;
        or, when Baechi's placer raised or asserted (ops that do not fit in memory…), ``assignment``
        None and ``error`` its message.

    Raises
    ------
    ValueError
        An unknown configuration, a cluster with a topology, or devices of different speeds.
    BaechiUnavailableError
        Baechi cannot be loaded from ``baechi_dir``, or the configuration needs what is missing here
        (:data:`UNAVAILABLE_CONFIGS`).
    """
    conf = _config(config)
    baechi = _load(Path(baechi_dir))
    start = time.perf_counter()
    with _log_level(baechi, verbose):
        op_graph = _build_op_graph(graph, cluster, baechi)
        grouper_cls = {"tf": baechi.grouper.TFColocationGrouper,
                       "coplace": baechi.grouper.CoplacementGrouper}[conf.grouper]
        op_graph = grouper_cls()(op_graph)
        devices = {d: {"name": name, "memory_size": int(cluster.memory_bytes[d])}
                   for d, name in enumerate(cluster.device_names)}
        device_graph = baechi.lib["create_device_graph"](devices)
        fraction = baechi.flags.placer_memory_fraction
        if fraction != 1.0:  # as DefaultPlacer.__init__ (the flag's default is 1.0)
            for _, device_node in device_graph.nodes.items():
                device_node["memory_limit"] = int(fraction * device_node["memory_limit"])
        placed_start = time.perf_counter()
        try:
            op_graph, placed_ops = _placement(op_graph, device_graph, conf, baechi)
            placement_seconds = time.perf_counter() - placed_start
            assignment = np.array([op_graph.nodes[i]["p"] for i in range(graph.num_nodes)], dtype=np.int64)
        except Exception as exc:  # Baechi's placers signal infeasibility by raise and assert
            return BaechiRun(config, None, f"{type(exc).__name__}: {exc}", time.perf_counter() - placed_start,
                             time.perf_counter() - start, None, 0)
        try:
            scheduler = baechi.virtual_scheduler.VirtualScheduler(copy.deepcopy(op_graph),
                                                                  copy.deepcopy(device_graph))
            scheduler.initialize()
            makespan: int | None = int(scheduler.run())
        except Exception:  # only Baechi's estimate; the placement stands
            makespan = None
    return BaechiRun(config, assignment, None, placement_seconds, time.perf_counter() - start, makespan,
                     placed_ops)


def baechi_place(graph: Graph, cluster: Cluster, config: str, baechi_dir: Path | str, *,
                 verbose: bool = False) -> np.ndarray:
    """Baechi's placement of ``graph``: the device index of every node, by Baechi's own code.

    Parameters
    ----------
    graph : Graph
        Our graph (µs, bytes).
    cluster : Cluster
        A flat cluster (no topology) of devices of one speed.
    config : str
        A key of :data:`BAECHI_CONFIGS`.
    baechi_dir : pathlib.Path or str
        A Baechi checkout.
    verbose : bool, optional
        Let Baechi's INFO logs through.

    Returns
    -------
    numpy.ndarray
        int64, ``assignment[i]`` is the device of node ``i`` of ``graph``.

    Raises
    ------
    BaechiPlacementError
        Baechi's placer raised or asserted (typically: the ops do not fit in the devices' memory).
    BaechiUnavailableError, ValueError
        As :func:`baechi_run`.

    Examples
    --------
    >>> assignment = baechi_place(graph, cluster, "m-etf", checkout_baechi(tmp, DEFAULT_MIRROR))
    ... # doctest: +SKIP
    """
    run = baechi_run(graph, cluster, config, baechi_dir, verbose=verbose)
    if run.assignment is None:
        raise BaechiPlacementError(f"Baechi {config} failed: {run.error}")
    return run.assignment


# ---------------------------------------------------------------------------- CLI
def _report(graph: Graph, cluster: Cluster, run: BaechiRun) -> bool:
    """Print one configuration's outcome; True when Baechi placed the graph."""
    from celeritas_core.graphs.colocation import colocation_respected
    from celeritas_core.readwrite.units import format_bytes, format_us
    from celeritas_core.simulation.memory import memory_profile
    from celeritas_core.simulation.simulator import simulate

    flags = ALL_BAECHI_CONFIGS[run.config].flags
    if run.assignment is None:
        print(f"{run.config} ({flags}): FAILED after {run.total_seconds:.2f} s: {run.error}")
        return False
    result = simulate(graph, cluster, run.assignment)
    peak = memory_profile(graph, cluster.num_devices, run.assignment, result).peak_bytes
    oom = [d for d in range(cluster.num_devices) if peak[d] > cluster.memory_bytes[d]]
    estimate = format_us(run.baechi_makespan_us) if run.baechi_makespan_us is not None else "n/a"
    print(f"{run.config} ({flags}): placed {run.placed_ops:,} nodes in {run.placement_seconds:.2f} s "
          f"({run.total_seconds:.2f} s in all)")
    counts = np.bincount(run.assignment, minlength=cluster.num_devices)
    for d in range(cluster.num_devices):
        print(f"  {cluster.device_names[d]}: {counts[d]:,} ops, busy {format_us(result.device_busy_us[d])}, "
              f"peak {format_bytes(peak[d])} of {format_bytes(cluster.memory_bytes[d])}")
    print(f"  simulated step time {format_us(result.step_time_us)} (Baechi's own estimate {estimate}); "
          f"{result.num_transfers:,} transfers; co-location groups kept: "
          f"{'yes' if colocation_respected(graph, run.assignment) else 'NO'}; "
          f"OOM devices: {', '.join(cluster.device_names[d] for d in oom) or 'none'}")
    return True


def main(argv: Sequence[str] | None = None) -> int:
    """Place a graph file with Baechi's own placers and replay each placement with our simulator.

    Parameters
    ----------
    argv : sequence of str, optional
        Command-line arguments (default ``sys.argv[1:]``); ``--help`` lists them.

    Returns
    -------
    int
        0 when every configuration placed the graph, 1 when Baechi failed on one, 2 when Baechi (or
        a configuration) cannot run here.
    """
    from celeritas_core.defaults import DEFAULT_INTERCEPT_US, DEFAULT_SLOPE_US_PER_BYTE
    from celeritas_core.readwrite.formats import load_graph
    from celeritas_core.readwrite.units import format_bytes, parse_device_memory

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("graph", type=Path, help="a celeritas graph file (JSON or columnar)")
    parser.add_argument("--devices", type=int, required=True, help="number of identical devices")
    parser.add_argument("--device-memory", required=True,
                        help="memory of each device: bytes, or a size such as 16GiB")
    parser.add_argument("--comm-slope", type=float, default=DEFAULT_SLOPE_US_PER_BYTE,
                        help="transfer time per byte, µs/B (default %(default)g)")
    parser.add_argument("--comm-intercept", type=float, default=DEFAULT_INTERCEPT_US,
                        help="fixed latency of a transfer, µs (default %(default)g)")
    parser.add_argument("--baechi-dir", type=Path, default=None,
                        help=f"a Baechi checkout (default ${BAECHI_DIR_ENV}, else the mirror "
                             f"${BAECHI_MIRROR_ENV} or {DEFAULT_MIRROR} extracted into a temporary folder)")
    parser.add_argument("--config", action="append", default=None,
                        help=f"configuration, repeatable or 'all' (default m-etf): "
                             f"{', '.join(ALL_BAECHI_CONFIGS)}")
    parser.add_argument("--verbose", action="store_true", help="show Baechi's INFO logs")
    args = parser.parse_args(argv)

    configs = args.config or ["m-etf"]
    if "all" in configs:
        configs = list(BAECHI_CONFIGS)
    unknown = [c for c in configs if c not in ALL_BAECHI_CONFIGS]
    if unknown:
        parser.error(f"unknown configuration {', '.join(unknown)} (known: {', '.join(ALL_BAECHI_CONFIGS)})")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # TensorFlow's start-up chatter
    graph = load_graph(args.graph)
    memory = parse_device_memory(args.device_memory, field="--device-memory")
    cluster = Cluster.homogeneous(args.devices, memory, slope_us_per_byte=args.comm_slope,
                                  intercept_us=args.comm_intercept)
    with tempfile.TemporaryDirectory(prefix="baechi-") as tmp:
        try:
            baechi_dir = args.baechi_dir or default_baechi_dir(Path(tmp))
        except BaechiUnavailableError as exc:
            print(f"Baechi unavailable: {exc}", file=sys.stderr)
            return 2
        reason = baechi_available(baechi_dir)
        if reason is not None:
            print(f"Baechi unavailable: {reason}", file=sys.stderr)
            return 2
        print(f"graph {graph.name}: {graph.num_nodes:,} ops, {graph.num_edges:,} edges; "
              f"{cluster.num_devices} devices x {format_bytes(cluster.memory_bytes[0])}; transfers "
              f"{cluster.slope_us_per_byte:g} µs/B + {cluster.intercept_us:g} µs; Baechi from {baechi_dir}")
        status = 0
        for config in configs:
            if config in UNAVAILABLE_CONFIGS:
                print(f"{config}: unavailable: {UNAVAILABLE_CONFIGS[config]}")
                status = max(status, 2)
                continue
            run = baechi_run(graph, cluster, config, baechi_dir, verbose=args.verbose)
            if not _report(graph, cluster, run):
                status = max(status, 1)
    return status


if __name__ == "__main__":
    sys.exit(main())
