"""The background confirmer (``confirm="auto"``): a placement costs the caller
one round trip; its confirm is batched with others, sent again until answered,
and a placement that cannot be confirmed is given back and reported, never
left to be built without its claim."""
# ruff: noqa: F811 - the fixtures of test_pending_claims, imported by name
from __future__ import annotations

import threading
import time

import oslo_messaging
import pytest

from scheduler import exception
from tests.unit.scheduler.inprocess_daemon import serving
from tests.unit.scheduler.test_pending_claims import (  # noqa: F401
    ONE,
    TWO,
    daemon,
    rows,
    sched,
    vcpus_used,
)


def placed(daemon, spec=ONE, **kw) -> list[str]:
    return [s[0]["instance_uuid"] for s in daemon.select_destinations(None, spec, **kw)]


def test_the_reply_comes_before_the_confirm(any_db, daemon, scheduler_options):
    """The select returns while its confirm waits for the batch delay: the
    caller paid one round trip; the claim is confirmed right after."""
    scheduler_options(confirm_batch_delay=0.5)
    uuids = placed(daemon)
    assert rows(any_db) == {uuids[0]: True}         # still pending: not confirmed yet
    daemon.wait_confirmed(uuids, timeout=10)
    assert rows(any_db) == {uuids[0]: False}


def test_replies_that_arrive_together_are_confirmed_in_one_call(any_db, daemon,
                                                                scheduler_options):
    scheduler_options(confirm_batch_delay=0.3)
    uuids = placed(daemon) + placed(daemon, TWO) + placed(daemon)
    daemon.wait_confirmed(uuids, timeout=10)
    assert daemon._confirmer.calls == 1
    assert rows(any_db) == dict.fromkeys(uuids, False)


def test_one_instance_in_two_requests_of_a_batch_is_confirmed_once(any_db, daemon,
                                                                  scheduler_options):
    """A select sent again for the same instance (its reply lost, say) lands
    in the same batch: the confirm names the instance once (the endpoint
    refuses duplicates; the moves soak lost placements to it)."""
    import uuid

    scheduler_options(confirm_batch_delay=0.3)
    u = str(uuid.uuid4())
    first = placed(daemon, instance_uuids=[u])
    again = placed(daemon, instance_uuids=[u])
    assert first == again == [u]
    daemon.wait_confirmed([u], timeout=10)
    assert daemon._confirmer.calls == 1
    assert daemon._confirmer.state(u) == "confirmed"
    assert rows(any_db) == {u: False}


def test_a_lost_confirm_is_sent_again_until_answered(any_db, daemon, monkeypatch):
    real_confirm = daemon.confirm
    tries = []

    def lost_twice(ctxt, uuids):
        tries.append(list(uuids))
        if len(tries) <= 2:
            if len(tries) == 2:
                real_confirm(ctxt, uuids)   # written, but its answer is lost
            raise oslo_messaging.MessagingTimeout("no answer")
        return real_confirm(ctxt, uuids)

    monkeypatch.setattr(daemon, "confirm", lost_twice)
    uuids = placed(daemon, TWO)
    daemon.wait_confirmed(uuids, timeout=10)
    assert len(tries) == 3 and tries[0] == tries[2] == uuids
    assert rows(any_db) == dict.fromkeys(uuids, False)


def test_a_confirm_never_answered_before_the_claim_ends_gives_the_claim_back(
        any_db, sched, scheduler_options, monkeypatch, caplog):
    """Retried until ``claim_ttl - confirm_margin`` after the select was sent;
    then released (here the release gets through), logged, reported."""
    scheduler_options(claim_ttl=6, confirm_margin=3.0, confirm_batch_delay=0.0)
    lost = []
    with serving(any_db, sched, on_claim_lost=lambda uuids, why: lost.append((uuids, why))
                 ) as (_, api):
        _never_answered(any_db, api, lost, monkeypatch, caplog)


