"""Reflector protocol with a scripted API: ghosts removed on re-list, no reconnect spin."""

from __future__ import annotations

import asyncio
import itertools
import random
from collections.abc import AsyncIterator
from typing import Any

from scheduler.kube.client import ApiError
from scheduler.kube.informer import Backoff, Reflector

Obj = dict[str, Any]


def _pod(name: str, rv: int) -> Obj:
    return {"metadata": {"namespace": "default", "name": name, "resourceVersion": str(rv)}}


class Recorder:
    def __init__(self) -> None:
        self.live: dict[str, Obj] = {}
        self.deleted: list[str] = []

    def on_upsert(self, obj: Obj, old: Obj | None) -> None:
        self.live[obj["metadata"]["name"]] = obj

    def on_delete(self, obj: Obj) -> None:
        self.deleted.append(obj["metadata"]["name"])
        self.live.pop(obj["metadata"]["name"], None)


class ScriptedApi:
    """First list: a, b. Watch: b modified, then 410. Re-list: b, c (a was deleted meanwhile)."""

    def __init__(self) -> None:
        self.lists = 0
        self.list_queries: list[dict[str, str]] = []
        self.watch_queries: list[dict[str, str]] = []

    async def get(self, path: str, query: dict[str, str] | None = None) -> Obj:
        self.lists += 1
        self.list_queries.append(dict(query or {}))
        if self.lists == 1:
            return {"metadata": {"resourceVersion": "10"}, "items": [_pod("a", 5), _pod("b", 6)]}
        return {"metadata": {"resourceVersion": "50"}, "items": [_pod("b", 20), _pod("c", 40)]}

    async def watch(self, path: str, query: dict[str, str], timeout: int) -> AsyncIterator[Obj]:
        self.watch_queries.append(dict(query))
        if len(self.watch_queries) == 1:
            yield {"type": "MODIFIED", "object": _pod("b", 20)}
            yield {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "30"}}}
            yield {"type": "ERROR", "object": {"kind": "Status", "code": 410, "message": "gone"}}
            return
        await asyncio.sleep(3600)
        yield {}


def test_relist_after_410_deletes_ghosts_and_resumes_from_bookmarks() -> None:
    api, rec = ScriptedApi(), Recorder()

    async def run() -> None:
        r = Reflector(api, "/api/v1/pods", rec, name="pods")  # type: ignore[arg-type]
        task = asyncio.create_task(r.run())
        while len(api.watch_queries) < 2:
            await asyncio.sleep(0.01)
        task.cancel()
        assert r.lists == 2 and r.resource_version == "50"

    asyncio.run(run())
    assert sorted(rec.live) == ["b", "c"]
    assert rec.deleted == ["a"]  # deleted while the watch could not see it
    first, second = api.watch_queries
    assert first["resourceVersion"] == "10" and first["allowWatchBookmarks"] == "true"
    assert second["resourceVersion"] == "50"
    # client-go: the first list from the watch cache; after 410 a consistent read from etcd;
    # both in pages of 500 (this server answers with everything at once)
    assert api.list_queries == [{"resourceVersion": "0", "limit": "500"}, {"limit": "500"}]


class PagedApi:
    """Lists in pages of `limit` with continue tokens; `expire` makes a continue token 410
    once; a second list (after the watch's 410) sees `later` instead."""

    def __init__(self, items: list[Obj], later: list[Obj], expire: bool = False) -> None:
        self.items, self.later, self.expire = items, later, expire
        self.queries: list[dict[str, str]] = []
        self.watches = 0
        self.delivered: list[int] = []  # objects handed to the handler at each request

    async def get(self, path: str, query: dict[str, str] | None = None) -> Obj:
        query = dict(query or {})
        self.queries.append(query)
        items = self.items if not self.watches else self.later
        token = query.get("continue")
        if token and self.expire:
            self.expire = False
            raise ApiError(410, "continue token expired", "Expired")
        start = int(token or 0)
        limit = int(query.get("limit") or 0) or len(items)
        body: Obj = {"metadata": {"resourceVersion": "70"}, "items": items[start : start + limit]}
        if start + limit < len(items):
            body["metadata"]["continue"] = str(start + limit)
        return body

    async def watch(self, path: str, query: dict[str, str], timeout: int) -> AsyncIterator[Obj]:
        self.watches += 1
        if self.watches == 1:
            yield {"type": "ERROR", "object": {"kind": "Status", "code": 410, "message": "gone"}}
            return
        await asyncio.sleep(3600)
        yield {}


