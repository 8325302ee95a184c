"""madpipe.torch across torch releases: the private pipelining names it needs, what stands in for
those an older release lacks, and the greetings torch 2.11 sends a neighbouring stage on the
same rank."""

import types

import pytest
import torch.distributed.pipelining.schedules as schedules

from madpipe.torch import _pipelining_api, pipeline


def test_a_release_without_explicit_send_waits_lowers_without_them(monkeypatch):
    monkeypatch.delattr(schedules, "_add_wait_send", raising=False)
    api = _pipelining_api.load_pipelining_api()
    actions = {0: ["0F0", "0B0"]}
    assert api._add_wait_send(actions) is actions
    assert api._add_send_recv is schedules._add_send_recv


def test_a_release_without_a_required_name_is_refused_with_its_version(monkeypatch):
    monkeypatch.delattr(schedules, "_add_send_recv")
    with pytest.raises(ImportError, match=r"schedules\._add_send_recv .*which torch \S+ does not "
                                          r"have \(madpipe.torch is tested with torch 2\.11, 2\.15\)"):
        _pipelining_api.load_pipelining_api()


def test_greetings_to_a_stage_on_the_same_rank_are_dropped():
    def greetings():
        return [types.SimpleNamespace(group_peer=peer, kind=kind)
                for peer, kind in ((0, "recv"), (1, "send"), (0, "send"), (1, "recv"))]

    stage = types.SimpleNamespace(group_rank=0, _get_init_p2p_neighbors_ops=greetings)
    pipeline._skip_greetings_to_itself(stage)
    kept = stage._get_init_p2p_neighbors_ops()
    assert [(op.group_peer, op.kind) for op in kept] == [(1, "send"), (1, "recv")]


def test_a_release_without_greetings_is_left_alone():
    stage = types.SimpleNamespace(group_rank=0)
    pipeline._skip_greetings_to_itself(stage)
    assert not hasattr(stage, "_get_init_p2p_neighbors_ops")