def _never_answered(any_db, api, lost, monkeypatch, caplog):
    tries = []

    def unanswered(ctxt, uuids):
        tries.append(uuids)
        raise oslo_messaging.MessagingTimeout("no answer")

    monkeypatch.setattr(api, "confirm", unanswered)
    started = time.monotonic()
    uuids = placed(api, TWO)
    with pytest.raises(exception.ClaimExpired) as caught:
        api.wait_confirmed(uuids, timeout=10)
    assert caught.value.instance_uuids == uuids
    # sent again until the next pause would end past the deadline (3 s)
    assert time.monotonic() - started > 1.0 and len(tries) >= 2
    assert lost and lost[0][0] == uuids and "no answer before the end" in lost[0][1]
    assert rows(any_db) == {} and vcpus_used(any_db) == 0
    assert "is lost" in caplog.text and "do not build" in caplog.text


def test_one_lost_request_does_not_sink_the_batch(any_db, sched, daemon, scheduler_options,
                                                  monkeypatch):
    """``confirm`` is all or none over what it names: when a batch answers
    unknown, the other requests of the batch are confirmed one by one; the
    lost request's other instance is given back."""
    scheduler_options(confirm_batch_delay=0.3)
    monkeypatch.setattr(daemon, "_riders", lambda ctxt: [])     # the thread's batches
    real_confirm = daemon.confirm
    calls = []
    reaped: list[str] = []

    def reaped_meanwhile(ctxt, uuids):
        calls.append(list(uuids))
        if not reaped:
            reaped.append(uuids[0])
            sched.release(uuids[0])     # as the reaper would
        return real_confirm(ctxt, uuids)

    monkeypatch.setattr(daemon, "confirm", reaped_meanwhile)
    first = placed(daemon, TWO)
    second = placed(daemon)
    third = placed(daemon)
    with pytest.raises(exception.ClaimExpired):
        daemon.wait_confirmed(first, timeout=10)
    daemon.wait_confirmed(second + third, timeout=10)
    assert calls[0] == first + second + third and calls[1:] == [second, third]
    assert rows(any_db) == dict.fromkeys(second + third, False)
    assert daemon._confirmer.state(first[1]) == "lost"


def test_a_refused_confirm_loses_the_request(any_db, daemon, monkeypatch):
    def refused(ctxt, uuids):
        raise exception.Forbidden(rule="berth:confirm")

    monkeypatch.setattr(daemon, "confirm", refused)
    uuids = placed(daemon)
    with pytest.raises(exception.ClaimExpired):
        daemon.wait_confirmed(uuids, timeout=10)
    assert rows(any_db) == {}


def test_wait_confirmed_times_out_while_unanswered(any_db, daemon, monkeypatch):
    gate = threading.Event()
    real_confirm = daemon.confirm

    def slow(ctxt, uuids):
        gate.wait(10)
        return real_confirm(ctxt, uuids)

    monkeypatch.setattr(daemon, "confirm", slow)
    uuids = placed(daemon)
    with pytest.raises(oslo_messaging.MessagingTimeout):
        daemon.wait_confirmed(uuids, timeout=0.2)
    assert daemon._confirmer.state(uuids[0]) == "pending"
    gate.set()
    daemon.wait_confirmed(uuids, timeout=10)
    assert daemon._confirmer.state(uuids[0]) == "confirmed"


def test_closing_the_client_sends_what_is_queued(any_db, sched, scheduler_options):
    scheduler_options(confirm_batch_delay=5.0)
    with serving(any_db, sched) as (_, api):
        uuids = placed(api) + placed(api)
        assert set(rows(any_db).values()) == {True}
        api.close()
        assert rows(any_db) == dict.fromkeys(uuids, False)


def test_instances_placed_otherwise_are_taken_as_confirmed(any_db, daemon):
    daemon.wait_confirmed(placed(daemon, confirm="none"), timeout=0)
    daemon.wait_confirmed(placed(daemon, confirm="sync"), timeout=0)


def test_an_instance_its_caller_releases_first_is_not_confirmed(any_db, daemon, scheduler_options,
                                                                caplog):
    """A build that failed at once: the caller releases before the confirm
    goes. Nothing is lost or logged; the rest of the request is confirmed.
    (The batch waits long enough for both releases on a busy machine.)"""
    scheduler_options(confirm_batch_delay=2.0)
    gone = placed(daemon)
    pair = placed(daemon, TWO)
    assert daemon.release(None, gone[0]) is True
    assert daemon.release(None, pair[0]) is True
    daemon.wait_confirmed(gone + pair, timeout=10)
    assert daemon._confirmer.state(gone[0]) == "released"
    assert daemon._confirmer.state(pair[1]) == "confirmed"
    assert rows(any_db) == {pair[1]: False}
    assert daemon._confirmer.calls == 1 and "is lost" not in caplog.text


