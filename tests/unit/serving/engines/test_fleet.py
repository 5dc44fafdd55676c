import asyncio
import logging

import httpx
import pytest

from serving.engines.fleet import SLOW_SCRAPES_TO_EJECT, EndpointPicker, Replica, rendezvous_weight
from serving.engines.replica_metrics import ReplicaMetrics
from serving.errors import EngineUnavailable
from tests.vllm_metrics import vllm_metrics


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


class Fleet:
    """Fake replicas behind httpx.MockTransport: each answers /metrics and /health as told."""

    def __init__(self, n):
        self.urls = [f"http://10.0.0.{i + 1}:8000" for i in range(n)]
        self.metrics = dict.fromkeys(self.urls, vllm_metrics())
        self.health = dict.fromkeys(self.urls, 200)
        self.mode = dict.fromkeys(self.urls, "ok")  # ok, 500, metrics-500, refuse, hang, boom
        self.calls = []

    async def handler(self, request):
        base = f"{request.url.scheme}://{request.url.host}:{request.url.port}"
        self.calls.append((base, request.url.path))
        mode = self.mode[base]
        if mode == "refuse":
            raise httpx.ConnectError("connection refused", request=request)
        if mode == "hang":
            await asyncio.sleep(30)
        if mode == "boom":
            raise RuntimeError("a bug")
        if mode == "500" or (mode == "metrics-500" and request.url.path == "/metrics"):
            return httpx.Response(500)
        if request.url.path == "/health":
            return httpx.Response(self.health[base])
        return httpx.Response(200, text=self.metrics[base])

    def client(self):
        return httpx.AsyncClient(transport=httpx.MockTransport(self.handler))

    def picker(self, urls=None, **kw):
        return EndpointPicker("qwen", urls or self.urls, self.client(), **kw)


def with_metrics(replica, running=0, waiting=0, kv=0.0):
    """As if scraped now: our own in-flight requests at scrape time are those in flight now."""
    replica.metrics = ReplicaMetrics(kv_cache_usage=kv, running=running, waiting=waiting)
    replica.own_at_scrape = replica.in_flight
    return replica


# Choice


def test_load_combines_own_in_flight_with_the_scraped_queue():
    replica = Replica.at("http://10.0.0.1:8000/")
    assert (replica.url, replica.name) == ("http://10.0.0.1:8000", "10.0.0.1:8000")
    replica.in_flight = 3
    assert replica.load() == 3.0  # not scraped yet
    with_metrics(replica, running=1, waiting=2, kv=0.5)
    assert replica.load() == 3 + 2 + 4 * 0.5  # in_flight leads a lagging scrape
    replica.in_flight = 0
    assert replica.load() == 0 + 2 + 4 * 0.5  # ours finished since the scrape: its `running` was ours
    replica.in_flight, replica.own_at_scrape = 0, 0
    with_metrics(replica, running=1, waiting=2, kv=0.5)
    assert replica.load() == 1 + 2 + 4 * 0.5  # work other gateways put there


def test_without_affinity_picks_least_loaded_then_fewest_picks():
    picker = Fleet(3).picker()
    a, b, c = picker.replicas
    with_metrics(a, running=4)
    with_metrics(b, running=1, kv=0.1)
    with_metrics(c, running=1, kv=0.05)
    assert picker.pick(None) is c
    with_metrics(c, running=1, kv=0.1)  # b and c tie: the one picked less goes next
    assert picker.pick(None) is b
    b.picks = 5
    assert picker.pick(None) is c
    c.in_flight = 2
    assert picker.pick(None) is b


def test_affinity_is_stable_across_pickers_and_spreads_keys():
    fleet = Fleet(4)
    one, two = fleet.picker(), fleet.picker(urls=list(reversed(fleet.urls)))
    keys = [f"tenant-{i}" for i in range(200)]
    first = [one.pick(k).url for k in keys]
    assert first == [two.pick(k).url for k in keys]
    assert first == [one.pick(k).url for k in keys]  # and across time
    assert {url: first.count(url) for url in fleet.urls} == {url: pytest.approx(50, abs=25) for url in fleet.urls}
    assert sum(r.affinity_picks for r in one.replicas) == 400
    expected = max(fleet.urls, key=lambda url: rendezvous_weight("tenant-0", url))
    assert first[0] == expected
    # The same in every process and every release: a hash pinned here, not Python's salted hash().
    assert rendezvous_weight("tenant-0", fleet.urls[0]) == 14352965938052088914


