"""PCI rows on SQLite and MariaDB: pools by GROUP BY, claims, races, release, reports."""
from __future__ import annotations

import dataclasses
import threading
import uuid

import pytest
import sqlalchemy as sa

from db import models
from db import pci as db_pci
from pci.device import PciDevice
from pci.errors import PciClaimConflict, PciDoesNotFit
from pci.matching import apply_requests
from pci.pools import PciPool, PoolKey, pools_from_devices
from pci.request import PciRequest

PF0 = "0000:81:00.0"
PF1 = "0000:82:00.0"


def add_node(db, name: str) -> int:
    with db.writer() as s:
        row = models.ComputeNode(uuid=str(uuid.uuid4()), host=name, hypervisor_hostname=name)
        s.add(row)
        s.flush()
        return row.id


def sriov_devices() -> list[PciDevice]:
    """Two PFs (NUMA 0 and 1) with two VFs each on physnet1, and a GPU with no NUMA."""
    devs = []
    for numa, pf in enumerate((PF0, PF1)):
        devs.append(PciDevice(pf, "8086", "1572", "type-PF", None, numa))
        for fn in (1, 2):
            devs.append(PciDevice(pf[:-4] + f"02.{fn}", "8086", "154c", "type-VF", pf, numa,
                                  "physnet1"))
    devs.append(PciDevice("0000:03:00.0", "10de", "1eb8", "type-PCI", None, None))
    return devs


@pytest.fixture
def node(any_db):
    node_id = add_node(any_db, "compute-1")
    with any_db.writer() as s:
        db_pci.report_devices(s, node_id, sriov_devices())
    return any_db, node_id


def vf_key(numa):
    return PoolKey("8086", "154c", "type-VF", numa, "physnet1")


def pf_key(numa):
    return PoolKey("8086", "1572", "type-PF", numa, None)


def statuses(db, node_id):
    with db.reader() as s:
        return {d.address: d.status for d in db_pci.devices_for_node(s, node_id)}


class TestPools:
    def test_pools_from_group_by(self, node):
        db, node_id = node
        with db.reader_connection() as conn:
            pools = db_pci.pools_for_nodes(conn)
        assert pools == {node_id: (
            PciPool(PoolKey("10de", "1eb8", "type-PCI", None, None), 1),
            PciPool(vf_key(0), 2), PciPool(vf_key(1), 2),
            PciPool(pf_key(0), 1), PciPool(pf_key(1), 1))}
        with db.reader() as s:
            assert pools[node_id] == pools_from_devices(db_pci.devices_for_node(s, node_id))

    def test_per_node_and_empty_nodes(self, node):
        db, node_id = node
        other = add_node(db, "compute-2")
        with db.reader() as s:
            by_id = db_pci.pools_for_nodes(s, [node_id, other])
            assert set(db_pci.pools_for_nodes(s)) == {node_id}
            assert db_pci.pools_for_nodes(s, []) == {}
        assert by_id[other] == () and len(by_id[node_id]) == 5

    def test_many_nodes_in_chunks(self, any_db, monkeypatch):
        from db import api as db_api

        monkeypatch.setattr(db_api, "IN_CHUNK", 2)
        sizes = []
        real_chunks = db_api.chunks

        def recording(values):
            for chunk in real_chunks(values):
                sizes.append(len(chunk))
                yield chunk

        monkeypatch.setattr(db_pci, "chunks", recording)
        ids = [add_node(any_db, f"c{i}") for i in range(5)]
        with any_db.writer() as s:
            for i, node_id in enumerate(ids):
                db_pci.report_devices(s, node_id, sriov_devices()[: i + 1])
        with any_db.reader() as s:
            pools = db_pci.pools_for_nodes(s, ids)
            assert pools == db_pci.pools_for_nodes(s)
        assert [sum(p.count for p in pools[i]) for i in ids] == [1, 2, 3, 4, 5]
        assert sizes == [2, 2, 1]       # five ids: three IN lists of at most two
        # Equal keys are one object shared by every node.
        shared = {p.key: p.key for p in pools[ids[4]]}
        assert all(p.key is shared[p.key] for i in ids for p in pools[i])


