"""Our extender entry merged into, and taken out of, a user's Volcano configuration: the
user's tiers, plugins and other keys stay as they were."""

from __future__ import annotations

import pytest
import yaml

from scheduler_core.volcano_config import BadConfiguration, Entry, merged, removed

URL = "http://ascend-npu-scheduler.kube-system.svc:8888/volcano"
ENTRY = Entry({"extender.urlPrefix": URL, "extender.predicateVerb": "predicate"})
# A user's configuration: Volcano's defaults plus plugins of their own and a configuration.
USERS = """\
actions: "enqueue, allocate, backfill, preempt"
tiers:
- plugins:
  - name: priority
  - name: gang
    enablePreemptable: false
  - name: conformance
- plugins:
  - name: drf
  - name: predicates
  - name: proportion
  - name: nodeorder
  - name: binpack
    arguments:
      binpack.weight: 10
configurations:
- name: enqueue
  arguments:
    overcommit-factor: 1.2
"""


def plugins(conf: str) -> list[list[object]]:
    return [tier["plugins"] for tier in yaml.safe_load(conf)["tiers"]]


def test_merge_adds_one_entry_to_the_first_tier_and_keeps_everything_else() -> None:
    conf = merged(USERS, ENTRY)
    before, after = yaml.safe_load(USERS), yaml.safe_load(conf)
    assert after["tiers"][0]["plugins"] == [*before["tiers"][0]["plugins"], ENTRY.as_plugin()]
    assert after["tiers"][1:] == before["tiers"][1:]
    assert {k: v for k, v in after.items() if k != "tiers"} == {
        k: v for k, v in before.items() if k != "tiers"
    }


def test_merge_twice_is_merge_once_and_remove_restores_the_users_configuration() -> None:
    once = merged(USERS, ENTRY)
    assert merged(once, ENTRY) == once
    assert yaml.safe_load(removed(once, URL)) == yaml.safe_load(USERS)
    assert removed(USERS, URL) == USERS, "nothing of ours: the text itself, untouched"


def test_merge_replaces_our_older_entry_in_place() -> None:
    older = merged(USERS, Entry({"extender.urlPrefix": URL, "extender.httpTimeout": "5s"}))
    conf = merged(older, ENTRY)
    entries = [p for tier in plugins(conf) for p in tier if p == ENTRY.as_plugin()]
    assert len(entries) == 1
    assert "5s" not in conf


def test_someone_elses_extender_is_never_touched() -> None:
    theirs = USERS.replace(
        "  - name: conformance\n",
        "  - name: conformance\n  - name: extender\n    arguments:\n"
        "      extender.urlPrefix: http://other:80\n",
    )
    with pytest.raises(
        BadConfiguration, match="already has an extender plugin for 'http://other:80'"
    ):
        merged(theirs, ENTRY)
    assert removed(theirs, URL) == theirs


def test_an_empty_configuration_gets_a_tier_of_its_own() -> None:
    assert plugins(merged("", ENTRY)) == [[ENTRY.as_plugin()]]


@pytest.mark.parametrize(
    ("conf", "named"),
    [
        ("tiers: [", "not YAML"),
        ("- a list", "not a mapping"),
        ("tiers: {plugins: []}", "tiers must be a list"),
        ("tiers:\n- plugins: one\n", "tiers must be a list"),
    ],
)
def test_a_malformed_configuration_is_refused_naming_why(conf: str, named: str) -> None:
    with pytest.raises(BadConfiguration, match=named):
        merged(conf, ENTRY)


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("name: binpack\narguments: {extender.urlPrefix: x}", "name: extender"),
        ("name: extender\n", "urlPrefix"),
        ("name: extender\narguments: {extender.urlPrefix: [1]}", "urlPrefix"),
        (": :", "not YAML"),
    ],
)
def test_a_malformed_plugin_entry_is_refused_naming_why(text: str, named: str) -> None:
    with pytest.raises(BadConfiguration, match=named):
        Entry.parse(text)


ADAPTER = Entry(
    {"urlPrefix": URL, "httpTimeout": "5s", "managedResources": ["huawei.com/Ascend910"]},
    "ascend-npu-adapter",
)


def test_the_adapters_entry_replaces_our_extender_entry_and_remove_takes_either() -> None:
    """Switching a Volcano from the stock extender plugin to the in-process adapter (or back):
    our entry of the other kind goes, or both would allocate every pod."""
    with_extender = merged(USERS, ENTRY)
    conf = merged(with_extender, ADAPTER)
    names = [p["name"] for tier in plugins(conf) for p in tier]  # type: ignore[index]
    assert "extender" not in names and names.count("ascend-npu-adapter") == 1
    assert plugins(conf)[0][-1] == ADAPTER.as_plugin()
    assert merged(conf, ADAPTER) == conf
    back = merged(conf, ENTRY)
    assert plugins(back)[0][-1] == ENTRY.as_plugin()
    assert "ascend-npu-adapter" not in back
    assert yaml.safe_load(removed(conf, URL)) == yaml.safe_load(USERS)


def test_an_adapter_entry_of_another_service_is_never_touched() -> None:
    theirs = Entry({"urlPrefix": "https://elsewhere.svc/volcano"}, "ascend-npu-adapter")
    conf = merged(USERS, theirs)
    with pytest.raises(BadConfiguration, match="already has an ascend-npu-adapter plugin"):
        merged(conf, ADAPTER)
    assert removed(conf, URL) == conf


def test_the_adapters_entry_is_parsed_with_its_url_key_and_carries_the_token() -> None:
    text = yaml.safe_dump(ADAPTER.as_plugin())
    parsed = Entry.parse(text)
    assert parsed == ADAPTER and parsed.adapter and parsed.url == URL
    assert parsed.with_token("s3cret").url == URL.replace("http://", "http://volcano:s3cret@")
    with pytest.raises(BadConfiguration, match=r"arguments\.'urlPrefix'"):
        Entry.parse("name: ascend-npu-adapter\narguments: {extender.urlPrefix: x}")
    with pytest.raises(BadConfiguration, match="name: extender or ascend-npu-adapter"):
        Entry.parse("name: volcano-npu_v26.1.0\narguments: {}")
