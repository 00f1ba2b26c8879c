"""Parity with transformers' BERT: same weights, same outputs (fp32, atol 1e-5), both ways through disk."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
import transformers

import bertkit
from bertkit import BertConfig, BertkitError
from bertkit.initialization import local_attention_init
from bertkit.pretrain import ModelSettings

ATOL = 1e-5
SIZES = {"tiny": dict(vocab_size=1000), "base": dict(vocab_size=30522)}

# (bertkit class, transformers class, extra config)
MODELS = [
    (bertkit.BertModel, transformers.BertModel, {}),
    (bertkit.BertForPreTraining, transformers.BertForPreTraining, {}),
    (bertkit.BertForSequenceClassification, transformers.BertForSequenceClassification, {"id2label": {0: "a", 1: "b", 2: "c"}}),
    (bertkit.BertForSequenceClassification, transformers.BertForSequenceClassification, {"id2label": {0: "score"}, "problem_type": "regression"}),
    (bertkit.BertForQuestionAnswering, transformers.BertForQuestionAnswering, {}),
    (bertkit.BertForTokenClassification, transformers.BertForTokenClassification, {"id2label": dict(enumerate(["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]))}),
]


def make_batch(cfg: BertConfig, B: int = 4, T: int = 24, seed: int = 0) -> dict[str, torch.Tensor]:
    """A batch with padding of several lengths, a pair boundary, and labels for every head."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, cfg.vocab_size, (B, T), generator=g)
    lengths = torch.tensor([T, T - 7, 5, T - 1][:B])
    mask = (torch.arange(T)[None, :] < lengths[:, None]).long()
    ids = ids * mask  # [PAD] = 0 at the padding
    types = (torch.arange(T)[None, :] >= (lengths[:, None] // 2)).long() * mask
    mlm = torch.full((B, T), -100)
    pick = (torch.rand(B, T, generator=g) < 0.3) & mask.bool()
    mlm[pick] = ids[pick]
    return dict(
        input_ids=ids, attention_mask=mask, token_type_ids=types, mlm_labels=mlm,
        nsp_labels=torch.tensor([0, 1, 1, 0][:B]),
        class_labels=torch.randint(0, cfg.num_labels, (B,), generator=g),
        score_labels=torch.rand(B, generator=g),
        token_labels=torch.where(mask.bool(), torch.randint(0, cfg.num_labels, (B, T), generator=g), -100),
        starts=torch.tensor([1, 3, 2, 30][:B]), ends=torch.tensor([2, 9, 4, 31][:B]),
    )


def run_both(ours: torch.nn.Module, hf: torch.nn.Module, batch: dict[str, torch.Tensor]) -> list[tuple[str, torch.Tensor, torch.Tensor]]:
    """Runs both models on the batch; gives (name, ours, theirs) pairs of tensors that must agree."""
    x = {k: batch[k] for k in ("input_ids", "attention_mask", "token_type_ids")}
    valid = batch["attention_mask"].bool()
    with torch.no_grad():
        if isinstance(ours, bertkit.BertModel):
            a, b = ours(**x), hf(**x)
            return [("last_hidden_state", a.last_hidden_state[valid], b.last_hidden_state[valid]),
                    ("pooler_output", a.pooler_output, b.pooler_output)]
        if isinstance(ours, bertkit.BertForPreTraining):
            a = ours(**x, mlm_labels=batch["mlm_labels"], nsp_labels=batch["nsp_labels"])
            dense = ours(**x)
            b = hf(**x, labels=batch["mlm_labels"], next_sentence_label=batch["nsp_labels"])
            picked = batch["mlm_labels"] != -100
            return [("loss", a.loss, b.loss),
                    ("mlm logits (dense)", dense.prediction_logits[valid], b.prediction_logits[valid]),
                    ("mlm logits (sparse)", a.prediction_logits, b.prediction_logits[picked]),
                    ("nsp logits", a.seq_relationship_logits, b.seq_relationship_logits)]
        if isinstance(ours, bertkit.BertForSequenceClassification):
            labels = batch["score_labels"] if ours.config.problem_type == "regression" else batch["class_labels"]
            a, b = ours(**x, labels=labels), hf(**x, labels=labels)
            return [("loss", a.loss, b.loss), ("logits", a.logits, b.logits)]
        if isinstance(ours, bertkit.BertForQuestionAnswering):
            starts, ends = batch["starts"], batch["ends"]
            a = ours(**x, start_positions=starts, end_positions=ends)
            b = hf(**x)
            # bertkit keeps [PAD] out of the span softmax (transformers gives it probability), so its loss on the
            # padded batch is transformers' own loss of each row run alone, without padding, averaged over the rows
            # that have a span inside them (a span past the row is ignored by both, as is the last row's here).
            rows = []
            for i, n in enumerate(valid.sum(1).tolist()):
                alone = hf(**{k: v[i : i + 1, :n] for k, v in x.items()}, start_positions=starts[i : i + 1],
                           end_positions=ends[i : i + 1]).loss
                if torch.isfinite(alone):
                    rows.append(alone)
            assert 0 < len(rows) < len(starts)  # both kinds of row are in the batch
            return [("loss", a.loss, torch.stack(rows).mean()), ("start_logits", a.start_logits[valid], b.start_logits[valid]),
                    ("end_logits", a.end_logits[valid], b.end_logits[valid])]
        if isinstance(ours, bertkit.BertForTokenClassification):
            a, b = ours(**x, labels=batch["token_labels"]), hf(**x, labels=batch["token_labels"])
            return [("loss", a.loss, b.loss), ("logits", a.logits[valid], b.logits[valid])]
    raise AssertionError(type(ours))


def assert_parity(ours: torch.nn.Module, hf: torch.nn.Module, batch: dict[str, torch.Tensor]) -> None:
    for name, a, b in run_both(ours.eval(), hf.eval(), batch):
        torch.testing.assert_close(a, b, atol=ATOL, rtol=0, msg=lambda m, name=name: f"{name}: {m}")


@pytest.fixture(scope="module")
def encoders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A randomly initialized (seed 0) BertForPreTraining of each size, saved once: each head class loads its
    encoder from there with a fresh head of its own (BERT-base takes seconds to initialize)."""
    root = tmp_path_factory.mktemp("encoders")
    for size, fields in SIZES.items():
        torch.manual_seed(0)
        bertkit.BertForPreTraining(BertConfig.preset(size, **fields)).save_pretrained(root / size)
    return {size: root / size for size in SIZES}


@pytest.mark.parametrize("size", [pytest.param(s, marks=[pytest.mark.slow] if s == "base" else []) for s in SIZES])
@pytest.mark.parametrize(("ours_cls", "hf_cls", "extra"), MODELS, ids=lambda v: getattr(v, "__name__", "cfg"))
def test_parity_both_directions(tmp_path: Path, encoders: dict[str, Path], size: str, ours_cls, hf_cls, extra) -> None:
    torch.manual_seed(0)
    cfg = BertConfig.preset(size, **SIZES[size], **extra)
    batch = make_batch(cfg)

    # bertkit -> disk -> transformers
    ours = ours_cls.from_pretrained(encoders[size], **extra)  # the encoder's weights, a fresh head
    assert ours.config == cfg
    ours.save_pretrained(tmp_path / "ours")
    hf = hf_cls.from_pretrained(tmp_path / "ours")
    assert_parity(ours, hf, batch)

    # transformers -> disk -> bertkit (fresh random weights on their side)
    hf2 = hf_cls(transformers.BertConfig(**cfg.to_dict()))
    hf2.save_pretrained(tmp_path / "hf")
    ours2 = ours_cls.from_pretrained(tmp_path / "hf")
    assert ours2.load_report.newly_initialized == []
    assert_parity(ours2, hf2, batch)


def test_pretrained_weights_are_bert_initialized() -> None:
    torch.manual_seed(0)
    model = bertkit.BertForPreTraining(BertConfig.preset("mini"))
    w = model.bert.layers[0].ffn.up.weight
    assert abs(w.std().item() - 0.02 * 0.88) < 0.002  # normal(0, 0.02) truncated at 2 std has std 0.88 x 0.02
    assert w.abs().max().item() <= 0.04 + 1e-6
    assert torch.all(model.bert.layers[0].ffn.up.bias == 0)
    assert torch.all(model.bert.layers[0].ffn_norm.weight == 1) and torch.all(model.mlm.bias == 0)


@pytest.mark.parametrize("preset", ["tiny", "mini"])
def test_local_init_points_each_head_at_its_neighbour(tmp_path: Path, preset: str) -> None:
    """Measured by transformers' own attention on the saved weights: head h of every layer puts most of
    its weight on offset +1, -1, +2, -2, ..., where BERT's initialization spreads it evenly."""
    torch.manual_seed(0)
    model = bertkit.BertForPreTraining(BertConfig.preset(preset, vocab_size=500))
    local_attention_init(model.bert)
    model.save_pretrained(tmp_path)
    hf = transformers.BertModel.from_pretrained(tmp_path, attn_implementation="eager")
    ids = torch.randint(5, 500, (4, 64))
    attentions = hf(ids, output_attentions=True).attentions  # per layer (B, heads, T, T)
    i = torch.arange(8, 56)
    for probs in attentions:
        for h in range(probs.shape[1]):
            offset = (h // 2 + 1) * (1 if h % 2 == 0 else -1)
            on_target = probs[:, h, i, i + offset].mean().item()
            assert on_target > 0.3, (h, on_target)  # uniform would be 1/64
            assert (probs[:, h, i].argmax(-1) == i + offset).float().mean() > 0.9
            cls = probs[:, h, 0]  # [CLS] reads the whole sequence: near-uniform
            entropy = -(cls * cls.clamp_min(1e-12).log()).sum(-1).mean().item()
            assert entropy > 0.8 * math.log(64), (h, entropy)
    with pytest.raises(BertkitError, match="init must be one of bert, local"):
        ModelSettings(init="sinusoid")


@pytest.mark.slow
def test_local_init_reads_word_order_where_bert_init_is_still_guessing() -> None:
    """A synthetic MLM where every token is its left neighbour + 1 (50 in a cycle): order gives 100%, no order 2%.
    100 steps from BERT's initialization are still on that floor; from the local one, the heads already read
    their neighbours."""

    def masked_accuracy(init: str, steps: int = 100) -> float:
        torch.manual_seed(0)
        V, T, K = 64, 32, 50
        cfg = BertConfig(vocab_size=V, hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128,
                         max_position_embeddings=T, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
        model = bertkit.BertForPreTraining(cfg)
        if init == "local":
            local_attention_init(model.bert)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

        def batch(n: int) -> tuple[torch.Tensor, torch.Tensor]:
            ids = 5 + (torch.randint(0, K, (n, 1)) + torch.arange(T)) % K
            mask = torch.rand(n, T) < 0.15
            return ids.masked_fill(mask, 4), torch.where(mask, ids, -100)

        for _ in range(steps):
            ids, labels = batch(32)
            model(ids, mlm_labels=labels).mlm_loss.backward()
            opt.step()
            opt.zero_grad()
        ids, labels = batch(256)
        with torch.no_grad():
            logits = model(ids, mlm_labels=labels, dense_logits=True).prediction_logits
        masked = labels != -100
        return (logits.argmax(-1)[masked] == labels[masked]).float().mean().item()

    bert, local = masked_accuracy("bert"), masked_accuracy("local")
    assert bert < 0.2 and local > 0.8, (bert, local)  # measured: 0.02 and 0.96


def test_mlm_decoder_is_tied_to_word_embeddings() -> None:
    torch.manual_seed(0)
    model = bertkit.BertForPreTraining(BertConfig.preset("tiny", vocab_size=50))
    names = [n for n, _ in model.named_parameters()]
    assert not any("decoder" in n for n in names)
    out = model(torch.tensor([[2, 7, 3]]), mlm_labels=torch.tensor([[-100, 7, -100]]), nsp_labels=torch.tensor([0]))
    out.loss.backward()
    # every row of the embedding matrix scores its token in the MLM softmax, so every row gets a gradient, not only
    # those of the input's tokens (2, 7, 3) as an untied decoder would leave it
    grad = model.bert.embeddings.word_embeddings.weight.grad
    assert (grad.abs().sum(1) > 0).all()


def test_padding_does_not_change_real_tokens() -> None:
    torch.manual_seed(0)
    model = bertkit.BertModel(BertConfig.preset("tiny", vocab_size=100)).eval()
    ids = torch.randint(5, 100, (1, 9))
    padded = torch.cat([ids, torch.zeros(1, 6, dtype=torch.long)], dim=1)
    with torch.no_grad():
        alone = model(ids).last_hidden_state
        with_pad = model(padded, attention_mask=(padded != 0).long() | (torch.arange(15) < 9).long()).last_hidden_state
    torch.testing.assert_close(with_pad[:, :9], alone, atol=ATOL, rtol=0)
    assert torch.all(with_pad[:, 9:] == 0)


def test_bf16_runs_close_to_fp32() -> None:
    torch.manual_seed(0)
    cfg = BertConfig.preset("tiny", vocab_size=1000)
    model = bertkit.BertForPreTraining(cfg).eval()
    batch = make_batch(cfg)
    x = {k: batch[k] for k in ("input_ids", "attention_mask", "token_type_ids")}
    with torch.no_grad():
        ref = model(**x, mlm_labels=batch["mlm_labels"], nsp_labels=batch["nsp_labels"]).loss
        with torch.autocast("cpu", dtype=torch.bfloat16):
            low = model(**x, mlm_labels=batch["mlm_labels"], nsp_labels=batch["nsp_labels"]).loss
        as_bf16 = model.to(torch.bfloat16)(**x, mlm_labels=batch["mlm_labels"], nsp_labels=batch["nsp_labels"]).loss
    assert low.dtype == torch.float32
    assert abs(low.item() - ref.item()) < 0.05 and abs(as_bf16.item() - ref.item()) < 0.05


# ---- checkpoints: loading reports and bad input ---------------------------------------------------

def test_fresh_head_is_reported_and_extra_weights_listed(tmp_path: Path) -> None:
    cfg = BertConfig.preset("tiny", vocab_size=100)
    bertkit.BertForPreTraining(cfg).save_pretrained(tmp_path)
    clf = bertkit.BertForSequenceClassification.from_pretrained(tmp_path, id2label={0: "neg", 1: "pos"})
    assert clf.load_report.newly_initialized == ["classifier.linear.weight", "classifier.linear.bias"]
    heads = ["mlm.bias", "mlm.dense.bias", "mlm.dense.weight", "mlm.norm.bias", "mlm.norm.weight", "nsp.bias", "nsp.weight"]
    assert clf.load_report.unused == heads
    tagger = bertkit.BertForTokenClassification.from_pretrained(tmp_path)  # a tagger has no pooler either
    assert tagger.load_report.unused == ["bert.pooler.dense.bias", "bert.pooler.dense.weight", *heads]


def test_wrong_shapes_are_named(tmp_path: Path) -> None:
    bertkit.BertModel(BertConfig.preset("tiny", vocab_size=100)).save_pretrained(tmp_path / "a")
    bertkit.BertModel(BertConfig.preset("tiny", vocab_size=100, intermediate_size=256)).save_pretrained(tmp_path / "b")
    # a config that says one thing, weights of another
    (tmp_path / "a" / "model.safetensors").replace(tmp_path / "b" / "model.safetensors")
    with pytest.raises(BertkitError, match=r"wrong shape: .*layers\.0\.ffn\.up\.weight: checkpoint \(512, 128\), model \(256, 128\)"):
        bertkit.BertModel.from_pretrained(tmp_path / "b")


def test_missing_encoder_weights_are_an_error(tmp_path: Path) -> None:
    from safetensors.torch import load_file, save_file

    bertkit.BertModel(BertConfig.preset("tiny", vocab_size=100)).save_pretrained(tmp_path)
    state = load_file(tmp_path / "model.safetensors")
    del state["encoder.layer.1.output.dense.weight"]
    save_file(state, tmp_path / "model.safetensors")
    with pytest.raises(BertkitError, match=r"lacks encoder weights: layers\.1\.ffn\.down\.weight"):
        bertkit.BertModel.from_pretrained(tmp_path)


def test_missing_folder_and_missing_weights(tmp_path: Path) -> None:
    with pytest.raises(BertkitError, match="no such model folder"):
        bertkit.BertModel.from_pretrained(tmp_path / "nope")
    with pytest.raises(BertkitError, match="no config.json"):
        bertkit.BertModel.from_pretrained(tmp_path)
    BertConfig.preset("tiny").save(tmp_path)
    with pytest.raises(BertkitError, match="no model.safetensors or pytorch_model.bin"):
        bertkit.BertModel.from_pretrained(tmp_path)


def test_vocab_larger_than_config_is_an_error(tmp_path: Path) -> None:
    bertkit.BertModel(BertConfig.preset("tiny", vocab_size=10)).save_pretrained(tmp_path)
    (tmp_path / "vocab.txt").write_text("\n".join(f"tok{i}" for i in range(12)) + "\n")
    with pytest.raises(BertkitError, match="vocab.txt has 12 tokens but config.json vocab_size is 10"):
        bertkit.BertModel.from_pretrained(tmp_path)


def test_config_rejects_unknown_keys_and_bad_values(tmp_path: Path) -> None:
    with pytest.raises(BertkitError, match="unknown key 'hidden_sise'"):
        BertConfig.from_dict({"hidden_sise": 5})
    with pytest.raises(BertkitError, match="not a multiple"):
        BertConfig(hidden_size=100, num_attention_heads=3)
    with pytest.raises(BertkitError, match="position_embedding_type='relative_key' is not supported"):
        BertConfig.from_dict({"position_embedding_type": "relative_key"})
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(BertkitError, match="config.json: not valid JSON"):
        BertConfig.load(tmp_path)


def test_reads_pytorch_model_bin_and_tf_style_names(tmp_path: Path) -> None:
    torch.manual_seed(0)
    hf = transformers.BertModel(transformers.BertConfig(**BertConfig.preset("tiny", vocab_size=100).to_dict())).eval()
    state = {k.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta"): v
             for k, v in hf.state_dict().items()}
    torch.save(state, tmp_path / "pytorch_model.bin")
    hf.config.save_pretrained(tmp_path)
    ours = bertkit.BertModel.from_pretrained(tmp_path).eval()
    ids = torch.randint(5, 100, (2, 7))
    with torch.no_grad():
        torch.testing.assert_close(ours(ids).last_hidden_state, hf(ids).last_hidden_state, atol=ATOL, rtol=0)


def test_precomputed_positions_give_the_same_step() -> None:
    """The training path that never syncs with the device (positions computed with the batch) equals the plain one."""
    from bertkit.pretrain import training_batch

    torch.manual_seed(0)
    cfg = BertConfig.preset("tiny", vocab_size=1000)
    model = bertkit.BertForPreTraining(cfg).eval()
    b = make_batch(cfg)
    batch = {"input_ids": b["input_ids"], "token_type_ids": b["token_type_ids"], "attention_mask": b["attention_mask"],
             "mlm_labels": b["mlm_labels"], "nsp_labels": b["nsp_labels"]}
    fast = training_batch(dict(batch))
    # flat (row-major) positions of the real tokens and of the predicted ones
    mask, labels = batch["attention_mask"].flatten().tolist(), batch["mlm_labels"].flatten().tolist()
    assert fast["packed_indices"].tolist() == [i for i, m in enumerate(mask) if m] and len(fast["packed_indices"]) < len(mask)
    assert fast["mlm_positions"].tolist() == [i for i, label in enumerate(labels) if label != -100]
    with torch.no_grad():
        a = model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"], batch["mlm_labels"], batch["nsp_labels"])
        c = model(fast["input_ids"], fast["attention_mask"], fast["token_type_ids"], fast["mlm_labels"], fast["nsp_labels"],
                  packed_indices=fast["packed_indices"], mlm_positions=fast["mlm_positions"])
    torch.testing.assert_close(a.loss, c.loss, atol=0, rtol=0)
    torch.testing.assert_close(a.prediction_logits, c.prediction_logits, atol=0, rtol=0)
    full = training_batch({**batch, "attention_mask": torch.ones_like(batch["attention_mask"])})
    assert "attention_mask" not in full and "packed_indices" not in full


def test_pretraining_gradients_equal_transformers(tmp_path: Path) -> None:
    """One training step's gradients, parameter by parameter, through the fast path (unpadded encoder,
    MLM head on the predicted positions only): the same as transformers' dense computation."""
    from bertkit.hf import to_hf
    from bertkit.pretrain import training_batch

    torch.manual_seed(0)
    cfg = BertConfig.preset("tiny", vocab_size=1000, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    ours = bertkit.BertForPreTraining(cfg).train()
    ours.save_pretrained(tmp_path)
    hf = transformers.BertForPreTraining.from_pretrained(tmp_path).train()
    b = make_batch(cfg)
    fast = training_batch({k: b[k] for k in ("input_ids", "token_type_ids", "attention_mask", "mlm_labels", "nsp_labels")})
    ours(**fast).loss.backward()
    hf(input_ids=b["input_ids"], token_type_ids=b["token_type_ids"], attention_mask=b["attention_mask"],
       labels=b["mlm_labels"], next_sentence_label=b["nsp_labels"]).loss.backward()
    ours_grads = to_hf({name: p.grad for name, p in ours.named_parameters()})
    hf_grads = {name: p.grad for name, p in hf.named_parameters()}
    # parameter for parameter (both count the tied decoder once, as the word embedding matrix)
    assert sorted(ours_grads) == sorted(hf_grads)
    for name in hf_grads:
        torch.testing.assert_close(ours_grads[name], hf_grads[name], atol=1e-6, rtol=1e-4, msg=lambda m, n=name: f"{n}: {m}")
