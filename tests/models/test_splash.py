"""The Pallas splash-attention path, run in Pallas's interpreter on the host, against the plain
concatenate-then-softmax reference, on one device and under shard_map on a mesh, and through a
whole judge against XLA's attention."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from jax.sharding import NamedSharding, PartitionSpec as P

from jaxjudge.models import config as C
from jaxjudge.models import decoder as D
from jaxjudge.models import sharding as S
from jaxjudge.models.attention import Attention, KeyBlock, reference_attention, segmented_attention
from jaxjudge.models.splash import SplashKernel, count_flops, splash_attention, supported, use_kernel

from test_attention import B, H, N, T, _blocks  # noqa: E402

INTERPRET = SplashKernel(interpret=True)


def _real(x, mask):
    return np.asarray(x)[np.asarray(mask)]  # [real queries, N, H]


@pytest.mark.parametrize(
    "prefix, cap, pad_own, groups",
    [
        (0, None, False, 1),  # causal self-attention (a prefix's prefill)
        (0, 0.5, True, 1),  # soft-capped, padded rows (left and right)
        (7, None, False, 1),  # one shared prefix for every row
        (7, 1.5, True, 2),  # two prefixes with padding slots, two rows each, capped
        (7, None, True, 4),  # a prefix per row
    ],
)
def test_splash_matches_reference(prefix, cap, pad_own, groups):
    rng = np.random.default_rng(prefix * 10 + groups)
    blocks, q_pos, mask = _blocks(rng, prefix=prefix, pad_own=pad_own, groups=groups)
    q = jnp.asarray(rng.normal(size=(B, T, N, H)), jnp.float32)
    kw = dict(scaling=H ** -0.5, window=None, cap=cap, dtype=jnp.float32)
    got = jax.jit(lambda q, b: splash_attention(q, b, q_pos, spec=INTERPRET, **kw))(q, blocks)
    want = reference_attention(q, blocks, q_pos, **kw)
    assert got.shape == (B, T, N, H) and bool(jnp.isfinite(got).all())
    # Real queries only: a padding query sees the padding of its own row here, every slot in
    # the reference (garbage either way, never read).
    np.testing.assert_allclose(_real(got, mask), _real(want, mask), atol=2e-6, rtol=1e-5)


def test_a_prefix_with_no_valid_slot_contributes_nothing():
    """A group whose prefix is all padding: its rows attend to their own tokens only."""
    rng = np.random.default_rng(3)
    blocks, q_pos, mask = _blocks(rng, prefix=5, groups=2)
    pre = blocks[0]
    valid = np.asarray(pre.valid_bs).copy()
    valid[1] = False
    blocks[0] = KeyBlock(pre.keys, pre.values, jnp.asarray(valid), pre.positions_bs, shared=True)
    q = jnp.asarray(rng.normal(size=(B, T, N, H)), jnp.float32)
    kw = dict(scaling=0.5, window=None, cap=None, dtype=jnp.float32)
    got = splash_attention(q, blocks, q_pos, spec=INTERPRET, **kw)
    own_only = reference_attention(q[2:], [KeyBlock(*(x[2:] for x in (blocks[1].keys, blocks[1].values,
                                                                     blocks[1].valid_bs, blocks[1].positions_bs)),
                                                    causal=True)], q_pos[2:], **kw)
    np.testing.assert_allclose(np.asarray(got)[2:], np.asarray(own_only), atol=2e-6, rtol=1e-5)
    np.testing.assert_allclose(np.asarray(got), np.asarray(reference_attention(q, blocks, q_pos, **kw)),
                               atol=2e-6, rtol=1e-5)


@pytest.mark.parametrize("prefix, groups", [(0, 1), (7, 2)])
def test_a_window_runs_the_kernel_only_where_it_hides_nothing(prefix, groups):
    """Positions here span at most 12, so a window of 13 hides nothing: the kernel runs (every
    output is the unwindowed kernel's, padding queries' included, which XLA's attention computes
    differently). A window of 3 cuts: XLA's masked attention runs, and gives the windowed
    reference, which the kernel alone does not."""
    rng = np.random.default_rng(11 + groups)
    blocks, q_pos, mask = _blocks(rng, prefix=prefix, pad_own=True, groups=groups)
    span = int(np.asarray(q_pos).max())
    assert span <= 12
    q = jnp.asarray(rng.normal(size=(B, T, N, H)), jnp.float32)
    kw = dict(scaling=H ** -0.5, cap=1.5, dtype=jnp.float32)
    fn = jax.jit(lambda q, b, w: splash_attention(q, b, q_pos, window=w, spec=INTERPRET, **kw))
    kernel_alone = np.asarray(jax.jit(lambda q, b: splash_attention(q, b, q_pos, window=None, spec=INTERPRET,
                                                                     **kw))(q, blocks))
    xla = np.asarray(segmented_attention(q, blocks, q_pos, window=span + 1, **kw))
    assert np.abs(kernel_alone - xla)[~mask].max() > 1e-3  # the padding queries tell them apart
    np.testing.assert_allclose(np.asarray(fn(q, blocks, span + 1)), kernel_alone, atol=1e-6, rtol=1e-6)
    cut = fn(q, blocks, 3)
    want = reference_attention(q, blocks, q_pos, window=3, **kw)
    np.testing.assert_allclose(_real(cut, mask), _real(want, mask), atol=2e-6, rtol=1e-5)
    assert np.abs(_real(kernel_alone, mask) - _real(want, mask)).max() > 1e-2


def test_what_the_kernel_serves():
    rng = np.random.default_rng(0)
    own_only, _, _ = _blocks(rng)
    with_prefix, _, _ = _blocks(rng, prefix=4)
    with_past, _, _ = _blocks(rng, prefix=4, past=3)
    assert supported(own_only, None) and supported(with_prefix, None)
    assert supported(own_only, 8) and supported(with_prefix, 8)  # a window: checked on the device
    assert not supported(with_past, None)  # a per-row cache (decoding): the XLA path
    with pytest.raises(ValueError, match="one shared prefix"):
        splash_attention(jnp.zeros((B, T, N, H)), with_past, None, scaling=1.0, window=None, cap=None,
                         dtype=jnp.float32, spec=INTERPRET)
    with pytest.raises(ValueError, match="block_kv"):
        SplashKernel(block_kv=64)
    # Blocks of other sizes: the tokens padded to whole blocks of both (256 here).
    rng = np.random.default_rng(5)
    blocks, q_pos, mask = _blocks(rng, prefix=4, pad_own=True, groups=2)
    q = jnp.asarray(rng.normal(size=(B, T, N, H)), jnp.float32)
    kw = dict(scaling=0.5, window=None, cap=None, dtype=jnp.float32)
    got = splash_attention(q, blocks, q_pos, spec=SplashKernel(interpret=True, block_q=64, block_kv=256), **kw)
    np.testing.assert_allclose(_real(got, mask), _real(reference_attention(q, blocks, q_pos, **kw), mask),
                               atol=2e-6, rtol=1e-5)
    with pytest.raises(ValueError, match="block_q"):
        SplashKernel(block_q=12)


@pytest.mark.skipif(jax.device_count() < 4, reason="needs 4 (host) devices")
@pytest.mark.parametrize("groups, window", [(1, None), (2, None), (2, 4), (2, 64)])
def test_splash_on_a_mesh_gathers_nothing(groups, window):
    """Under shard_map: rows (and their prefix groups) over data, heads over model; the same
    output, no all-gather in the compiled program, the output laid out as the queries (with a
    window, each data shard chooses the kernel or XLA's attention for its own rows)."""
    mesh = S.make_mesh(data=2, model=2, devices=jax.devices()[:4])
    rng = np.random.default_rng(groups)
    blocks, q_pos, mask = _blocks(rng, prefix=6, pad_own=True, groups=groups)
    q = jnp.asarray(rng.normal(size=(B, T, N, H)), jnp.float32)
    kw = dict(scaling=0.5, window=window, cap=None, dtype=jnp.float32)
    want = reference_attention(q, blocks, q_pos, **kw)

    def put(x, *spec):
        return jax.device_put(x, NamedSharding(mesh, P(*spec)))

    heads = ("data", None, "model", None)
    pre, own = blocks
    pre_rows = "data" if groups > 1 else None
    placed = [KeyBlock(put(pre.keys, pre_rows, None, "model", None), put(pre.values, pre_rows, None, "model", None),
                       put(pre.valid_bs, pre_rows, None), pre.positions_bs, shared=True),
              KeyBlock(put(own.keys, *heads), put(own.values, *heads), put(own.valid_bs, "data", None),
                       put(own.positions_bs, "data", None), causal=True)]
    fn = jax.jit(lambda q, b: splash_attention(q, b, q_pos, spec=SplashKernel(mesh=mesh, interpret=True), **kw))
    got = fn(put(q, *heads), placed)
    np.testing.assert_allclose(_real(got, mask), _real(want, mask), atol=2e-6, rtol=1e-5)
    assert got.sharding.spec == P(*heads)
    assert "all-gather" not in fn.lower(put(q, *heads), placed).compile().as_text()


def _primitives(jaxpr) -> set[str]:
    """Every primitive in a jaxpr and the jaxprs nested in its equations (scan bodies, pjit, ...)."""
    jaxpr = getattr(jaxpr, "jaxpr", jaxpr)
    found = set()
    for eqn in jaxpr.eqns:
        found.add(eqn.primitive.name)
        for value in eqn.params.values():
            for sub in value if isinstance(value, (list, tuple)) else [value]:
                if hasattr(sub, "eqns") or hasattr(getattr(sub, "jaxpr", None), "eqns"):
                    found |= _primitives(sub)
    return found


def _uses_kernel(*args) -> bool:
    return "pallas_call" in _primitives(jax.make_jaxpr(D.forward, static_argnums=0)(*args))


def _judge_pair(cfg):
    model = D.Decoder(cfg, rngs=nnx.Rngs(0), dtype="float32", param_dtype="float32")
    graphdef, state = nnx.split(model)
    splashed = use_kernel(nnx.merge(graphdef, state), INTERPRET)
    return model, splashed


@pytest.mark.parametrize("name", ["llama", "gemma2_capped", "gemma2_window_cuts", "gemma2_window_wide"])
def test_a_judge_reads_the_same_through_splash(name):
    """Prefill of two prefixes, their rows read against them, then greedy steps from a per-row
    cache (the XLA path again): every logit as with XLA's attention. Gemma 2's windowed first
    layer with a window of 4 (cut: XLA's attention inside the kernel's `lax.cond`) and of 64
    (wider than these 15 positions: the kernel)."""
    cfg = {"llama": lambda: C.LlamaConfig.tiny(),
           "gemma2_capped": lambda: C.Gemma2Config.tiny(sliding_window=None, sliding_layers=(False, False),
                                                        attn_logit_softcapping=3.0),
           "gemma2_window_cuts": lambda: C.Gemma2Config.tiny(attn_logit_softcapping=3.0),
           "gemma2_window_wide": lambda: C.Gemma2Config.tiny(sliding_window=64, attn_logit_softcapping=3.0)}[name]()
    assert cfg.layer_window(1) is None
    assert cfg.layer_window(0) == {"gemma2_window_cuts": 4, "gemma2_window_wide": 64}.get(name)
    xla, spl = _judge_pair(cfg)
    assert {m.kernel for _, m in nnx.iter_graph(spl) if isinstance(m, Attention)} == {INTERPRET}
    assert {m.kernel for _, m in nnx.iter_graph(xla) if isinstance(m, Attention)} == {None}
    rng = np.random.default_rng(7)
    prefixes = [rng.integers(0, cfg.vocab_size, n).tolist() for n in (9, 5)]
    rows = [rng.integers(0, cfg.vocab_size, n).tolist() for n in (4, 6, 1, 3)]
    pt, pm = D.pad_batch(prefixes, side="right", length=10)
    tt, tm = D.pad_batch(rows, side="right", length=6)
    out = {}
    for key, model in (("xla", xla), ("splash", spl)):
        gd, st = nnx.split(model)
        prefill = (gd, st, jnp.asarray(pt), jnp.asarray(pm), jnp.tile(jnp.arange(10), (2, 1)), None,
                   D.init_cache(cfg, 2, 16, jnp.float32), None)
        # Through the kernel exactly where it serves: the prefill and the rows read against the
        # prefixes (the scoring step), not the steps through a per-row cache.
        assert _uses_kernel(*prefill) == (key == "splash")
        pre_logits, prefix = D.forward(*prefill)
        read = (gd, st, jnp.asarray(tt), jnp.asarray(tm), jnp.tile(jnp.arange(6), (4, 1)), None, None, prefix)
        assert _uses_kernel(*read) == (key == "splash")
        logits, _ = D.forward(*read)
        _, row_cache = D.forward(gd, st, jnp.asarray(tt), jnp.asarray(tm), jnp.zeros((4, 1), jnp.int32), None,
                                 D.init_cache(cfg, 4, 8, jnp.float32), prefix)
        step = (gd, st, jnp.asarray([[3], [5], [7], [11]], jnp.int32), jnp.ones((4, 1), bool),
                jnp.zeros((4, 1), jnp.int32), None, row_cache, prefix)
        assert not _uses_kernel(*step)
        step_logits, _ = D.forward(*step)
        out[key] = [np.asarray(x) for x in (pre_logits, logits, step_logits)]
    for a, b, sel in zip(out["xla"], out["splash"], (np.asarray(pm), np.asarray(tm), None)):
        if sel is not None:
            a, b = a[sel], b[sel]
        np.testing.assert_allclose(b, a, atol=2e-5, rtol=1e-5)

def test_use_kernel_refuses_what_is_not_a_kernel():
    model = D.Decoder(C.LlamaConfig.tiny(), rngs=nnx.Rngs(0))
    with pytest.raises(TypeError, match="SplashKernel"):
        use_kernel(model, "splash")
    with pytest.raises(ValueError, match="no attention layer"):
        use_kernel(nnx.Linear(2, 2, rngs=nnx.Rngs(0)), INTERPRET)
    assert use_kernel(use_kernel(model, INTERPRET), None) is model


def test_kernel_flops_are_counted_from_the_blocks_it_computes():
    """`count_flops` by hand: 128-slot blocks, 4 flops per (query, key, channel) in a block."""
    b, t, n, k, h, p, s = 4, 200, 2, 1, 8, 2, 300
    z = jnp.zeros
    own = KeyBlock(z((b, t, k, h)), z((b, t, k, h)), jnp.ones((b, t), bool), z((b, t), jnp.int32), causal=True)
    pre = KeyBlock(z((p, s, k, h)), z((p, s, k, h)), jnp.ones((p, s), bool), z((p, s), jnp.int32), shared=True)
    block = 4 * 128 * 128 * h * n
    # own: 200 tokens padded to 256 = 2 query blocks; causal: block 0 sees key block 0, block 1
    # sees 0 and 1: 3 per row. Prefix: a group's 2 rows end to end = 512 queries = 4 blocks,
    # against 300 slots padded to 384 = 3 blocks: 12 per group.
    for blocks, want in (([own], b * 3 * block), ([pre, own], (b * 3 + p * 12) * block)):
        with count_flops() as box:
            jax.eval_shape(lambda q, bl: splash_attention(q, bl, None, scaling=1.0, window=None, cap=None,
                                                          dtype=jnp.float32, spec=INTERPRET), z((b, t, n, h)), blocks)
        assert box[0] == want
    jax.eval_shape(lambda q, bl: splash_attention(q, bl, None, scaling=1.0, window=None, cap=None, dtype=jnp.float32,
                                                  spec=INTERPRET), z((b, t, n, h)), [pre, own])
    assert box[0] == want  # nothing counted once the block is left


def test_a_judge_switches_its_attention():
    """`Judge.use_attention`: the same reads through the kernel and back; a bad kind is named."""
    from test_models_cache import make_judge  # noqa: PLC0415

    judge = make_judge(C.LlamaConfig.tiny())
    rng = np.random.default_rng(2)
    prefix = rng.integers(0, 37, 11).tolist()
    rows = [rng.integers(0, 37, n).tolist() for n in (3, 5)]
    tokens, mask = D.pad_batch(rows, length=5)
    read = np.tile(np.arange(5), (2, 1))

    def reads():
        _, pre = judge.prefill(np.asarray([prefix]))
        logits, _ = judge.extend(tokens, mask, read_idx_br=read, prefix=pre)
        return np.asarray(logits)[np.asarray(mask)]

    xla = reads()
    assert judge.use_attention("splash", interpret=True) is judge and judge.attention == "splash"
    assert {m.kernel for _, m in nnx.iter_graph(judge.model) if isinstance(m, Attention)} == {INTERPRET}
    np.testing.assert_allclose(reads(), xla, atol=2e-5, rtol=1e-5)
    judge.use_attention("xla")
    np.testing.assert_array_equal(reads(), xla)
    with pytest.raises(ValueError, match="'xla' or 'splash'"):
        judge.use_attention("flash")


def test_the_kernel_is_refused_off_a_tpu():
    from test_models_cache import make_judge  # noqa: PLC0415

    judge = make_judge(C.LlamaConfig.tiny())
    with pytest.raises(ValueError, match="runs on a TPU, and this judge's parameters are on cpu"):
        judge.use_attention("splash")
    assert judge.attention == "xla"