def test_a_release_while_the_confirm_is_on_its_way_loses_nothing(any_db, sched, daemon,
                                                                monkeypatch, caplog):
    real_confirm = daemon.confirm
    sent = []

    def release_meanwhile(ctxt, uuids):
        sent.append(list(uuids))
        if len(sent) == 1:
            daemon.release(None, uuids[0])      # the caller, while the confirm travels
        return real_confirm(ctxt, uuids)

    monkeypatch.setattr(daemon, "confirm", release_meanwhile)
    pair = placed(daemon, TWO)
    daemon.wait_confirmed(pair, timeout=10)
    assert sent == [pair, pair[1:]] and rows(any_db) == {pair[1]: False}
    assert "is lost" not in caplog.text


def test_each_placement_is_confirmed_as_its_caller(any_db, daemon, scheduler_options):
    """A compute API that acts for its users passes their contexts: each
    confirm goes with the context of the selects it confirms (one call per
    caller), not with the process's own identity, which here may act on no
    one's instances."""
    from oslo_context.context import RequestContext

    scheduler_options(confirm_batch_delay=0.3, caller_roles=["member"],
                      caller_project_id="nobody")
    sent = []
    real_confirm = daemon.confirm

    def recorded(ctxt, uuids):
        sent.append((ctxt.project_id, list(uuids)))
        return real_confirm(ctxt, uuids)

    daemon.confirm = recorded
    a, b = (RequestContext(roles=["member"], project_id=p) for p in ("pa", "pb"))
    mine = [s[0]["instance_uuid"] for s in daemon.select_destinations(a, ONE)]
    theirs = [s[0]["instance_uuid"]
              for s in daemon.select_destinations(b, dict(ONE, project_id="pb"))]
    daemon.wait_confirmed(mine + theirs, timeout=10)
    assert sorted(sent) == [("pa", mine), ("pb", theirs)]
    assert rows(any_db) == dict.fromkeys(mine + theirs, False)


def test_a_select_sent_again_then_released_loses_nothing(any_db, daemon, monkeypatch,
                                                         caplog):
    """The first select's confirm is on its way when the caller sends the
    select again (its reply was late) and then releases the instance: both
    requests know of the release. Before, only the second did, and the
    first's confirm, answered "unknown", called the placement lost, logged an
    ERROR and told ``on_claim_lost`` of an instance its caller had let go."""
    import uuid

    real_confirm = daemon.confirm
    sent = []

    def sent_again_and_released(ctxt, uuids):
        sent.append(list(uuids))
        if len(sent) == 1:
            placed(daemon, instance_uuids=uuids)        # sent again meanwhile
            assert daemon.release(None, uuids[0]) is True
        return real_confirm(ctxt, uuids)

    monkeypatch.setattr(daemon, "confirm", sent_again_and_released)
    u = str(uuid.uuid4())
    placed(daemon, instance_uuids=[u])
    daemon.wait_confirmed([u], timeout=10)
    assert daemon._confirmer.flush(10)
    assert sent == [[u]] and rows(any_db) == {}
    assert daemon._confirmer.state(u) == "released"
    assert "is lost" not in caplog.text


def test_a_queue_emptied_while_the_confirmer_lingers_keeps_it_running(
        any_db, daemon, scheduler_options):
    """Every queued request released during the batch delay: the confirmer's
    thread goes on (it died on an empty queue, and the next placements
    waited for a new thread)."""
    scheduler_options(confirm_batch_delay=0.3)
    gone = placed(daemon)
    time.sleep(0.1)                 # the thread is lingering by now
    assert daemon.release(None, gone[0]) is True
    thread = daemon._confirmer._thread
    time.sleep(0.5)
    assert thread.is_alive()
    kept = placed(daemon)
    daemon.wait_confirmed(kept, timeout=10)
    assert daemon._confirmer._thread is thread
    assert rows(any_db) == {kept[0]: False}


