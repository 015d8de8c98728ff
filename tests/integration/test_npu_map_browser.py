"""The NPU map in a real browser: Debian's chromium (``make browser``), headless, driven by
Playwright over its own protocol (no browser download), against the simulated cluster."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, Dialog, HttpCredentials, Page, sync_playwright
from playwright.sync_api import Error as PlaywrightError

from contract.chip_names import RESOURCE_NAME
from scheduler_core.service.access import Access
from simulation.cluster import SimulatedCluster, simulated_cluster, wait_for
from simulation.kube_scheduler import KubeScheduler
from simulation.memory import pod_object
from tests.e2e.helpers import PLACEMENT, place, submit
from tests.integration.test_npu_map import TOKEN, fail_chip, service_of_no_nodes, waiting_gangs

CHROMIUM = "/usr/bin/chromium"
# A name a tenant could write where the page shows it; the API server itself would refuse
# most of it in a pod's name (DNS-1123), the loopback one does not, so the page is tried at
# its worst: markup, an event handler, a script, quotes that would end an attribute.
HOSTILE = "<img src=x onerror=alert(1)><script>alert(2)</script>\"'><b>bold</b>"


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, headless=True)
        yield launched
        launched.close()


@pytest.fixture(scope="module")
def cluster() -> Iterator[SimulatedCluster]:
    with simulated_cluster(2, npu_map=True) as built:
        yield built


def chip(page: Page, node: str, chip: int) -> str:
    return f'[data-node="{node}"] circle[data-chip="{chip}"]'


def test_the_page_shows_the_held_and_free_chips_the_scheduler_holds(
    browser: Browser, cluster: SimulatedCluster
) -> None:
    submit(cluster, "train", 2)
    node = place(cluster, KubeScheduler(cluster), "train")["train"]
    free = set(cluster.service.extender.state.session.usable(node))
    page = browser.new_page()
    problems: list[str] = []  # script errors, and what the CSP refused
    page.on("pageerror", lambda failed: problems.append(str(failed)))
    page.on(
        "console",
        lambda message: problems.extend([message.text] * ("Content Security" in message.text)),
    )
    page.goto(cluster.url + "/map")
    page.wait_for_selector(chip(page, node, 0))
    states = page.eval_on_selector_all(
        f'[data-node="{node}"] circle',
        "cs => cs.map(c => [Number(c.dataset.chip), c.dataset.state, c.dataset.holder || ''])",
    )
    assert {c for c, state, _ in states if state == "free"} == free
    held = [(c, holder) for c, state, holder in states if state == "held"]
    assert len(held) == 2 and all(holder == "ns/train" for _, holder in held)
    title = page.text_content(chip(page, node, held[0][0]) + " > title")
    assert title == f"{node} chip {held[0][0]}: held by ns/train"
    assert problems == [], "the page runs under its own CSP, without an error"
    page.close()


def test_a_chip_fault_appears_within_a_second_of_the_scheduler_seeing_it(
    browser: Browser, cluster: SimulatedCluster
) -> None:
    page = browser.new_page()
    page.goto(cluster.url + "/map")
    page.wait_for_selector(chip(page, "node-01", 6))
    assert page.get_attribute(chip(page, "node-01", 6), "data-state") == "free"
    fail_chip(cluster, "node-01", 6)
    nodes = cluster.service.extender.state.session.nodes
    assert wait_for(lambda: "node-01" in nodes and 6 in nodes["node-01"].unhealthy, step=0.005)
    seen = time.monotonic()
    faulty = chip(page, "node-01", 6) + '[data-state="faulty"]'
    page.wait_for_selector(faulty, state="attached", timeout=1000)
    assert time.monotonic() - seen < 1.0
    page.close()


def test_what_a_tenant_writes_is_shown_as_text_and_runs_nothing(
    browser: Browser, cluster: SimulatedCluster
) -> None:
    # A pod holding a chip by that name, and a gang of that name waiting for its members.
    hostile = pod_object("ns", HOSTILE, "node-00", 1, phase="Running", resource=RESOURCE_NAME)
    hostile["metadata"]["annotations"]["huawei.com/AscendReal"] = "Ascend910-7"
    cluster.store.put("Pod", hostile)
    submit(cluster, "h-0", 1, gang=HOSTILE, size=2)
    gang = f"ns/{HOSTILE}"
    assert wait_for(lambda: gang in {name for name, _ in waiting_gangs(cluster)}, PLACEMENT)
    page = browser.new_page()
    dialogs: list[str] = []

    def dialog(opened: Dialog) -> None:
        dialogs.append(opened.message)
        opened.dismiss()

    page.on("dialog", dialog)
    page.goto(cluster.url + "/map")
    page.wait_for_selector("#gang-list li")
    page.wait_for_selector(chip(page, "node-00", 7) + '[data-state="held"]')
    assert page.get_attribute(chip(page, "node-00", 7), "data-holder") == f"ns/{HOSTILE}"
    assert page.text_content("#gang-list .gang-name") == f"ns/{HOSTILE}"
    assert page.eval_on_selector_all("img, script:not([src]), b", "found => found.length") == 0
    assert page.evaluate("document.scripts.length") == 1, "only the page's own script"
    page.wait_for_timeout(300)  # an onerror would fire as the image failed: it never exists
    assert dialogs == []
    page.close()


def opened(page: Page, url: str) -> int | str:
    """The status a navigation ends with, or Chromium's error when it gave up (headless, a
    refused Basic challenge: nobody answers the prompt)."""
    try:
        answer = page.goto(url)
    except PlaywrightError as failed:
        return (
            "ERR_INVALID_AUTH_CREDENTIALS"
            if "ERR_INVALID_AUTH_CREDENTIALS" in str(failed)
            else str(failed)
        )
    return 0 if answer is None else answer.status


def test_the_browser_is_asked_for_the_token_and_sends_it(browser: Browser) -> None:
    with service_of_no_nodes(npu_map=True, access=Access(token=TOKEN)) as (url, _):
        for password in (None, "a guess"):
            credentials = (
                None if password is None else HttpCredentials(username="admin", password=password)
            )
            context = browser.new_context(http_credentials=credentials)
            for path in ("/map", "/map/state"):
                assert context.request.get(url + path).status == 401, (password, path)
            assert opened(context.new_page(), url + "/map") in (401, "ERR_INVALID_AUTH_CREDENTIALS")
            context.close()
        context = browser.new_context(http_credentials={"username": "admin", "password": TOKEN})
        page = context.new_page()
        answer = page.goto(url + "/map")
        assert answer is not None and answer.status == 200
        page.wait_for_selector("body[data-version]", state="attached")  # the state was read
        assert (page.text_content("#summary") or "").startswith("0 nodes")
        context.close()