def test_bounded_load_spills_a_hot_key_and_returns_when_it_cools():
    picker = Fleet(3).picker(load_bound=1.25)
    home = picker.pick("hot")
    assert home.affinity_picks == 1
    home.in_flight = 10  # bound: 1.25 * (10 + 1) / 3 = 4.6
    spilled = picker.pick("hot")
    assert spilled is not home
    assert spilled.affinity_picks == 0
    home.in_flight = 4  # 1.25 * (4 + 1 + 1) / 3 = 2.5 with the spilled replica's load of 1
    spilled.in_flight = 1
    assert picker.pick("hot") is not home
    home.in_flight = 2  # 1.25 * (2 + 1 + 1) / 3 = 1.67 ... still over
    assert picker.pick("hot") is not home
    home.in_flight = 1
    assert picker.pick("hot") is home
    assert home.affinity_picks == 2


def test_round_robin_alternates_ignoring_affinity_and_load():
    picker = Fleet(3).picker(policy="round_robin")
    a, b, c = picker.replicas
    a.in_flight = 50
    names = [picker.pick("same-key").name for _ in range(6)]
    assert names == [a.name, b.name, c.name] * 2
    picker.report_failure(b, "test")
    assert [picker.pick(None).name for _ in range(4)] == [a.name, c.name, a.name, c.name]


def test_exclude_takes_urls_for_a_retry_elsewhere():
    picker = Fleet(2).picker()
    first = picker.pick("k")
    second = picker.pick("k", exclude={first.url})
    assert second is not first
    with pytest.raises(EngineUnavailable):
        picker.pick("k", exclude={first.url, second.url})


def test_lease_counts_in_flight_even_when_the_request_fails():
    picker = Fleet(1).picker()
    replica = picker.pick(None)
    with picker.lease(replica), picker.lease(replica):
        assert replica.in_flight == 2
    seen = []

    def fail_inside():
        with picker.lease(replica):
            seen.append(replica.in_flight)
            raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        fail_inside()
    assert (seen, replica.in_flight) == ([1], 0)


# Scraping, ejection and readmission


def test_scrape_reads_metrics_and_capacity_sums_replicas():
    async def run():
        fleet = Fleet(3)
        fleet.metrics[fleet.urls[1]] = vllm_metrics(blocks=1024)
        fleet.metrics[fleet.urls[2]] = "# nothing reported yet\n"
        picker = fleet.picker()
        assert picker.capacity_blocks() is None
        await picker.scrape_once()
        assert picker.capacity_blocks() == (2 * 2048 + 2 * 1024, 16)
        assert [r.metrics.running for r in picker.replicas] == [5, 5, 0]
        assert sorted(path for _, path in fleet.calls) == ["/metrics"] * 3

    asyncio.run(run())


@pytest.mark.parametrize("mode", ["500", "refuse", "hang"])
def test_failed_scrape_ejects_and_ejected_is_never_picked(mode, caplog):
    async def run():
        fleet = Fleet(2)
        picker = fleet.picker(scrape_timeout_s=0.05, clock=Clock())
        dead = picker.replicas[1]
        fleet.mode[dead.url] = mode
        if mode == "hang":  # late answers are forgiven twice: a busy replica is slow, not dead
            for _ in range(SLOW_SCRAPES_TO_EJECT - 1):
                await picker.scrape_once()
                assert dead.state == "up"
        await picker.scrape_once()
        assert (dead.state, dead.failures, dead.backoff_s) == ("ejected", 1, 0.5)
        assert {picker.pick(f"key-{i}").url for i in range(50)} == {fleet.urls[0]}
        assert {picker.pick(None).url for _ in range(5)} == {fleet.urls[0]}

    with caplog.at_level(logging.WARNING, logger="serving.engines.fleet"):
        asyncio.run(run())
    assert [r.getMessage() for r in caplog.records if "ejected" in r.getMessage()] != []
    assert len(caplog.records) == 1


