"""The test hosts of CRONSTREAM_NETNS (infra.hosts): names Linux accepts, one address
per node, the loopback shape unchanged without it."""

from __future__ import annotations

import pytest

from cronstream.infra.hosts import GATEWAY, cassandra_host, kafka_host, prefix, role_host
from cronstream.infra.services import all_services
from cronstream.runtime.settings import Settings


def test_every_node_gets_a_host_of_its_own_with_a_link_name_linux_accepts() -> None:
    nodes = [*(kafka_host(n) for n in (1, 2, 3)), *(cassandra_host(n) for n in (1, 2, 3))]
    assert len({h.address for h in nodes} | {GATEWAY}) == 7
    assert len({h.netns for h in nodes}) == len({h.link for h in nodes}) == 6
    assert all(len(h.link) <= 15 for h in nodes)  # IFNAMSIZ
    assert prefix(kafka_host(2)) == ["ip", "netns", "exec", "cs-kafka-2"]
    assert role_host("chaos-s1", 1).address == "10.89.0.41"
    with pytest.raises(ValueError, match="1-9"):
        role_host("chaos-s10", 10)  # past .49: another range's addresses


def test_the_cluster_on_hosts_listens_on_their_addresses_and_the_loopback_shape_is_unchanged() -> (
    None
):
    netns = Settings.from_env({"CRONSTREAM_NODES": "3", "CRONSTREAM_NETNS": "1"})
    nodes = {s.name: s for s in all_services(netns) if s.name.startswith(("kafka", "cassandra"))}
    assert {n: (s.host, s.net_host is not None) for n, s in nodes.items()} == {
        "kafka": ("10.89.0.11", True),
        "kafka-2": ("10.89.0.12", True),
        "kafka-3": ("10.89.0.13", True),
        "cassandra": ("10.89.0.21", True),
        "cassandra-2": ("10.89.0.22", True),
        "cassandra-3": ("10.89.0.23", True),
    }
    loopback = Settings.from_env({"CRONSTREAM_NODES": "3"})
    assert loopback.bootstrap_servers == "127.0.0.1:9092,127.0.0.1:9102,127.0.0.1:9112"
    assert loopback.cassandra_hosts == ("127.0.0.1", "127.0.0.2", "127.0.0.3")
    assert all(s.net_host is None for s in all_services(loopback))
