"""Which Ray ``--executor ray`` joins (``executors.ray_session``), with a stand-in for Ray.

Joining an existing cluster must not pass ``num_cpus`` (Ray refuses it with a
ValueError); starting a local instance must not join ``$RAY_ADDRESS`` or a cluster
started on the machine by mistake. The stand-in records ``ray.init``'s arguments, so
these run without Ray installed.
"""

from __future__ import annotations

import sys
import types

import pytest
from trust_helpers import cli

from pagesim.errors import ConfigError
from pagesim.experiments.executors import ray_address, ray_session


class FakeRay(types.ModuleType):
    def __init__(self) -> None:
        super().__init__("ray")
        self.inits: list[dict] = []
        self.connected = False
        self.shutdowns = 0

    def is_initialized(self) -> bool:
        return self.connected

    def init(self, **kwargs) -> None:
        if kwargs.get("address") not in (None, "local") and "num_cpus" in kwargs:
            raise ValueError("When connecting to an existing cluster, num_cpus ...")
        self.inits.append(kwargs)
        self.connected = True

    def nodes(self) -> list[dict]:
        return [{"Alive": True}, {"Alive": True}, {"Alive": False}]

    def cluster_resources(self) -> dict:
        return {"CPU": 8.0}

    def shutdown(self) -> None:
        self.connected = False
        self.shutdowns += 1


@pytest.fixture
def fake_ray(monkeypatch):
    fake = FakeRay()
    monkeypatch.setitem(sys.modules, "ray", fake)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    return fake


def test_address_from_flag_then_environment(monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert ray_address(None) == (None, "")
    assert ray_address("10.0.0.5:6379") == ("10.0.0.5:6379", "--ray-address")
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.9:6379")
    assert ray_address(None) == ("10.0.0.9:6379", "RAY_ADDRESS")
    assert ray_address("10.0.0.5:6379") == ("10.0.0.5:6379", "--ray-address")
    assert ray_address("local") == (None, "")


def test_existing_cluster_is_joined_without_num_cpus(fake_ray):
    lines: list[str] = []
    with ray_session("10.0.0.5:6379", jobs=3, say=lines.append):
        assert fake_ray.connected
    assert fake_ray.inits == [{"address": "10.0.0.5:6379", "log_to_driver": False}]
    assert fake_ray.shutdowns == 1
    assert lines == [
        "ray: joined the cluster at 10.0.0.5:6379 (--ray-address): 2 nodes, 8 CPUs; "
        "input files go to the workers by content"
    ]


def test_ray_address_environment_is_joined(fake_ray, monkeypatch):
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.9:6379")
    lines: list[str] = []
    with ray_session(None, jobs=3, say=lines.append):
        pass
    assert fake_ray.inits[0]["address"] == "10.0.0.9:6379"
    assert "num_cpus" not in fake_ray.inits[0]
    assert "(RAY_ADDRESS)" in lines[0]


def test_no_address_starts_a_local_instance_with_jobs_cpus(fake_ray):
    lines: list[str] = []
    with ray_session(None, jobs=3, say=lines.append):
        pass
    assert fake_ray.inits == [
        {"address": "local", "num_cpus": 3, "include_dashboard": False, "log_to_driver": False}
    ]
    assert lines == [
        "ray: started a local Ray instance with 3 CPUs (no --ray-address or RAY_ADDRESS given)"
    ]


def test_a_joined_instance_is_used_and_left_alone(fake_ray):
    fake_ray.connected = True
    lines: list[str] = []
    with ray_session("10.0.0.5:6379", jobs=3, say=lines.append):
        pass
    assert (fake_ray.inits, fake_ray.shutdowns, lines) == ([], 0, [])


def test_unreachable_cluster_is_a_config_error(fake_ray, monkeypatch):
    def refuse(**kwargs):
        raise ConnectionError("no GCS at 10.0.0.5:6379")

    monkeypatch.setattr(fake_ray, "init", refuse)
    joining = ray_session("10.0.0.5:6379", jobs=1)
    with pytest.raises(ConfigError, match=r"--ray-address 10.0.0.5:6379: cannot join"):
        joining.__enter__()


def test_ray_address_needs_the_ray_executor(capsys):
    code, _, err = cli(capsys, "run", "memory_waste", "--ray-address", "10.0.0.5:6379")
    assert code != 0
    assert "--ray-address: only with --executor ray" in err