def _paged_run(api: PagedApi, rec: Recorder, page: int) -> Reflector:
    import scheduler.kube.informer as informer

    async def run() -> Reflector:
        saved = informer.LIST_PAGE_SIZE
        informer.LIST_PAGE_SIZE = page
        try:
            r = Reflector(api, "/api/v1/pods", rec, name="pods")  # type: ignore[arg-type]
            task = asyncio.create_task(r.run())
            while api.watches < 2:
                await asyncio.sleep(0.01)
            task.cancel()
            return r
        finally:
            informer.LIST_PAGE_SIZE = saved

    return asyncio.run(run())


def test_lists_page_by_page_as_client_go_pager() -> None:
    items = [_pod(f"p{i}", i + 1) for i in range(5)]
    later = [_pod(f"p{i}", i + 1) for i in range(1, 5)] + [_pod("q", 60)]
    api, rec = PagedApi(items, later), Recorder()
    r = _paged_run(api, rec, 2)
    # the first list: the watch cache, then continue tokens without a resourceVersion
    assert api.queries[:3] == [
        {"resourceVersion": "0", "limit": "2"},
        {"limit": "2", "continue": "2"},
        {"limit": "2", "continue": "4"},
    ]
    # the re-list (after the watch's 410): from etcd, paged the same way
    assert api.queries[3:] == [
        {"limit": "2"},
        {"limit": "2", "continue": "2"},
        {"limit": "2", "continue": "4"},
    ]
    assert sorted(rec.live) == ["p1", "p2", "p3", "p4", "q"]
    assert rec.deleted == ["p0"]
    assert r.lists == 2 and r.resource_version == "70"


def test_first_list_hands_each_page_over_as_it_arrives() -> None:
    items = [_pod(f"p{i}", i + 1) for i in range(5)]
    api, rec = PagedApi(items, items), Recorder()
    seen_at: list[int] = []
    get = api.get

    async def counting(path: str, query: dict[str, str] | None = None) -> Obj:
        seen_at.append(len(rec.live))
        return await get(path, query)

    api.get = counting  # type: ignore[method-assign]
    _paged_run(api, rec, 2)
    assert seen_at[:3] == [0, 2, 4]  # each page upserted before the next is asked for


def test_expired_continue_token_gives_one_whole_list() -> None:
    items = [_pod(f"p{i}", i + 1) for i in range(5)]
    api, rec = PagedApi(items, items, expire=True), Recorder()
    r = _paged_run(api, rec, 2)
    assert api.queries[:3] == [
        {"resourceVersion": "0", "limit": "2"},
        {"limit": "2", "continue": "2"},
        {"resourceVersion": "0"},  # as client-go's pager: the whole list instead
    ]
    assert sorted(rec.live) == [f"p{i}" for i in range(5)] and rec.deleted == []
    assert r.synced.is_set()


class ClosingApi:
    """Every watch ends at once with nothing; lists always work."""

    def __init__(self) -> None:
        self.watches = 0

    async def get(self, path: str, query: dict[str, str] | None = None) -> Obj:
        return {"metadata": {"resourceVersion": "1"}, "items": []}

    async def watch(self, path: str, query: dict[str, str], timeout: int) -> AsyncIterator[Obj]:
        self.watches += 1
        if self.watches > 10_000:
            raise ApiError(0, "spinning")
        return
        yield {}