# -- riding on the next select (RPC API 1.4) ---------------------------------------------

def test_the_next_select_carries_the_confirms(any_db, daemon, scheduler_options):
    """A client that keeps placing sends no confirm call: a select carries the
    placements queued for confirm_batch_delay, several at a time; the last
    ones are confirmed by the thread, at once when someone waits for them."""
    scheduler_options(confirm_batch_delay=1.0)
    first, pair = placed(daemon), placed(daemon, TWO)
    assert set(rows(any_db).values()) == {True}     # too young to ride
    time.sleep(1.05)
    last = placed(daemon)                           # carries both requests
    assert rows(any_db) == {**dict.fromkeys(first + pair, False), last[0]: True}
    assert daemon._confirmer.calls == 0
    assert daemon._confirmer.state(pair[1]) == "confirmed"
    t0 = time.monotonic()
    daemon.wait_confirmed(last, timeout=10)         # does not wait 2 s
    assert time.monotonic() - t0 < 1.0 and daemon._confirmer.calls == 1
    assert rows(any_db) == dict.fromkeys(first + pair + last, False)


def test_a_client_capped_below_1_4_carries_nothing(any_db, sched, scheduler_options):
    scheduler_options(confirm_batch_delay=0.2, rpc_version_cap="1.3")
    with serving(any_db, sched) as (_, api):
        calls = []
        real_send = api._send

        def send(cctxt, ctxt, method, **kw):
            calls.append((method, sorted(kw)))
            return real_send(cctxt, ctxt, method, **kw)

        api._send = send
        uuids = placed(api) + placed(api)
        api.wait_confirmed(uuids, timeout=10)
        assert all("confirm_instances" not in kw for _, kw in calls)
        assert [m for m, _ in calls].count("confirm") == 1
        assert rows(any_db) == dict.fromkeys(uuids, False)
        api.close()


def test_a_select_that_fails_hands_its_confirms_back(any_db, daemon, scheduler_options):
    """NoValidHost for the carrying select: its confirm's answer never came
    back, so the thread confirms them again (idempotent)."""
    scheduler_options(confirm_batch_delay=0.5)
    first = placed(daemon)
    time.sleep(0.6)
    with pytest.raises(exception.NoValidHost):
        daemon.select_destinations(None, dict(ONE, flavor=dict(ONE["flavor"], vcpus=512)))
    daemon.wait_confirmed(first, timeout=10)
    assert daemon._confirmer.state(first[0]) == "confirmed"
    assert daemon._confirmer.calls == 1 and rows(any_db) == {first[0]: False}


def test_a_carried_confirm_that_finds_an_instance_gone_loses_that_request_only(
        any_db, sched, daemon, scheduler_options, caplog):
    """One instance of a carried request was reaped: the select's confirm
    answers unknown (all or none: nothing confirmed); the thread then loses
    that request and confirms the others, as for a batch of its own."""
    scheduler_options(confirm_batch_delay=0.5)
    pair = placed(daemon, TWO)
    other = placed(daemon, confirm="none")              # carries nothing
    daemon._confirmer.add(other, time.monotonic())      # queued behind the pair
    sched.release(pair[0])                  # as the reaper would
    time.sleep(0.6)
    last = placed(daemon)                   # carries the pair and `other`
    with pytest.raises(exception.ClaimExpired):
        daemon.wait_confirmed(pair, timeout=10)
    daemon.wait_confirmed(other + last, timeout=10)
    assert daemon._confirmer.state(pair[1]) == "lost" and "is lost" in caplog.text
    assert rows(any_db) == dict.fromkeys(other + last, False)


def test_a_lost_reply_of_a_carrying_select_loses_nothing(any_db, daemon, monkeypatch,
                                                          scheduler_options):
    """The carrying select's reply is lost: the select is sent again with the
    same instances and confirms; both answers are the first ones'."""
    scheduler_options(confirm_batch_delay=1.0)
    first = placed(daemon)
    time.sleep(1.05)
    real_send = daemon._send
    sent = []

    def reply_lost_once(cctxt, ctxt, method, **kw):
        sent.append(kw.get("confirm_instances"))
        result = real_send(cctxt, ctxt, method, **kw)
        if len(sent) == 1:
            raise oslo_messaging.MessagingTimeout("reply lost")
        return result

    monkeypatch.setattr(daemon, "_send", reply_lost_once)
    second = placed(daemon)
    assert sent == [first, first]
    assert daemon._confirmer.state(first[0]) == "confirmed"
    assert daemon._confirmer.calls == 0
    assert rows(any_db) == {first[0]: False, second[0]: True}