class TestClaims:
    def test_claim_vf_makes_pf_unclaimable(self, node):
        db, node_id = node
        with db.writer() as s:
            addrs = db_pci.claim_devices(s, node_id, "i1", [("r1", vf_key(0), 1)])
        assert addrs == ["0000:81:02.1"]
        st = statuses(db, node_id)
        assert st[PF0] == "unclaimable" and st["0000:81:02.1"] == "claimed"
        with db.reader() as s:
            dev = next(d for d in db_pci.devices_for_node(s, node_id) if d.address == addrs[0])
            assert (dev.instance_uuid, dev.request_id) == ("i1", "r1")
            assert PciPool(pf_key(0), 1) not in db_pci.pools_for_nodes(s)[node_id]

    def test_vfs_pack_on_a_used_pf(self, node):
        db, node_id = node
        with db.writer() as s:
            db_pci.claim_devices(s, node_id, "i1", [("r1", vf_key(0), 1)])
        with db.writer() as s:
            db_pci.claim_devices(s, node_id, "i2", [("r2", vf_key(0), 1)])
        assert statuses(db, node_id)[PF0] == "unclaimable"

    def test_claim_pf_makes_vfs_unclaimable(self, node):
        db, node_id = node
        with db.writer() as s:
            assert db_pci.claim_devices(s, node_id, "i1", [("r1", pf_key(1), 1)]) == [PF1]
        st = statuses(db, node_id)
        assert st[PF1] == "claimed"
        assert st["0000:82:02.1"] == st["0000:82:02.2"] == "unclaimable"

    def test_pf_and_vf_picks_in_one_claim(self, node):
        db, node_id = node
        with db.writer() as s:
            addrs = db_pci.claim_devices(s, node_id, "i1",
                                         [("r1", vf_key(0), 1), ("r2", pf_key(1), 1)])
        assert addrs == ["0000:81:02.1", PF1]

    def test_pf_and_its_own_vf_in_one_claim_conflict(self, node):
        # Pools cannot see that PF0 and its VFs are one card: the claim can.
        db, node_id = node
        with pytest.raises(PciClaimConflict), db.writer() as s:
            db_pci.claim_devices(s, node_id, "i1", [("r1", vf_key(0), 1), ("r2", pf_key(0), 1)])

    def test_pf_with_vf_in_use_conflicts(self, node):
        db, node_id = node
        with db.writer() as s:
            db_pci.claim_devices(s, node_id, "i1", [("r1", vf_key(1), 1)])
        with pytest.raises(PciClaimConflict), db.writer() as s:
            db_pci.claim_devices(s, node_id, "i2", [("r2", pf_key(1), 1)])

    def test_conflict_rolls_back_everything(self, node):
        db, node_id = node
        before = statuses(db, node_id)
        with pytest.raises(PciClaimConflict), db.writer() as s:
            db_pci.claim_devices(s, node_id, "i1", [("r1", vf_key(0), 1),
                                                    ("r2", vf_key(1), 3)])
        assert statuses(db, node_id) == before

    def test_stale_read_loses_the_last_device(self, node, monkeypatch):
        """Two schedulers chose the same last device: the guarded UPDATE lets one win."""
        db, node_id = node
        gpu = PoolKey("10de", "1eb8", "type-PCI", None, None)
        with db.reader() as s:
            stale = db_pci._read_devices(s, node_id)
        with db.writer() as s:
            assert db_pci.claim_devices(s, node_id, "i1", [("r1", gpu, 1)])
        monkeypatch.setattr(db_pci, "_read_devices", lambda *a, **kw: stale)
        with pytest.raises(PciClaimConflict), db.writer() as s:
            db_pci.claim_devices(s, node_id, "i2", [("r2", gpu, 1)])
        with db.reader() as s:
            owners = s.execute(sa.select(models.PciDevice.instance_uuid).where(
                models.PciDevice.status == "claimed")).scalars().all()
        assert owners == ["i1"]

    def test_stale_read_cannot_claim_pf_under_a_new_vf_claim(self, node, monkeypatch):
        db, node_id = node
        with db.reader() as s:
            stale = db_pci._read_devices(s, node_id)
        with db.writer() as s:
            db_pci.claim_devices(s, node_id, "i1", [("r1", vf_key(0), 1)])
        monkeypatch.setattr(db_pci, "_read_devices", lambda *a, **kw: stale)
        with pytest.raises(PciClaimConflict), db.writer() as s:
            db_pci.claim_devices(s, node_id, "i2", [("r2", pf_key(0), 1)])

    def test_concurrent_claims_for_the_last_device(self, node):
        db, node_id = node
        gpu = PoolKey("10de", "1eb8", "type-PCI", None, None)
        barrier = threading.Barrier(8)
        outcome: dict[str, object] = {}

        def claim(n):
            instance = f"i{n}"
            barrier.wait()
            try:
                with db.writer() as s:
                    outcome[instance] = db_pci.claim_devices(s, node_id, instance,
                                                             [("r", gpu, 1)])
            except PciClaimConflict:
                outcome[instance] = "conflict"
            except Exception as exc:
                outcome[instance] = type(exc).__name__

        threads = [threading.Thread(target=claim, args=(n,)) for n in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        winners = [i for i, v in outcome.items() if isinstance(v, list)]
        assert len(winners) == 1, outcome
        losers = {v for i, v in outcome.items() if i not in winners}
        # MariaDB makes the others wait on the row lock, then they find the
        # device taken; SQLite writers of one process take turns (db.api), so
        # none is refused with "database is locked".
        assert losers == {"conflict"}, outcome
        with db.reader() as s:
            owners = s.execute(sa.select(models.PciDevice.instance_uuid).where(
                models.PciDevice.status == "claimed")).scalars().all()
        assert owners == winners

    def test_matching_picks_feed_the_claim(self, node):
        db, node_id = node
        with db.reader() as s:
            pools = db_pci.pools_for_nodes(s, [node_id])[node_id]
        reqs = [PciRequest(3, ({"vendor_id": "8086", "product_id": "154c"},), "nic",
                           "preferred", "r-nic")]
        new_pools, picks = apply_requests(pools, reqs, numa_cells={1})
        with db.writer() as s:
            addrs = db_pci.claim_devices(
                s, node_id, "i1", [(reqs[r].request_id, key, n) for r, key, n in picks])
        assert len(addrs) == 3
        with db.reader() as s:
            after = db_pci.pools_for_nodes(s, [node_id])[node_id]
        # Both PFs now have a VF in use, so they left their pools too.
        assert after == tuple(p for p in new_pools if p.key.dev_type != "type-PF")


class TestRelease:
    def test_release_restores_everything(self, node):
        db, node_id = node
        before = statuses(db, node_id)
        with db.writer() as s:
            db_pci.claim_devices(s, node_id, "i1", [("r1", vf_key(0), 2), ("r2", pf_key(1), 1)])
        with db.writer() as s:
            released = db_pci.release_devices(s, "i1")
        assert released == sorted([PF1, "0000:81:02.1", "0000:81:02.2"])
        assert statuses(db, node_id) == before
        with db.writer() as s:
            assert db_pci.release_devices(s, "i1") == []

    def test_release_keeps_pf_while_a_sibling_is_used(self, node):
        db, node_id = node
        with db.writer() as s:
            db_pci.claim_devices(s, node_id, "i1", [("r1", vf_key(0), 1)])
            db_pci.claim_devices(s, node_id, "i2", [("r2", vf_key(0), 1)])
        with db.writer() as s:
            db_pci.release_devices(s, "i1")
        st = statuses(db, node_id)
        assert st[PF0] == "unclaimable"
        with db.writer() as s:
            db_pci.release_devices(s, "i2")
        assert statuses(db, node_id)[PF0] == "available"


class TestReport:
    def generation(self, db, node_id):
        with db.reader() as s:
            return s.get(models.ComputeNode, node_id).generation

    def test_report_is_idempotent(self, node):
        db, node_id = node
        gen = self.generation(db, node_id)
        with db.writer() as s:
            assert db_pci.report_devices(s, node_id, sriov_devices()).empty
        assert self.generation(db, node_id) == gen

    def test_report_updates_removes_and_keeps_claims(self, node):
        db, node_id = node
        gen = self.generation(db, node_id)
        with db.writer() as s:
            db_pci.claim_devices(s, node_id, "i1", [("r1", pf_key(1), 1)])
        reported = [d for d in sriov_devices() if d.address not in (PF1, "0000:03:00.0")]
        reported.append(PciDevice("0000:04:00.0", "10de", "1eb8", "type-PCI", None, 1))
        with db.writer() as s:
            plan = db_pci.report_devices(s, node_id, reported)
        assert [d.address for d in plan.add] == ["0000:04:00.0"]
        assert plan.remove == ("0000:03:00.0",)
        assert plan.warnings and PF1 in plan.warnings[0]
        st = statuses(db, node_id)
        assert st[PF1] == "claimed" and st["0000:03:00.0"] == "removed"
        assert st["0000:82:02.1"] == "unclaimable"
        assert self.generation(db, node_id) == gen + 1
        with db.reader() as s:
            gpus = [p for p in db_pci.pools_for_nodes(s)[node_id] if p.key.vendor_id == "10de"]
        assert gpus == [PciPool(PoolKey("10de", "1eb8", "type-PCI", 1, None), 1)]


def test_concurrent_claim_and_release_keep_the_pf_rule(node):
    """A release racing a sibling's claim never leaves a PF free under a used VF."""
    from pci.device import cascade_status

    db, node_id = node

    def run(fn):
        try:
            with db.writer() as s:
                fn(s)
        except PciClaimConflict:
            pass
        except Exception:  # SQLite may refuse a writer; the transaction rolled back
            pass

    for round_ in range(10):
        with db.writer() as s:
            db_pci.claim_devices(s, node_id, f"a{round_}", [("r", vf_key(0), 1)])
        # Both transactions open at once, then race. (SQLite writers of one
        # process take turns in db.api, so there they simply run one after the
        # other: no barrier, or the second would wait for the first forever.)
        barrier = threading.Barrier(2) if db.dialect != "sqlite" else None

        def release(s, round_=round_, barrier=barrier):
            if barrier:
                barrier.wait()
            db_pci.release_devices(s, f"a{round_}")

        def claim(s, round_=round_, barrier=barrier):
            if barrier:
                barrier.wait()
            db_pci.claim_devices(s, node_id, f"b{round_}", [("r", vf_key(0), 1)])

        threads = [threading.Thread(target=run, args=(fn,)) for fn in (release, claim)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        with db.reader() as s:
            assert cascade_status(db_pci.devices_for_node(s, node_id)) == {}
        with db.writer() as s:
            db_pci.release_devices(s, f"a{round_}")
            db_pci.release_devices(s, f"b{round_}")
    assert statuses(db, node_id)[PF0] == "available"


TRUSTED = (("trusted", "true"),)


def tagged_devices() -> list[PciDevice]:
    """One PF with two VFs: 02.1 untagged, 02.2 tagged trusted."""
    return [PciDevice(PF0, "8086", "1572", "type-PF", None, 0),
            PciDevice("0000:81:02.1", "8086", "154c", "type-VF", PF0, 0, "physnet1"),
            PciDevice("0000:81:02.2", "8086", "154c", "type-VF", PF0, 0, "physnet1",
                      tags=TRUSTED)]


class TestTags:
    @pytest.fixture
    def tagged(self, any_db):
        node_id = add_node(any_db, "compute-t")
        with any_db.writer() as s:
            db_pci.report_devices(s, node_id, tagged_devices())
        return any_db, node_id

    def test_tags_are_stored_as_canonical_json_and_read_back(self, tagged):
        db, node_id = tagged
        with db.reader() as s:
            assert db_pci.devices_for_node(s, node_id) == tagged_devices()
            stored = dict(s.execute(sa.select(models.PciDevice.address, models.PciDevice.tags)
                                    .where(models.PciDevice.compute_node_id == node_id)).all())
        assert stored == {PF0: None, "0000:81:02.1": None,
                          "0000:81:02.2": '{"trusted":"true"}'}

    def test_tagged_and_untagged_devices_are_two_pools(self, tagged):
        db, node_id = tagged
        with db.reader_connection() as conn:
            pools = db_pci.pools_for_nodes(conn, [node_id])[node_id]
            assert db_pci.pools_for_nodes(conn)[node_id] == pools
        with db.reader() as s:
            assert pools == pools_from_devices(db_pci.devices_for_node(s, node_id))
        assert [(p.key.dev_type, p.key.tags, p.count) for p in pools] == [
            ("type-VF", (), 1), ("type-VF", TRUSTED, 1), ("type-PF", (), 1)]

    def test_tag_case_is_kept_apart_by_the_group_by(self, any_db):
        """MariaDB's default collation folds case: the column compares bytes."""
        node_id = add_node(any_db, "compute-c")
        devs = tagged_devices()
        devs[1] = dataclasses.replace(devs[1], tags=(("trusted", "True"),))
        with any_db.writer() as s:
            db_pci.report_devices(s, node_id, devs)
        with any_db.reader() as s:
            pools = db_pci.pools_for_nodes(s, [node_id])[node_id]
            claimed = db_pci.claim_devices(s, node_id, "i1",
                                           [("r", p.key, 1) for p in pools
                                            if p.key.dev_type == "type-VF"])
        assert len(claimed) == 2

    def test_a_tagged_pick_claims_the_tagged_device(self, tagged):
        db, node_id = tagged
        with db.reader() as s:
            pools = db_pci.pools_for_nodes(s, [node_id])[node_id]
        reqs = [PciRequest(1, ({"vendor_id": "8086", "trusted": "true"},), "t", "legacy", "r")]
        _, picks = apply_requests(pools, reqs)
        with db.writer() as s:
            assert db_pci.claim_devices(s, node_id, "i1", [("r", k, n) for _, k, n in picks]) \
                == ["0000:81:02.2"]
        with db.reader() as s:
            left = db_pci.pools_for_nodes(s, [node_id])[node_id]
        assert [(p.key.tags, p.count) for p in left] == [((), 1)]
        with pytest.raises(PciDoesNotFit):
            apply_requests(left, reqs)

    def test_a_tag_change_is_reported_and_kept_on_a_claimed_device(self, tagged):
        db, node_id = tagged
        with db.writer() as s:
            db_pci.claim_devices(s, node_id, "i1", [("r", PoolKey("8086", "154c", "type-VF",
                                                                  0, "physnet1", TRUSTED), 1)])
        retagged = [dataclasses.replace(d, tags=(("trusted", "false"),)) for d in
                    tagged_devices()]
        with db.writer() as s:
            plan = db_pci.report_devices(s, node_id, retagged)
        assert {d.address for d in plan.update} == {PF0, "0000:81:02.1", "0000:81:02.2"}
        with db.reader() as s:
            devs = {d.address: d for d in db_pci.devices_for_node(s, node_id)}
        assert devs["0000:81:02.2"].status == "claimed"
        assert devs["0000:81:02.2"].tags == (("trusted", "false"),)

    def test_the_covering_index_serves_the_group_by(self, tagged):
        db, node_id = tagged
        with db.reader_connection() as conn:
            for stmt in (db_pci._POOLS, db_pci._POOLS_BY_NODE.params(ids=[node_id])):
                sql = str(stmt.compile(conn, compile_kwargs={"literal_binds": True,
                                                             "render_postcompile": True}))
                if conn.dialect.name == "sqlite":
                    plan = " ".join(str(r[-1]) for r in conn.exec_driver_sql(
                        "EXPLAIN QUERY PLAN " + sql))
                    assert "COVERING INDEX pci_devices_" in plan, plan
                    assert "TEMP B-TREE" not in plan, plan
                else:
                    rows = conn.exec_driver_sql("EXPLAIN " + sql).mappings().all()
                    assert all("Using index" in (r["Extra"] or "") for r in rows), rows
                    assert all("temporary" not in (r["Extra"] or "") for r in rows), rows
