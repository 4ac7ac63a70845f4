"""Test hosts as Linux network namespaces: a bridge on this machine and one namespace per host, each
joined to it by a veth pair, on a private /24 nothing else uses. Needs root (`ip netns`).

    with host_network(3) as net:
        net.bridge                        # 10.213.N.1: where servers for every host listen
        net.hosts[0].run(["python", ...]) # argv prefixed with `ip netns exec <host>`
        net.hosts[0].cut()                # its link goes down: the host is gone from the network

Everything made is removed at the end, whatever happened.
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field


def can_make_hosts() -> bool:
    """Whether this process can make network namespaces (root, with `ip`)."""
    return os.geteuid() == 0 and shutil.which("ip") is not None


def _ip(*args: str) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, check=False, timeout=10)
    if done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)} failed: {done.stderr.strip()}")


@dataclass(slots=True)
class Host:
    """One test host: a namespace, its address, and the host side of its link."""

    name: str
    address: str
    link: str

    @property
    def prefix(self) -> list[str]:
        """What runs a command on this host."""
        return ["ip", "netns", "exec", self.name]

    def cut(self) -> None:
        """Take its link down: nothing reaches it, and it reaches nothing."""
        _ip("link", "set", self.link, "down")


@dataclass(slots=True)
class Network:
    """The bridge's address (`bridge`), the subnet (`subnet`) and the hosts on it."""

    bridge: str
    subnet: str
    hosts: list[Host] = field(default_factory=list)


def _subnet() -> str:
    taken = subprocess.run(["ip", "-4", "addr"], capture_output=True, text=True, check=True).stdout
    while True:
        candidate = f"10.213.{random.randrange(1, 250)}"
        if f"inet {candidate}." not in taken:
            return candidate


@contextmanager
def host_network(count: int) -> Iterator[Network]:
    """A bridge and `count` hosts on it, removed at the end."""
    tag = uuid.uuid4().hex[:6]
    base = _subnet()
    bridge = f"tlbr{tag}"
    net = Network(bridge=f"{base}.1", subnet=f"{base}.0/24")
    made: list[tuple[str, ...]] = []
    try:
        _ip("link", "add", bridge, "type", "bridge")
        made.append(("link", "del", bridge))
        _ip("addr", "add", f"{net.bridge}/24", "dev", bridge)
        _ip("link", "set", bridge, "up")
        for i in range(1, count + 1):
            host = Host(f"tl{tag}h{i}", f"{base}.{10 + i}", f"tlv{tag}{i}")
            inner = f"tln{tag}{i}"
            _ip("netns", "add", host.name)
            made.append(("netns", "del", host.name))
            _ip("link", "add", host.link, "type", "veth", "peer", "name", inner)
            made.append(("link", "del", host.link))
            _ip("link", "set", inner, "netns", host.name)
            _ip("link", "set", host.link, "master", bridge)
            _ip("link", "set", host.link, "up")
            for args in (("addr", "add", f"{host.address}/24", "dev", inner), ("link", "set", inner, "up")):
                _ip("netns", "exec", host.name, "ip", *args)
            _ip("netns", "exec", host.name, "ip", "link", "set", "lo", "up")
            net.hosts.append(host)
        yield net
    finally:
        for undo in reversed(made):
            subprocess.run(["ip", *undo], capture_output=True, check=False, timeout=10)
