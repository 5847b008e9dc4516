"""The cost model of `jaxjudge aot` (`jaxjudge.aot.cost`): the topology table, replica groups read
from HLO, and one collective's ICI time against a hand computation."""

from __future__ import annotations

import pytest

from jaxjudge.aot import cost as C

MIB16 = 16 * 2**20  # bytes of the all-reduced array per chip


def test_v5e_2x4_is_the_single_host_eight_chip_slice_without_wraparound():
    t = C.topology("v5e:2x4")
    assert t.chips == 8 and t.shape == (2, 4) and t.host_bounds == (2, 4, 1) and t.hosts == 1
    assert t.wraparound == (False, False) and t.slices == 1
    assert C.topology("v5e:4x4").host_bounds == (2, 2, 1) and C.topology("v5e:4x4").hosts == 4
    assert C.topology("v5e:16x16").wraparound == (True, True)
    assert C.topology("v5p:4x4x4").wraparound == (True, True, True)
    assert C.topology("v5p:2x2x1").wraparound == (False, False, False)
    assert C.topology("v5p:2x2x1").host_bounds == (2, 2, 1)
    assert "v6e:2x4" in C.TOPOLOGIES


@pytest.mark.parametrize("name, needle", [("v9x:2x4", "no figures for 'v9x'"), ("v5e:2xfour", "like 2x4"),
                                          ("v5p:2x4", "3 dimensions")])
def test_unknown_topologies_are_named(name, needle):
    with pytest.raises(ValueError, match=needle):
        C.topology(name)


def test_all_reduce_over_a_line_of_four_v5e_chips_by_hand():
    # v5e 2x4: the model axis of 4 chips runs along the second dimension (ids 0, 2, 4, 6 with
    # the first dimension fastest), a line (no wraparound): one ring embedded in the line at
    # 50 GB/s per link and direction (1,600 Gbps / 8 / 4 links). 2 (n - 1) / n x S / B + 6 steps.
    t = C.topology("v5e:2x4")
    assert t.links.bandwidth == 50e9
    want = 2 * 3 / 4 * MIB16 / 50e9 + 6 * 1e-6  # 503.3 us + 6 us
    assert C.collective_seconds("all-reduce", MIB16, [0, 2, 4, 6], t) == pytest.approx(want, rel=1e-12)
    assert want == pytest.approx(509.316e-6, rel=1e-5)


def test_all_reduce_over_a_ring_of_four_v5p_chips_by_hand():
    # v5p 4x4x4: an axis of 4 chips with its wraparound link is a ring: two counter-rotating
    # rings at 100 GB/s per link and direction (4,800 Gbps / 8 / 6 links), each half the data.
    t = C.topology("v5p:4x4x4")
    assert t.links.bandwidth == 100e9
    want = 2 * 3 / 4 * MIB16 / (2 * 100e9) + 6 * 1e-6  # 125.8 us + 6 us
    assert C.collective_seconds("all-reduce", MIB16, [0, 1, 2, 3], t) == pytest.approx(want, rel=1e-12)
    assert want == pytest.approx(131.830e-6, rel=1e-5)


def test_gather_scatter_and_a_group_over_two_dimensions_by_hand():
    t = C.topology("v5e:2x4")
    line4 = [0, 2, 4, 6]
    # all-gather of a 16 MiB result: (n - 1) / n of it crosses each chip's link, 3 steps
    assert C.collective_seconds("all-gather", MIB16, line4, t) == pytest.approx(0.75 * MIB16 / 50e9 + 3e-6)
    # reduce-scatter to a 4 MiB result: the 16 MiB input, (n - 1) / n of it, 3 steps
    assert C.collective_seconds("reduce-scatter", MIB16 / 4, line4, t) == pytest.approx(0.75 * MIB16 / 50e9 + 3e-6)
    # all 8 chips: along the first dimension (2, a line) on S, then the second (4) on S / 2
    want = (2 * 1 / 2 * MIB16 + 2 * 3 / 4 * MIB16 / 2) / 50e9 + (2 + 6) * 1e-6
    assert C.collective_seconds("all-reduce", MIB16, list(range(8)), t) == pytest.approx(want)
    assert C.collective_seconds("all-reduce", MIB16, [3], t) == 0.0


@pytest.mark.parametrize("line, want", [
    ("%ar = f32[8]{0} all-reduce(%x), channel_id=1, replica_groups={{0,2,4,6},{1,3,5,7}}, to_apply=%add",
     [[0, 2, 4, 6], [1, 3, 5, 7]]),
    ("%ar = f32[8]{0} all-reduce(%x), channel_id=1, replica_groups=[2,4]<=[8], use_global_device_ids=true",
     [[0, 1, 2, 3], [4, 5, 6, 7]]),
    ("%ag = f32[8]{0} all-gather(%x), replica_groups=[4,2]<=[2,4]T(1,0), dimensions={0}",
     [[0, 4], [1, 5], [2, 6], [3, 7]]),
    ("%ar = f32[8]{0} all-reduce(%x), to_apply=%add", None),
])
def test_replica_groups_both_spellings(line, want):
    assert C.replica_groups(line) == want


def test_group_dims_names_the_axis_the_group_spans():
    t = C.topology("v5e:2x4")
    coords = [t.coords(i) for i in range(8)]
    assert C.group_dims([0, 2, 4, 6], coords) == [1]
    assert C.group_dims([0, 1], coords) == [0]
    assert C.group_dims(list(range(8)), coords) == [0, 1]


def test_accelerator_types_name_the_slices():
    assert C.topology("v5e:2x4").accelerator_type == "v5litepod-8"
    assert C.topology("v6e:4x4").accelerator_type == "v6e-16"
    assert C.topology("v5p:2x2x1").accelerator_type == "v5p-8"  # 4 chips, 8 TensorCores