def test_a_late_last_replica_is_kept_but_a_refusing_one_is_ejected(caplog):
    async def run():
        fleet = Fleet(2)
        picker = fleet.picker(scrape_timeout_s=0.05, clock=Clock())
        gone, busy = picker.replicas
        fleet.mode[gone.url] = "refuse"
        await picker.scrape_once()
        assert gone.state == "ejected"
        fleet.mode[busy.url] = "hang"  # the survivor, slow under the load the other one left
        for _ in range(SLOW_SCRAPES_TO_EJECT + 2):
            await picker.scrape_once()
        assert busy.state == "up"
        assert picker.pick(None) is busy
        fleet.mode[busy.url] = "500"  # an error status is a failure, last replica or not
        await picker.scrape_once()
        assert busy.state == "ejected"

    with caplog.at_level(logging.WARNING, logger="serving.engines.fleet"):
        asyncio.run(run())
    kept = [r.getMessage() for r in caplog.records if "last one up" in r.getMessage()]
    assert len(kept) == 1  # said once, not on every late scrape


def test_readmitted_only_after_backoff_and_a_healthy_answer(caplog):
    async def run():
        fleet, clock = Fleet(2), Clock()
        picker = fleet.picker(clock=clock, backoff_initial_s=0.5, backoff_max_s=2.0)
        dead = picker.replicas[0]
        fleet.mode[dead.url] = "refuse"
        await picker.scrape_once()
        assert dead.ejected_until == clock.now + 0.5
        fleet.mode[dead.url] = "ok"
        fleet.calls.clear()
        clock.now += 0.4
        await picker.scrape_once()  # backoff not over: no probe, still out
        assert (dead.url, "/health") not in fleet.calls
        assert dead.state == "ejected"
        backoffs = []
        fleet.health[dead.url] = 503
        for _ in range(4):  # each failed probe doubles the backoff, up to the cap
            clock.now = dead.ejected_until
            await picker.scrape_once()
            backoffs.append(dead.backoff_s)
        assert backoffs == [1.0, 2.0, 2.0, 2.0]
        assert (dead.state, dead.failures) == ("ejected", 5)
        fleet.health[dead.url] = 200
        clock.now = dead.ejected_until - 0.01
        await picker.scrape_once()
        assert dead.state == "ejected"
        fleet.metrics[dead.url] = "broken"
        fleet.mode[dead.url] = "metrics-500"  # healthy, but its /metrics fails: not yet
        clock.now = dead.ejected_until
        await picker.scrape_once()
        assert (dead.state, dead.failures) == ("ejected", 6)
        fleet.mode[dead.url] = "ok"
        fleet.metrics[dead.url] = vllm_metrics(running=(9, 0))
        clock.now = dead.ejected_until
        await picker.scrape_once()
        assert (dead.state, dead.failures, dead.backoff_s) == ("up", 0, 0.0)
        assert (dead.metrics.running, dead.metrics.scraped_at) == (9, clock.now)  # scraped afresh on return
        assert picker.pick(None, exclude={fleet.urls[1]}) is dead

    with caplog.at_level(logging.INFO, logger="serving.engines.fleet"):
        asyncio.run(run())
    messages = [r.getMessage() for r in caplog.records]
    assert sum("ejected" in m for m in messages) == 1  # one warning per ejection, not per failed probe
    assert sum("readmitted" in m for m in messages) == 1


def test_report_failure_ejects_once_and_success_resets_failures(caplog):
    clock = Clock()
    picker = Fleet(2).picker(clock=clock)
    replica = picker.replicas[0]
    with caplog.at_level(logging.WARNING, logger="serving.engines.fleet"):
        picker.report_failure(replica, "HTTP 502")
        until = replica.ejected_until
        clock.now += 0.3
        picker.report_failure(replica, "a request already running there")  # the same outage
    assert (replica.state, replica.failures, replica.ejected_until) == ("ejected", 1, until)
    assert len(caplog.records) == 1
    picker.report_failure(picker.replicas[1], "timeout")
    with pytest.raises(EngineUnavailable) as err:
        picker.pick("k")
    assert err.value.code == "engine_unavailable"
    up = Fleet(1).picker()
    up.replicas[0].failures = 3
    up.report_success(up.replicas[0])
    assert up.replicas[0].failures == 0


