"""Gemma-3-270M (base, Q4_K_M GGUF) against transformers loading the same file.

The file comes from ``../shared/models/get_models.sh DIR gemma3`` (about 250 MB); the tests skip
when it is absent and are marked slow and large. One load of each side serves every test:
transformers' GGUF loader (torch, float32, eager attention) is the reference for the tensors
(dequantised Q4_K / Q5_0 / Q6_K / Q8_0, norms stored as ``1 + w``), the config, the tokenizer ids
and the logits, on prompts both shorter and longer than the 512-token sliding window.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.arrays import assert_same_array
from jaxjudge.models import gguf as jg

# Its time goes into running programs (see tests/conftest.py): full XLA optimisation.
pytestmark = pytest.mark.optimized

FILE = "gemma-3-270m-q4_k_m.gguf"

_WORDS = ("the judge reads a summary of the article and rates its coherence from one to five "
          "while the annotators disagree about fluency relevance and consistency of facts").split()


def _long_text(n_words: int, seed: int) -> str:
    rng = np.random.default_rng(seed)
    return " ".join(rng.choice(_WORDS, n_words))


PROMPTS = [
    "The capital of France is",
    "Rate the coherence of this summary from 1 to 5.\nSummary: The cat sat on the mat.\nScore:",
    "def square(x):\n    return x ** 2  # the square\n\n\nprint(square(",
    # Longer than the 512-token window: the local layers no longer see the start.
    "Article: " + _long_text(700, 0) + "\nRate the summary from 1 to 5.\nScore:",
    "Document: " + _long_text(900, 1) + "\n\nQuestion: is the summary consistent? Answer:",
]


def _reads(n: int) -> list[int]:
    """Every 61st position and the last: far past the window on the long prompts."""
    return sorted(set(range(0, n, 61)) | {n - 1})


def _forward_by_length(judge, ids_list):
    """Our logits at `_reads` of each prompt, the prompts run as two right-padded batches (the
    short ones, then those past the window) instead of one call each: two compiles of the
    18-layer judge instead of one per prompt length. Padding sits after every real token, so
    under the causal mask and the real-token positions no real position sees it."""
    out = [None] * len(ids_list)
    short = [i for i, ids in enumerate(ids_list) if len(ids) <= 512]
    for bucket in (short, [i for i in range(len(ids_list)) if i not in short]):
        if not bucket:
            continue
        width = max(len(ids_list[i]) for i in bucket)
        n_read = max(len(_reads(len(ids_list[i]))) for i in bucket)
        tokens = np.zeros((len(bucket), width), np.int32)
        mask = np.zeros((len(bucket), width), bool)
        read = np.zeros((len(bucket), n_read), np.int32)
        for row, i in enumerate(bucket):
            ids, r = ids_list[i], _reads(len(ids_list[i]))
            tokens[row, :len(ids)], mask[row, :len(ids)] = ids, True
            read[row] = r + [r[-1]] * (n_read - len(r))
        logits = np.asarray(judge.forward(tokens, mask, read))
        for row, i in enumerate(bucket):
            out[i] = logits[row, :len(_reads(len(ids_list[i])))]
    return out


@pytest.fixture(scope="module")
def gemma3():
    path = jg.gguf_dir() / FILE
    if not path.is_file():
        pytest.skip(f"{path} is absent (../shared/models/get_models.sh DIR gemma3 fetches it)")
    torch = pytest.importorskip("torch")
    import transformers

    from jaxjudge.models.judge import Judge

    ck = jg.load_gguf(path)
    ref = transformers.AutoModelForCausalLM.from_pretrained(
        str(path.parent), gguf_file=path.name, dtype=torch.float32, attn_implementation="eager")
    ref.eval()
    tok = transformers.AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    judge = Judge.from_parts(*ck, source=str(path))
    return path, ck, ref, tok, judge


@pytest.mark.slow
@pytest.mark.large
def test_gemma3_tensors_and_config_equal_transformers(gemma3):
    path, ck, ref, _, judge = gemma3
    assert set(jg.tensor_summary(path).values()) == {"Q5_0", "Q4_K", "Q6_K", "Q8_0", "F32"}
    ref_sd = {k: v.numpy() for k, v in ref.state_dict().items()}
    assert set(ck.tensors) == set(ref_sd) - {"lm_head.weight"}  # tied head
    for name, arr in ck.tensors.items():
        assert_same_array(arr, ref_sd[name], name)
    cfg, rc = judge.config, ref.config
    assert cfg.model_type == "gemma3_text" and cfg.tie_word_embeddings
    for key in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                "num_attention_heads", "num_key_value_heads", "head_dim", "sliding_window",
                "query_pre_attn_scalar"):
        assert getattr(cfg, key) == getattr(rc, key), key
    assert [cfg.layer_window(i) is not None for i in range(cfg.num_hidden_layers)] == [
        t == "sliding_attention" for t in rc.layer_types]
    assert cfg.rope_theta == rc.rope_parameters["full_attention"]["rope_theta"]
    assert cfg.sliding_rope_theta == rc.rope_parameters["sliding_attention"]["rope_theta"]


@pytest.mark.slow
@pytest.mark.large
def test_gemma3_token_ids_equal_transformers(gemma3):
    _, _, _, tok, judge = gemma3
    texts = PROMPTS + ["  two leading spaces", "tabs\tand   runs     of spaces\n\n\n",
                       "Ünïcödé façade — “quotes” ✓ 日本語 😀",
                       "<start_of_turn>user\nScore it.<end_of_turn>\n<start_of_turn>model\n"]
    for text in texts:
        assert judge.encode(text) == tok(text)["input_ids"], repr(text[:40])
    assert judge.encode("x")[0] == 2  # <bos>, as the file asks


@pytest.mark.slow
@pytest.mark.large
def test_gemma3_logits_match_transformers(gemma3):
    torch = pytest.importorskip("torch")
    _, _, ref, _, judge = gemma3
    worst = 0.0
    all_ids = [judge.encode(text) for text in PROMPTS]
    lengths = [len(ids) for ids in all_ids]
    for text, ids, ours in zip(PROMPTS, all_ids, _forward_by_length(judge, all_ids)):
        read = _reads(len(ids))
        with torch.no_grad():
            hidden = ref.model(torch.tensor([ids])).last_hidden_state[0, read]
            theirs = ref.lm_head(hidden).numpy()
        diff = float(np.abs(ours - theirs).max())
        worst = max(worst, diff)
        assert diff <= 1e-3, (text[:30], diff)
        top_ours = np.argsort(-ours, axis=-1, kind="stable")[:, :5]
        top_ref = np.argsort(-theirs, axis=-1, kind="stable")[:, :5]
        np.testing.assert_array_equal(top_ours, top_ref)
    assert sum(n > 512 for n in lengths) >= 2, lengths
    print(f"\nGemma-3-270M Q4_K_M vs transformers: max |logit diff| {worst:.2e} over prompts of "
          f"{lengths} tokens")


@pytest.mark.slow
@pytest.mark.large
def test_gemma3_models_load_bfloat16_bound(gemma3):
    """The file's tensors built as a bfloat16 judge (`Judge.from_parts(..., dtype="bfloat16")`, what
    ``models.load(file, dtype="bfloat16")`` does after reading the file; the fixture's tensors,
    not a second read): bfloat16 parameters, float32 logits, and as far from transformers' float32
    forward as transformers' own bfloat16 forward of the same file is (the rule the families' bfloat16 test
    uses): bfloat16's error depends on the prompt, the libraries' versions and the CPU, so a fixed
    bound measured once does not carry to another machine."""
    torch = pytest.importorskip("torch")
    import jax
    import jax.numpy as jnp
    import transformers
    from flax import nnx

    from jaxjudge.models.judge import Judge

    path, ck, ref, _, _ = gemma3
    judge = Judge.from_parts(*ck, dtype="bfloat16", source=str(path))
    assert judge.config.model_type == "gemma3_text"
    assert {x.dtype for x in jax.tree.leaves(nnx.state(judge.model, nnx.Param))} == {jnp.dtype(jnp.bfloat16)}
    # transformers' bfloat16 forward of the same (dequantised) tensors: a plain bfloat16 model
    # built from the reference's config and state, not a second GGUF load (its quantised kernels
    # are slow in bfloat16).
    ref16 = transformers.AutoModelForCausalLM.from_config(
        ref.config, dtype=torch.bfloat16, attn_implementation="eager")
    ref16.load_state_dict({k: v.to(torch.bfloat16) for k, v in ref.state_dict().items()})
    ref16.eval()

    def relative(x, exact):  # per read position, |error| over the position's largest logit
        return float((np.abs(x - exact).max(-1) / np.abs(exact).max(-1)).max())

    rel, rel16, agree, agree16 = [], [], [], []
    # The short prompts and one past the 512-token window (the 945-token one, read in float32
    # above, adds two minutes of bfloat16 forwards on this CPU and no other layout).
    all_ids = [judge.encode(text) for text in PROMPTS[:4]]
    for ids, ours in zip(all_ids, _forward_by_length(judge, all_ids)):
        read = _reads(len(ids))
        assert ours.dtype == np.float32
        with torch.no_grad():
            exact = ref.lm_head(ref.model(torch.tensor([ids])).last_hidden_state[0, read]).numpy()
            theirs = ref16.lm_head(ref16.model(torch.tensor([ids])).last_hidden_state[0, read]).float().numpy()
        rel.append(relative(ours, exact))
        rel16.append(relative(theirs, exact))
        agree.extend(ours.argmax(-1) == exact.argmax(-1))
        agree16.extend(theirs.argmax(-1) == exact.argmax(-1))
    print(f"\nGemma-3-270M vs transformers float32, largest error over the row's largest logit, "
          f"per prompt: ours bfloat16 {np.round(rel, 4).tolist()}, transformers bfloat16 "
          f"{np.round(rel16, 4).tolist()}; argmax agreement {np.mean(agree):.3f} and {np.mean(agree16):.3f}")
    # Measured over all five prompts (AMD EPYC, jax 0.10.2, transformers 5.25): ours 0.011-0.067,
    # transformers' bfloat16 0.013-0.183 (both worst on the 945-token prompt); argmax agreement
    # 1.000 ours, 0.946 transformers' bfloat16. Another run of the same: ours 0.011-0.192,
    # transformers' 0.012-0.198, agreement 0.946 both.
    assert max(rel) <= 1.25 * max(rel16), (rel, rel16)
    assert np.mean(agree) >= min(0.95, np.mean(agree16))


def test_gemma3_model_spec_and_experiment_variant():
    from pathlib import Path

    from experiments.registry import GEMMA3_270M
    from jaxjudge.experiment import load_config, resolve_model_path, validate_config
    from jaxjudge.store import file_sha256

    path = resolve_model_path(GEMMA3_270M)
    assert path == jg.gguf_dir() / FILE
    cfg = load_config(f"{Path(__file__).resolve().parents[2] / 'experiments' / 'score_range_bias.py'}:gemma3")
    assert cfg.models == (GEMMA3_270M,) and cfg.prompt_style == "raw"  # a base model: no chat template
    validate_config(cfg, check_files=False)
    if path.is_file():
        assert file_sha256(path) == GEMMA3_270M.sha256
