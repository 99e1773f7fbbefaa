"""Link topology of a cluster: devices grouped into nodes and islands, the link between every pair
of devices, and the network ports that the devices of a node share.

A cluster without a topology has one transfer model ``t = k·bytes + b`` for every pair of devices
(the paper's). A :class:`Topology` refines it the way clusters are built:

- an **island** is a group of devices joined by one fast link (an NVLink/NVSwitch domain, the GPUs
  under one PCIe switch): two devices of one island use the node's ``island_link``;
- a **node** (a host) holds one or more islands; two devices of one node in different islands use
  its ``host_link`` (PCIe through the host, the CPU link);
- devices of different **nodes** use the cluster's ``network`` link, and the traffic that leaves a
  node goes through one of its ``nics`` network ports, shared by its devices: a transfer from node
  A to node B holds a send side of A's port and a receive side of B's;
- ``host_shared`` nodes also share one uplink per island for the traffic between their islands;
- ``overrides`` set the link of single pairs of devices (a direct cable, a measured exception);
  they change that pair's time, not the ports it holds.

Everything is indexed by device index (the cluster's ``devices`` order). The pairwise views —
:meth:`Topology.pair_link`, :meth:`Topology.pair_ports` — are what the simulator and the placers
read; :class:`~celeritas_core.graphs.cluster.Cluster` caches them with the per-pair ``k`` and ``b``.
The file format, the presets (:func:`parse_preset`) and their sources are in docs/formats.md;
how the simulator uses the ports in docs/simulator.md ("Links and shared ports").
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from celeritas_core.defaults import LINK_ALIASES, LINK_PRESETS
from celeritas_core.errors import CeleritasInputError
from celeritas_core.limits import (
    MAX_DEVICES,
    MAX_SLOPE_US_PER_BYTE,
    MAX_TIME_US,
    as_float,
    is_number,
    short_repr,
)


@dataclass(frozen=True)
class Link:
    """A kind of link: a transfer of ``d`` bytes over it lasts ``slope_us_per_byte·d + intercept_us`` µs."""

    name: str
    slope_us_per_byte: float
    intercept_us: float

    def time_us(self, nbytes: np.ndarray | float) -> np.ndarray | float:
        """Transfer time (µs) of ``nbytes`` over this link."""
        return self.slope_us_per_byte * nbytes + self.intercept_us

    @classmethod
    def preset(cls, name: str) -> Link:
        """The link :data:`~celeritas_core.defaults.LINK_PRESETS` names (or an alias of one):
        ``k`` = 1 / nominal bandwidth, ``b`` = the effective latency (docs/formats.md)."""
        key = LINK_ALIASES.get(name, name)
        if key not in LINK_PRESETS:
            raise CeleritasInputError(f"unknown link {name!r} (known: {known_links()})")
        gb_per_s, latency_us = LINK_PRESETS[key]
        return cls(key, 1e-3 / gb_per_s, latency_us)  # 1 GB/s = 1e3 bytes per µs


def known_links() -> str:
    """The preset link names and aliases, for messages and help texts."""
    aliases = ", ".join(f"{a} = {b}" for a, b in LINK_ALIASES.items())
    return f"{', '.join(LINK_PRESETS)}; {aliases}"


@dataclass(frozen=True)
class NodeSpec:
    """One node as written: its islands (device names), the links inside it and its network ports."""

    name: str
    islands: tuple[tuple[str, ...], ...]
    island_link: str
    host_link: str | None = None
    host_shared: bool = False
    nics: int = 1


@dataclass(frozen=True, eq=False)
class Topology:
    """Nodes, islands and links of a cluster of ``len(node_of)`` devices (indices as the cluster's).

    ``node_of``/``island_of``: per device, its node and island (islands numbered over the cluster,
    node by node); ``island_link``, ``host_link`` (-1: the node has one island), ``host_shared``,
    ``nics``: per node; ``network``: the link between nodes (-1: not given, one node);
    ``overrides``: ``(device a, device b, link)`` for both directions. Link fields are indices
    into ``links``. Build it with :func:`build_topology` (validated) or :meth:`TopologyPreset.topology`.
    """

    links: tuple[Link, ...]
    node_names: tuple[str, ...]
    node_of: np.ndarray
    island_of: np.ndarray
    island_link: np.ndarray
    host_link: np.ndarray
    host_shared: np.ndarray
    nics: np.ndarray
    network: int = -1
    overrides: tuple[tuple[int, int, int], ...] = ()

    @property
    def num_devices(self) -> int:
        """Number of devices."""
        return len(self.node_of)

    @property
    def num_nodes(self) -> int:
        """Number of nodes."""
        return len(self.node_names)

    @property
    def num_islands(self) -> int:
        """Number of islands over all nodes."""
        return int(self.island_of.max()) + 1 if self.num_devices else 0

    @property
    def nic_of(self) -> np.ndarray:
        """Per device, the global index of the network port its traffic leaves and enters through:
        a node's devices (in index order) are split into ``nics`` consecutive equal-as-possible
        groups, NICs numbered node by node."""
        out = np.empty(self.num_devices, dtype=np.int64)
        first = np.concatenate([[0], np.cumsum(self.nics)[:-1]])
        for node in range(self.num_nodes):
            members = np.flatnonzero(self.node_of == node)
            out[members] = first[node] + np.arange(len(members)) * self.nics[node] // len(members)
        return out

    @property
    def num_ports(self) -> int:
        """Number of shared port sides (send and receive of every NIC, then of every island uplink):
        the length of the simulator's port array; ids as in :meth:`pair_ports`."""
        return 2 * int(self.nics.sum()) + 2 * self.num_islands

    def port_name(self, port: int) -> str:
        """A readable name of port side ``port`` (``node0/nic0 send``, ``node1/island2 receive``)."""
        side = "send" if port % 2 == 0 else "receive"
        index = port // 2
        nic_of = self.nic_of
        if index < int(self.nics.sum()):
            node = int(self.node_of[np.flatnonzero(nic_of == index)[0]])
            first = int(self.nics[:node].sum())
            return f"{self.node_names[node]}/nic{index - first} {side}"
        island = index - int(self.nics.sum())
        node = int(self.node_of[np.flatnonzero(self.island_of == island)[0]])
        return f"{self.node_names[node]}/island{island} {side}"

    def pair_link(self) -> np.ndarray:
        """``(n, n)`` int64: the index in :attr:`links` of the link from device i to device j
        (-1 on the diagonal: no transfer within a device)."""
        node, island = self.node_of, self.island_of
        same_node = node[:, None] == node[None, :]
        same_island = island[:, None] == island[None, :]
        link = np.where(same_island, self.island_link[node][:, None],
                        np.where(same_node, self.host_link[node][:, None], self.network))
        for a, b, k in self.overrides:
            link[a, b] = link[b, a] = k
        np.fill_diagonal(link, -1)
        return link.astype(np.int64)

    def pair_ports(self) -> tuple[np.ndarray, np.ndarray]:
        """``(egress, ingress)``, each ``(n, n)`` int64: the shared port side a transfer from device
        i to device j holds when leaving its group and when entering the other, -1 for none.

        Between nodes: the send side of i's NIC (``2·nic``) and the receive side of j's
        (``2·nic + 1``). Between islands of one ``host_shared`` node: the send side of i's island
        uplink and the receive side of j's (``2·(total NICs + island)`` and ``+ 1``). Otherwise none.
        """
        node, island, nic = self.node_of, self.island_of, self.nic_of
        cross_node = node[:, None] != node[None, :]
        uplink = ((node[:, None] == node[None, :]) & (island[:, None] != island[None, :])
                  & self.host_shared[node][:, None])
        base = 2 * int(self.nics.sum())
        egress = np.where(cross_node, 2 * nic[:, None], np.where(uplink, base + 2 * island[:, None], -1))
        ingress = np.where(cross_node, 2 * nic[None, :] + 1,
                           np.where(uplink, base + 2 * island[None, :] + 1, -1))
        n = self.num_devices
        return (np.broadcast_to(egress, (n, n)).astype(np.int64),
                np.broadcast_to(ingress, (n, n)).astype(np.int64))

    def mean_link(self) -> tuple[float, float]:
        """``(k µs/B, b µs)``: the means over the ordered pairs of distinct devices (the island
        link's with one device): the flat model of a topology-blind tool (``comm`` of a file)."""
        link = self.pair_link()
        off = ~np.eye(self.num_devices, dtype=bool)
        slope = np.array([x.slope_us_per_byte for x in self.links])
        intercept = np.array([x.intercept_us for x in self.links])
        if not off.any():
            only = self.links[int(self.island_link[0])]
            return only.slope_us_per_byte, only.intercept_us
        return float(slope[link[off]].mean()), float(intercept[link[off]].mean())

    def node_specs(self, device_names: Sequence[str]) -> list[NodeSpec]:
        """The nodes as :class:`NodeSpec` (islands in index order, devices ascending in each)."""
        specs = []
        for node, name in enumerate(self.node_names):
            islands = sorted({int(i) for i in self.island_of[self.node_of == node]})
            host = int(self.host_link[node])
            members = tuple(tuple(device_names[d] for d in np.flatnonzero(self.island_of == i))
                            for i in islands)
            specs.append(NodeSpec(name, members, self.links[int(self.island_link[node])].name,
                                  self.links[host].name if host >= 0 else None, bool(self.host_shared[node]),
                                  int(self.nics[node])))
        return specs

    def describe(self) -> str:
        """One line: ``2 nodes x 4 devices, islands nvlink4, network ib-ndr (1 NIC per node)``."""
        sizes = np.bincount(self.node_of, minlength=self.num_nodes)
        shape = f"{self.num_nodes} node{'s' if self.num_nodes != 1 else ''} x " + (
            f"{sizes[0]} devices" if (sizes == sizes[0]).all() else "/".join(map(str, sizes)) + " devices")
        islands = np.bincount(self.node_of[np.unique(self.island_of, return_index=True)[1]],
                              minlength=self.num_nodes)
        if (islands > 1).any():
            shape += f" ({'/'.join(map(str, islands))} islands)"
        inside = dict.fromkeys(self.links[int(i)].name for i in self.island_link)
        parts = [shape, "islands " + "/".join(inside)]
        hosts = [self.links[int(h)].name for h in self.host_link if h >= 0]
        if hosts:
            shared = " shared" if self.host_shared.any() else ""
            parts.append("host " + "/".join(dict.fromkeys(hosts)) + shared)
        if self.network >= 0 and self.num_nodes > 1:
            nics = "/".join(map(str, dict.fromkeys(int(x) for x in self.nics)))
            parts.append(f"network {self.links[self.network].name} ({nics} NIC{'s' if nics != '1' else ''} "
                         "per node)")
        if self.overrides:
            parts.append(f"{len(self.overrides)} pair override{'s' if len(self.overrides) != 1 else ''}")
        return ", ".join(parts)


# ---------------------------------------------------------------------------- building, validated
def check_link(name: str, slope: Any, intercept: Any, where: str) -> Link:
    """A :class:`Link` whose ``k`` and ``b`` are finite numbers ``>= 0`` within the limits of
    ``comm`` (docs/formats.md, "Limits"); a one-line error naming ``where`` otherwise."""
    for field_name, value, limit in (("slope_us_per_byte", slope, MAX_SLOPE_US_PER_BYTE),
                                     ("intercept_us", intercept, MAX_TIME_US)):
        if not is_number(value) or not np.isfinite(as_float(value)) or value < 0:
            raise CeleritasInputError(
                f"{where}: field '{field_name}' must be a finite number >= 0, got {short_repr(value)}")
        if value > limit:
            raise CeleritasInputError(
                f"{where}: field '{field_name}' must be at most {limit:g} (the limit), "
                f"got {short_repr(value)}")
    return Link(name, float(slope), float(intercept))


def build_topology(device_names: Sequence[str], links: Sequence[Link], nodes: Sequence[NodeSpec],
                   network: str | None = None, pairs: Sequence[tuple[str, str, str]] = (),
                   where: str = "topology") -> Topology:
    """Validate and build a :class:`Topology` of ``device_names`` (the cluster's, in index order).

    Every device in exactly one island; link names among ``links``; ``host_link`` for every node
    of several islands; ``network`` when there are several nodes; ``nics`` from 1 to the node's
    devices; node names non-empty and unique; each pair override of two distinct devices, once.
    Raises :class:`CeleritasInputError` (one line, naming the field under ``where``).
    """
    link_index = {x.name: i for i, x in enumerate(links)}
    if len(link_index) != len(links):
        raise CeleritasInputError(f"{where}.links: link names must be unique")
    device_index = {name: i for i, name in enumerate(device_names)}
    if not nodes:
        raise CeleritasInputError(f"{where}.nodes: the topology has no nodes")
    n = len(device_names)
    node_of, island_of = np.full(n, -1, dtype=np.int64), np.full(n, -1, dtype=np.int64)
    placed_at: dict[int, str] = {}
    per_node: list[tuple[int, int, bool, int]] = []
    node_names: list[str] = []
    island = 0

    def link_of(name: str | None, field: str) -> int:
        if name not in link_index:
            raise CeleritasInputError(f"{field}: unknown link {short_repr(name)} (links: "
                                      f"{', '.join(map(repr, link_index)) or 'none'})")
        return link_index[name]

    for i, spec in enumerate(nodes):
        at = f"{where}.nodes[{i}]"
        if not isinstance(spec.name, str) or not spec.name:
            raise CeleritasInputError(f"{at}: field 'name' must be a non-empty string")
        if spec.name in node_names:
            raise CeleritasInputError(f"{at}: duplicate node name {spec.name!r} ({where}.nodes"
                                      f"[{node_names.index(spec.name)}])")
        node_names.append(spec.name)
        if not spec.islands:
            raise CeleritasInputError(f"{at}: field 'islands' must list at least one island")
        count = 0
        for j, members in enumerate(spec.islands):
            if not members:
                raise CeleritasInputError(f"{at}.islands[{j}]: an island needs at least one device")
            for m, name in enumerate(members):
                field = f"{at}.islands[{j}][{m}]"
                if name not in device_index:
                    raise CeleritasInputError(f"{field}: {short_repr(name)} is not a device of the cluster")
                d = device_index[name]
                if d in placed_at:
                    raise CeleritasInputError(f"{field}: device {name!r} is already in {placed_at[d]}")
                placed_at[d] = field
                node_of[d], island_of[d] = i, island
            island += 1
            count += len(members)
        ilink = link_of(spec.island_link, f"{at}.island_link")
        hlink = -1
        if len(spec.islands) > 1 or spec.host_link is not None:
            if spec.host_link is None:
                raise CeleritasInputError(f"{at}: field 'host_link' is needed: the node has "
                                          f"{len(spec.islands)} islands")
            hlink = link_of(spec.host_link, f"{at}.host_link")
        if not isinstance(spec.host_shared, bool):
            raise CeleritasInputError(f"{at}: field 'host_shared' must be true or false, got "
                                      f"{short_repr(spec.host_shared)}")
        nics = spec.nics
        if not isinstance(nics, int) or isinstance(nics, bool) or not 1 <= nics <= count:
            raise CeleritasInputError(f"{at}: field 'nics' must be an integer from 1 to the node's "
                                      f"{count} devices, got {short_repr(nics)}")
        per_node.append((ilink, hlink, spec.host_shared, nics))
    missing = [name for d, name in enumerate(device_names) if d not in placed_at]
    if missing:
        raise CeleritasInputError(f"{where}: device {missing[0]!r} is in no island (every device must be in "
                                  f"exactly one; {len(missing)} missing)")
    net = -1
    if len(nodes) > 1 or network is not None:
        if network is None:
            raise CeleritasInputError(f"{where}: field 'network' is needed: the cluster has "
                                      f"{len(nodes)} nodes")
        net = link_of(network, f"{where}.network")
    overrides = _overrides(device_index, link_of, pairs, where)
    cols = list(zip(*per_node, strict=True))
    return Topology(tuple(links), tuple(node_names), node_of, island_of,
                    np.asarray(cols[0], dtype=np.int64), np.asarray(cols[1], dtype=np.int64),
                    np.asarray(cols[2], dtype=bool), np.asarray(cols[3], dtype=np.int64), net, overrides)


def _overrides(device_index: Mapping[str, int], link_of: Any, pairs: Sequence[tuple[str, str, str]],
               where: str) -> tuple[tuple[int, int, int], ...]:
    """The pair overrides as ``(a, b, link)`` device and link indices, each unordered pair once."""
    out: list[tuple[int, int, int]] = []
    seen: dict[tuple[int, int], int] = {}
    for p, (a, b, link) in enumerate(pairs):
        at = f"{where}.pairs[{p}]"
        for name in (a, b):
            if name not in device_index:
                raise CeleritasInputError(f"{at}: {short_repr(name)} is not a device of the cluster")
        i, j = device_index[a], device_index[b]
        if i == j:
            raise CeleritasInputError(f"{at}: a pair needs two different devices, got {a!r} twice")
        key = (min(i, j), max(i, j))
        if key in seen:
            raise CeleritasInputError(f"{at}: the pair {a!r}, {b!r} is already in {where}.pairs[{seen[key]}]")
        seen[key] = p
        out.append((i, j, link_of(link, f"{at}.link")))
    return tuple(out)


# ---------------------------------------------------------------------------- JSON
def topology_from_json(doc: Any, device_names: Sequence[str], where: str = "topology") -> Topology:
    """Validate the ``topology`` object of a cluster document (docs/formats.md) and build it."""
    if not isinstance(doc, dict):
        raise CeleritasInputError(f"field '{where}' must be an object")
    raw_links = doc.get("links")
    if not isinstance(raw_links, dict) or not raw_links:
        raise CeleritasInputError(f"{where}: field 'links' must be a non-empty object of link name -> "
                                  "{slope_us_per_byte, intercept_us}")
    links = []
    for name, spec in raw_links.items():
        at = f"{where}.links[{name!r}]"
        if not name:
            raise CeleritasInputError(f"{where}.links: link names must be non-empty")
        if not isinstance(spec, dict):
            raise CeleritasInputError(f"{at}: expected an object")
        for field_name in ("slope_us_per_byte", "intercept_us"):
            if field_name not in spec:
                raise CeleritasInputError(f"{at}: missing field '{field_name}'")
        links.append(check_link(name, spec["slope_us_per_byte"], spec["intercept_us"], at))
        check_link_record(spec, at)
    raw_nodes = doc.get("nodes")
    if not isinstance(raw_nodes, list) or not raw_nodes:
        raise CeleritasInputError(f"{where}: field 'nodes' must be a non-empty list")
    nodes = [_node_from_json(raw, f"{where}.nodes[{i}]") for i, raw in enumerate(raw_nodes)]
    network = doc.get("network")
    if network is not None and not isinstance(network, str):
        raise CeleritasInputError(f"{where}: field 'network' must be a link name, got {short_repr(network)}")
    raw_pairs = doc.get("pairs", [])
    if not isinstance(raw_pairs, list):
        raise CeleritasInputError(f"{where}: field 'pairs' must be a list")
    pairs = [_pair_from_json(raw, f"{where}.pairs[{p}]") for p, raw in enumerate(raw_pairs)]
    return build_topology(device_names, links, nodes, network, pairs, where)


def _node_from_json(raw: Any, at: str) -> NodeSpec:
    """One ``nodes`` entry, its types checked (:func:`build_topology` checks the rest)."""
    if not isinstance(raw, dict):
        raise CeleritasInputError(f"{at}: expected an object")
    islands = raw.get("islands")
    if not isinstance(islands, list) or not all(
            isinstance(members, list) and all(isinstance(m, str) for m in members) for members in islands):
        raise CeleritasInputError(f"{at}: field 'islands' must be a list of lists of device names")
    for field_name in ("island_link", "host_link"):
        value = raw.get(field_name)
        if value is not None and not isinstance(value, str):
            raise CeleritasInputError(
                f"{at}: field '{field_name}' must be a link name, got {short_repr(value)}")
    if raw.get("island_link") is None:
        raise CeleritasInputError(f"{at}: missing field 'island_link'")
    return NodeSpec(raw.get("name"), tuple(tuple(members) for members in islands), raw["island_link"],
                    raw.get("host_link"), raw.get("host_shared", False), raw.get("nics", 1))


def _pair_from_json(raw: Any, at: str) -> tuple[str, str, str]:
    """One ``pairs`` entry: ``{"devices": [a, b], "link": name}``."""
    if not isinstance(raw, dict):
        raise CeleritasInputError(f"{at}: expected an object")
    devices, link = raw.get("devices"), raw.get("link")
    if not isinstance(devices, list) or len(devices) != 2 or not all(isinstance(d, str) for d in devices):
        raise CeleritasInputError(f"{at}: field 'devices' must be a list of two device names")
    if not isinstance(link, str):
        raise CeleritasInputError(f"{at}: field 'link' must be a link name, got {short_repr(link)}")
    return devices[0], devices[1], link


#: Where a link's ``k`` and ``b`` come from (its optional ``source``): a calibration's fit, or the
#: nominal figures of a preset (docs/formats.md, "Topology presets").
LINK_SOURCES = ("calibrated", "preset")


def check_link_record(record: Mapping[str, Any], where: str) -> None:
    """A link's optional ``source`` (one of :data:`LINK_SOURCES`) and ``calibration`` (an object,
    informational)."""
    source = record.get("source")
    if source is not None and source not in LINK_SOURCES:
        raise CeleritasInputError(f"{where}: field 'source' must be one of "
                                  f"{', '.join(map(repr, LINK_SOURCES))}, got {short_repr(source)}")
    calibration = record.get("calibration")
    if calibration is not None and not isinstance(calibration, dict):
        raise CeleritasInputError(
            f"{where}: field 'calibration' must be an object, got {short_repr(calibration)}")


def topology_to_json(topology: Topology, device_names: Sequence[str],
                     link_records: Mapping[str, Mapping[str, Any]] | None = None) -> dict[str, Any]:
    """The ``topology`` object of a cluster document; ``link_records`` adds, per link name, its
    ``source`` and ``calibration`` (what a calibration measured)."""
    records = dict(link_records or {})
    names = {x.name for x in topology.links}
    for name, record in records.items():
        if name not in names:
            raise CeleritasInputError(f"link_records: the topology has no link {name!r}")
        unknown = set(record) - {"source", "calibration"}
        if unknown:
            raise CeleritasInputError(f"link_records[{name!r}]: unknown fields {sorted(unknown)}")
        check_link_record(record, f"link_records[{name!r}]")
    links = {x.name: {"slope_us_per_byte": x.slope_us_per_byte, "intercept_us": x.intercept_us,
                      **dict(records.get(x.name, {}))} for x in topology.links}
    nodes = []
    for spec in topology.node_specs(device_names):
        node: dict[str, Any] = {"name": spec.name, "islands": [list(m) for m in spec.islands],
                                "island_link": spec.island_link}
        if spec.host_link is not None:
            node["host_link"] = spec.host_link
        if spec.host_shared:
            node["host_shared"] = True
        node["nics"] = spec.nics
        nodes.append(node)
    doc: dict[str, Any] = {"links": links, "nodes": nodes}
    if topology.network >= 0:
        doc["network"] = topology.links[topology.network].name
    if topology.overrides:
        doc["pairs"] = [{"devices": [device_names[a], device_names[b]], "link": topology.links[k].name}
                        for a, b, k in topology.overrides]
    return doc


# ---------------------------------------------------------------------------- presets
_SHAPE = re.compile(r"^\s*(\d{1,9})\s*x\s*(\d{1,9})(?:\s*x\s*(\d{1,9}))?\s*$", re.IGNORECASE)


@dataclass(frozen=True)
class TopologyPreset:
    """A topology of identical nodes, from the command line (:func:`parse_preset`): ``nodes`` nodes
    of ``islands`` islands of ``devices`` devices, devices assigned in index order."""

    nodes: int
    islands: int
    devices: int
    island_link: Link
    host_link: Link | None = None
    network: Link | None = None
    nics: int = 1
    host_shared: bool = False

    @property
    def num_devices(self) -> int:
        """Devices in the whole topology."""
        return self.nodes * self.islands * self.devices

    def topology(self, device_names: Sequence[str]) -> Topology:
        """The topology on ``device_names`` (exactly :attr:`num_devices` of them): node ``i`` is
        ``node{i}`` and holds the next ``islands × devices`` devices, island by island."""
        if len(device_names) != self.num_devices:
            raise CeleritasInputError(f"the topology has {self.num_devices} devices, the cluster "
                                      f"{len(device_names)}")
        used = (self.island_link, self.host_link, self.network)
        links = list(dict.fromkeys(x for x in used if x is not None))
        per_node, nodes = self.islands * self.devices, []
        for i in range(self.nodes):
            names = device_names[i * per_node:(i + 1) * per_node]
            size = self.devices
            islands = tuple(tuple(names[j * size:(j + 1) * size]) for j in range(self.islands))
            host = self.host_link.name if self.host_link else None
            nodes.append(NodeSpec(f"node{i}", islands, self.island_link.name, host, self.host_shared,
                                  self.nics))
        return build_topology(device_names, links, nodes, self.network.name if self.network else None)


def parse_preset(text: str, flag: str = "--topology") -> TopologyPreset:
    """A preset: ``NODESxDEVICES:ISLAND_LINK[,NETWORK]`` or
    ``NODESxISLANDSxDEVICES:ISLAND_LINK,HOST_LINK[,NETWORK]``, then options ``,nics=N`` (network
    ports per node, default 1) and ``,host-shared`` (islands share one uplink each). Link names:
    :data:`~celeritas_core.defaults.LINK_PRESETS` and aliases. E.g. ``2x4:nvlink,ib``,
    ``1x2x4:nvlink3,pcie4``, ``2x8:nvlink,ib,nics=8``. One-line errors name ``flag``."""
    shape, colon, rest = str(text).partition(":")
    match = _SHAPE.match(shape)
    if not colon or match is None:
        raise CeleritasInputError(f"{flag}: expected NODESxDEVICES:LINK[,NETWORK] or "
                                  f"NODESxISLANDSxDEVICES:LINK,HOST_LINK[,NETWORK] (e.g. 2x4:nvlink,ib), "
                                  f"got {short_repr(text)}")
    counts = [int(g) for g in match.groups() if g is not None]
    if min(counts) < 1:
        raise CeleritasInputError(f"{flag}: every count must be at least 1, got {short_repr(text)}")
    nodes, islands, devices = (counts[0], 1, counts[1]) if len(counts) == 2 else counts
    if nodes * islands * devices > MAX_DEVICES:
        raise CeleritasInputError(f"{flag}: {nodes * islands * devices:,} devices, above the limit of "
                                  f"{MAX_DEVICES:,}")
    tokens = [t.strip() for t in rest.split(",")]
    options = [t for t in tokens if "=" in t or t == "host-shared"]
    names = [t for t in tokens if t not in options]
    want = 1 if islands == 1 else 2
    if not want <= len(names) <= want + 1 or not all(names):
        need = "LINK[,NETWORK]" if islands == 1 else "LINK,HOST_LINK[,NETWORK]"
        raise CeleritasInputError(f"{flag}: {short_repr(text)} needs {need} after the shape (got "
                                  f"{len([n for n in names if n])} link names)")
    try:
        links = [Link.preset(name.lower()) for name in names]
    except CeleritasInputError as exc:
        raise CeleritasInputError(f"{flag}: {exc.message}") from None
    if nodes > 1 and len(names) == want:
        raise CeleritasInputError(f"{flag}: {nodes} nodes need a network link, e.g. "
                                  f"{shape.strip()}:{rest},ib")
    nics, shared = 1, False
    for option in options:
        key, _, value = option.partition("=")
        if option == "host-shared" and islands > 1:
            shared = True
        elif key == "nics" and value.isdigit() and 1 <= int(value) <= islands * devices:
            nics = int(value)
        else:
            raise CeleritasInputError(f"{flag}: unknown option {option!r} (known: nics=N with N from 1 to "
                                      f"the {islands * devices} devices of a node; host-shared with several "
                                      "islands per node)")
    return TopologyPreset(nodes, islands, devices, links[0], links[1] if islands > 1 else None,
                          links[want] if len(names) > want else None, nics, shared)