def test_snapshot_reports_each_replica():
    clock = Clock()
    picker = Fleet(2).picker(clock=clock)
    a, b = picker.replicas
    with_metrics(a, running=2, waiting=1, kv=0.3).metrics.prefix_cache_queries = 100.0
    a.metrics.prefix_cache_hits = 25.0
    picker.pick("k", exclude={b.url})
    picker.report_failure(b, "down")
    clock.now += 1.5
    rows = {row["name"]: row for row in picker.snapshot()}
    assert rows[a.name] == {
        "name": a.name,
        "url": a.url,
        "state": "up",
        "in_flight": 0,
        "running": 2,
        "waiting": 1,
        "kv_cache_usage": 0.3,
        "prefix_cache_hit_rate": 0.25,
        "picks": 1,
        "affinity_picks": 1,
        "ejected_for_s": None,
    }
    assert (rows[b.name]["state"], rows[b.name]["ejected_for_s"]) == ("ejected", 1.5)


def test_background_loop_ejects_a_dying_replica_and_survives_errors():
    async def run():
        fleet = Fleet(2)
        live, dying = fleet.urls
        picker = fleet.picker(scrape_interval_s=0.01, scrape_timeout_s=0.5)
        await picker.start()
        assert picker.capacity_blocks() == (2 * 2 * 2048, 16)  # known as soon as start() returns
        fleet.mode[live] = "boom"  # an unexpected error is logged; the watcher carries on
        fleet.mode[dying] = "refuse"
        for _ in range(200):
            if picker.replicas[1].state == "ejected":
                break
            await asyncio.sleep(0.01)
        assert picker.replicas[1].state == "ejected"
        fleet.mode[live] = "ok"
        fleet.metrics[live] = vllm_metrics(running=(7, 0))
        for _ in range(200):
            if picker.replicas[0].metrics.running == 7:
                break
            await asyncio.sleep(0.01)
        assert picker.replicas[0].metrics.running == 7
        assert picker.replicas[0].state == "up"  # a bug in a check is not the replica's failure
        await picker.close()
        await picker.close()
        calls = len(fleet.calls)
        await asyncio.sleep(0.05)
        assert len(fleet.calls) == calls  # the watchers are gone

    asyncio.run(run())


def test_affinity_yields_when_its_replica_carries_more_than_the_slack_above_the_idlest():
    """3 requests on the key's replica, 1 on the other: the bound alone (3.125) would keep stacking it; the
    slack (one request above the idlest) sends the next one over."""
    from serving.engines.fleet import bounded_affinity

    a, b = Replica.at("http://10.0.0.1:8000"), Replica.at("http://10.0.0.2:8000")
    key = next(f"k{i}" for i in range(100) if rendezvous_weight(f"k{i}", a.url) > rendezvous_weight(f"k{i}", b.url))
    a.in_flight, b.in_flight = 3, 1
    assert bounded_affinity(key, [a, b], 1.25, slack=float("inf")) == (a, True)
    assert bounded_affinity(key, [a, b], 1.25) == (b, False)
    a.in_flight = 2
    assert bounded_affinity(key, [a, b], 1.25) == (a, True)


def test_a_scrape_taken_while_our_request_ran_does_not_push_the_next_repeat_away():
    """Sequential repeats of one medium: the last scrape still shows our finished request running; the key's
    replica must not look busier than the idle one for it."""
    from serving.engines.fleet import bounded_affinity

    a, b = Replica.at("http://10.0.0.1:8000"), Replica.at("http://10.0.0.2:8000")
    key = next(f"k{i}" for i in range(100) if rendezvous_weight(f"k{i}", a.url) > rendezvous_weight(f"k{i}", b.url))
    a.in_flight = 1
    with_metrics(a, running=1, kv=0.01)  # scraped while our request ran there
    with_metrics(b)
    a.in_flight = 0  # it finished; the next scrape has not come yet
    assert bounded_affinity(key, [a, b], 1.25) == (a, True)