def test_empty_streams_back_off_instead_of_spinning() -> None:
    api = ClosingApi()

    async def run() -> None:
        backoff = Backoff(initial=0.05, maximum=0.2, jitter=0.0)
        r = Reflector(
            api,
            "/api/v1/nodes",
            Recorder(),
            name="nodes",
            backoff=backoff,  # type: ignore[arg-type]
            rng=random.Random(1),
        )
        task = asyncio.create_task(r.run())
        await asyncio.sleep(0.6)
        task.cancel()

    asyncio.run(run())
    assert 2 <= api.watches <= 8  # 0.05, 0.1, 0.2, 0.2 ... not thousands


def test_backoff_after_thousands_of_failures_stays_at_its_maximum() -> None:
    """An API server down for days: the reconnect delay is capped, never an OverflowError."""
    import random

    from scheduler.kube.informer import Backoff

    backoff = Backoff(initial=0.8, maximum=30.0, jitter=0.0)
    assert backoff.delay(1, random.Random(1)) == 0.8
    assert backoff.delay(5000, random.Random(1)) == 30.0


class LaterInstalledApi:
    """404 for the first three lists (an API the server does not serve), then served."""

    def __init__(self) -> None:
        self.lists = 0

    async def get(self, path: str, query: dict[str, str] | None = None) -> Obj:
        self.lists += 1
        if self.lists <= 3:
            raise ApiError(404, "the server could not find the requested resource", "NotFound")
        return {"metadata": {"resourceVersion": "7"}, "items": [_pod("a", 7)]}

    async def watch(self, path: str, query: dict[str, str], timeout: int) -> AsyncIterator[Obj]:
        await asyncio.sleep(3600)
        yield {}


def test_an_unserved_api_is_empty_at_once_then_looked_for_quietly_at_the_longest_backoff(
    capsys: Any,
) -> None:
    api, rec = LaterInstalledApi(), Recorder()

    async def run() -> list[float]:
        backoff = Backoff(initial=0.01, maximum=0.1, jitter=0.0)
        r = Reflector(
            api,  # type: ignore[arg-type]
            "/apis/policy/v1/poddisruptionbudgets",
            rec,
            name="pdbs",
            backoff=backoff,
            when_unserved="preemption sees no PodDisruptionBudgets",
        )
        task = asyncio.create_task(r.run())
        await asyncio.wait_for(r.synced.wait(), 1)
        assert r.unserved and api.lists == 1 and rec.live == {}  # synced as empty at once
        loop = asyncio.get_running_loop()
        seen: list[float] = []
        while api.lists < 4:
            before = api.lists
            await asyncio.sleep(0.005)
            if api.lists != before:
                seen.append(loop.time())
        await asyncio.sleep(0.05)
        task.cancel()
        assert not r.unserved and "a" in rec.live  # installed later: read
        return seen

    seen = asyncio.run(run())
    # looked for again at the longest backoff, not at 10 ms doubling
    assert all(b - a >= 0.09 for a, b in itertools.pairwise(seen))
    captured = capsys.readouterr()
    out = captured.out + captured.err
    assert out.count("API not served") == 1 and "list/watch failed" not in out
    assert "preemption sees no PodDisruptionBudgets" in out
    assert "API now served" in out


def test_a_held_first_list_is_asked_for_at_once_and_applied_once_released() -> None:
    items = [_pod(f"p{i}", i + 1) for i in range(3)]
    api, rec = PagedApi(items, items), Recorder()

    async def run() -> None:
        r = Reflector(api, "/api/v1/pods", rec, name="pods")  # type: ignore[arg-type]
        r.hold = asyncio.Event()
        task = asyncio.create_task(r.run())
        await asyncio.sleep(0.05)
        assert api.queries == [{"resourceVersion": "0", "limit": "500"}]  # asked for
        assert rec.live == {} and not r.synced.is_set()  # not applied
        r.hold.set()
        await asyncio.wait_for(r.synced.wait(), 5)
        assert sorted(rec.live) == ["p0", "p1", "p2"]
        task.cancel()

    asyncio.run(run())