def test_a_malformed_confirm_instances_is_refused_and_changes_nothing(any_db, daemon):
    first = placed(daemon, confirm="manual")
    cctxt = daemon.client.prepare(version="1.4")
    with pytest.raises(exception.InvalidRequest, match="confirm_instances"):
        cctxt.call({}, "select_destinations", request_spec=ONE, pending=True,
                   confirm_instances=[first[0], "not-a-uuid"])
    assert rows(any_db) == {first[0]: True}


def test_a_scheduler_older_than_1_4_gets_the_select_without_the_confirms(
        any_db, sched, scheduler_options, monkeypatch, caplog):
    """A client upgraded before its scheduler (no rpc_version_cap set): the
    first select that carries confirms is refused for its version before
    anything is done; it is sent again without them, once, and the client
    confirms in calls of their own from then on."""
    from scheduler.endpoints import topics
    from scheduler.manager import SchedulerManager

    for owner in (SchedulerManager, topics.TopicEndpoint, topics.UnknownMethods):
        monkeypatch.setattr(owner, "target", topics._Target(version="1.3"))
    scheduler_options(confirm_batch_delay=0.3)
    with serving(any_db, sched) as (_, api):
        first = placed(api)
        time.sleep(0.35)
        second = placed(api)            # would carry `first`: refused, sent again
        third = placed(api)
        api.wait_confirmed(first + second + third, timeout=10)
        assert rows(any_db) == dict.fromkeys(first + second + third, False)
        assert api._carry is False and api._confirmer.calls >= 1
        assert caplog.text.count("does not serve RPC API 1.4") == 1
        api.close()


def test_a_select_carries_the_confirms_of_its_caller_whatever_context_object(
        monkeypatch, scheduler_options):
    """A caller that passes one context to every select, and one that makes a
    context per request: their queued placements ride alike; another caller's
    stay queued."""
    from oslo_context.context import RequestContext

    from scheduler import confirmer

    monkeypatch.setattr(confirmer.BackgroundConfirmer, "_start", lambda self: None)
    scheduler_options(confirm_batch_delay=0.0)
    queue = confirmer.BackgroundConfirmer(api=None)
    mine = RequestContext(roles=["member"], project_id="pa")
    again = RequestContext(roles=["member"], project_id="pa")
    theirs = RequestContext(roles=["member"], project_id="pb")
    for n, ctxt in enumerate((mine, theirs, again, mine)):
        queue.add([f"u{n}"], time.monotonic(), ctxt)
    assert queue.uuids_of(queue.take(again)) == ["u0", "u2", "u3"]
    assert queue.uuids_of(queue.take(mine)) == []
    assert queue.uuids_of(queue.take(theirs)) == ["u1"]


def test_a_context_object_used_again_for_another_caller_does_not_take_the_first_ones(
        monkeypatch, scheduler_options):
    """The placements queued under one context object stay its first caller's
    when the object is changed to stand for another project: a select sent
    with it now does not carry them (the other project could not confirm them,
    and they would be given back)."""
    from oslo_context.context import RequestContext

    from scheduler import confirmer

    monkeypatch.setattr(confirmer.BackgroundConfirmer, "_start", lambda self: None)
    scheduler_options(confirm_batch_delay=0.0)
    queue = confirmer.BackgroundConfirmer(api=None)
    ctxt = RequestContext(roles=["member"], project_id="pa")
    queue.add(["u0"], time.monotonic(), ctxt)
    ctxt.project_id = "pb"
    queue.add(["u1"], time.monotonic(), ctxt)
    assert queue.uuids_of(queue.take(ctxt)) == ["u1"]
    assert queue.uuids_of(queue.take(RequestContext(roles=["member"], project_id="pa"))) \
        == ["u0"]
