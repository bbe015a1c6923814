"""T5 fine-tuning from scratch: the tokenizer, the loss going down, and a model that reloads and generates."""

from __future__ import annotations

import json

import pytest

from common.models.generation.fine_tune_specs import ModelSpec, TrainSpec
from common.models.generation.kinds.seq2seq import fine_tune
from common.models.generation.kinds.unigram import train_tokenizer

PAIRS = [
    (f"{brand} {noun} {colour}", f"{colour} {noun} by {brand}")
    for brand in ("acme", "zeta", "bolt", "nova")
    for noun in ("mug", "kettle", "lamp", "pan")
    for colour in ("red", "blue", "black")
]


def test_tokenizer_has_t5_special_tokens_and_appends_eos():
    tok = train_tokenizer([t for pair in PAIRS for t in pair], vocab_size=60)
    assert (tok.pad_token_id, tok.eos_token_id, tok.unk_token_id) == (0, 1, 2)
    ids = tok("acme red mug").input_ids
    assert ids[-1] == tok.eos_token_id and tok.decode(ids, skip_special_tokens=True) == "acme red mug"


def test_tokenizer_training_gives_the_same_ids_every_time():
    # The Unigram trainer orders near-tied pieces by hash-map order, which changes from one training to the
    # next (8 trainings on these texts gave 8 different id orders before train_tokenizer made it canonical).
    texts = [
        f"{brand} {noun} {size}{unit} #{code}"
        for brand in ("acme", "zeta", "Bolt+", "nova7")
        for noun in ("mug", "kettle", "lamp", "pan", "Softgels")
        for size in (1, 27, 350)
        for unit in ("ml", "cm", "W")
        for code in ("A1", "x9", "k-2")
    ]
    vocabs = {tuple(sorted(train_tokenizer(texts, vocab_size=300).get_vocab().items())) for _ in range(6)}
    assert len(vocabs) == 1


def test_canonical_ids_survive_score_noise_and_a_chosen_piece_inside_the_character_tail():
    """Two trainings of one demo genre generator's tokenizer differed like these two vocabularies (the same
    pieces; 8 trainings on that genre's pairs gave 8 different id orders before): three equally frequent
    characters whose scores differ in the ninth decimal, and the trainer's tail of kept characters (1e-4
    apart above its lowest score, in hash-set order) with a chosen piece (``▁mil``) between two of its
    points. Both must give the same ids."""
    import json

    from common.models.generation.kinds.unigram import _unigram_pieces

    class Trained:  # what _unigram_pieces reads of a trained tokenizer
        def __init__(self, vocab):
            self.vocab = vocab

        def to_str(self):
            return json.dumps({"model": {"vocab": self.vocab}})

    def vocab(ties: dict, tail: str) -> list:
        lowest = -10.18305
        return (
            [["<pad>", 0.0], ["</s>", 0.0], ["<unk>", 0.0], ["▁the", -3.1], ["ing", -5.25]]
            + [[c, score] for c, score in ties.items()]
            + [["▁mil", lowest + 6.7e-4], ["ain", lowest]]
            + [[c, lowest + k * 1e-4] for k, c in enumerate(tail)]
        )

    first = vocab({"!": -6.9819523464, ":": -6.9819523455, "Y": -6.9819523449}, "vWTNIGBHCDRJ")
    second = vocab({"Y": -6.9819523451, "!": -6.9819523458, ":": -6.9819523462}, "BGHCRJDITWNv")
    specials, pieces = _unigram_pieces(Trained(first))
    assert [p for p, _ in specials] == ["<pad>", "</s>", "<unk>"]
    assert [p for p, _ in pieces] == [p for p, _ in _unigram_pieces(Trained(second))[1]]
    names = [p for p, _ in pieces]
    assert names[:5] == ["▁the", "ing", "!", ":", "Y"] and "▁mil" in names[-14:-6]
    assert [s for _, s in pieces] == sorted((s for _, s in pieces), reverse=True)  # ids still by score


def test_scratch_t5_learns_and_reloads(tmp_path):
    from transformers import AutoTokenizer, T5ForConditionalGeneration

    result = fine_tune(
        PAIRS,
        str(tmp_path / "t5"),
        ModelSpec(vocab_size=60),
        TrainSpec(epochs=30, learning_rate=3e-3, batch_size=16, grad_accumulation=2, seed=1),
    )
    # 48 pairs / 16 per micro-batch = 3 micro-batches; 2 per step -> 2 optimiser steps per epoch.
    assert len(result.step_losses) == 30 * 2 and result.examples == 30 * 48
    first, last = sum(result.step_losses[:4]) / 4, sum(result.step_losses[-4:]) / 4
    assert last < 0.5 * first, (first, last)
    tok = AutoTokenizer.from_pretrained(tmp_path / "t5")
    model = T5ForConditionalGeneration.from_pretrained(tmp_path / "t5")
    out = model.generate(**tok(["acme mug red"], return_tensors="pt"), max_new_tokens=12, do_sample=False)
    text = tok.decode(out[0], skip_special_tokens=True)
    assert text and set(text.split()) & {"red", "mug", "acme", "by"}
    # Tokens trained on: every pair's source and target ids (with </s>) once per epoch, padding apart.
    per_epoch = sum(len(tok(s).input_ids) + len(tok(t).input_ids) for s, t in PAIRS)
    assert result.tokens == 30 * per_epoch and per_epoch * 30 <= result.padded_tokens


def test_length_grouped_batches_hold_every_example_once_and_pad_less():
    import math
    import random

    from common.models.generation.kinds.batching import epoch_batches

    lengths = [random.Random(i).randint(3, 60) for i in range(5000)]
    random.seed(3)
    grouped = epoch_batches(list(range(5000)), lengths, 32, group_by_length=True)
    random.seed(3)
    plain = epoch_batches(list(range(5000)), lengths, 32, group_by_length=False)
    for batches in (grouped, plain):
        assert sorted(i for b in batches for i in b) == list(range(5000))
        assert len(batches) == math.ceil(5000 / 32) and max(len(b) for b in batches) == 32

    def padded(batches):
        return sum(len(b) * max(lengths[i] for i in b) for b in batches)

    assert padded(grouped) < 0.6 * padded(plain), (padded(grouped), padded(plain))
    # Batches are shuffled after grouping: length does not rise (or fall) with the step.
    longest = [max(lengths[i] for i in b) for b in grouped]
    assert longest != sorted(longest) and longest != sorted(longest, reverse=True)
    random.seed(3)
    assert epoch_batches(list(range(5000)), lengths, 32, group_by_length=True) == grouped  # seeded: the same again


def test_max_steps_bounds_the_optimiser_steps_across_passes(tmp_path):
    # 48 pairs / 16 per micro-batch = 3 micro-batches; with accumulation 2, 2 optimiser steps per pass
    # (the last step of a pass takes the odd micro-batch alone). 5 steps: 3 passes, the last cut to 1 step.
    train = TrainSpec(epochs=30, learning_rate=3e-3, batch_size=16, grad_accumulation=2, seed=1, max_steps=5)
    assert train.planned_epochs(48) == 3 and TrainSpec(epochs=30).planned_epochs(48) == 30
    passes = []
    result = fine_tune(
        PAIRS,
        str(tmp_path / "t5"),
        ModelSpec(vocab_size=60),
        train,
        on_epoch_end=lambda epoch, net, tok, losses: passes.append((epoch, len(losses))),
    )
    assert len(result.step_losses) == 5 and passes == [(1, 2), (2, 4), (3, 5)]
    assert result.examples == 2 * 48 + 32  # two full passes, then the two micro-batches of the fifth step
    # One step fewer than a pass holds: one pass, cut.
    one = fine_tune(
        PAIRS,
        str(tmp_path / "t5b"),
        ModelSpec(vocab_size=60),
        TrainSpec(epochs=30, learning_rate=3e-3, batch_size=16, seed=1, max_steps=2),
    )
    assert len(one.step_losses) == 2 and one.examples == 32


def test_a_long_fine_tune_logs_its_progress_between_epoch_lines(tmp_path, monkeypatch, caplog):
    # Every step counts as "a minute later": one line per optimiser step, of the planned 5 (max_steps).
    import common.models.optim as optim

    monkeypatch.setattr(optim, "PROGRESS_SECONDS", 0.0)
    train = TrainSpec(epochs=30, learning_rate=3e-3, batch_size=16, grad_accumulation=2, seed=1, max_steps=5)
    with caplog.at_level("INFO", logger="common.models.generation.kinds.seq2seq"):
        result = fine_tune(PAIRS, str(tmp_path / "t5"), ModelSpec(vocab_size=60), train)
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("step ")]
    assert [line.split(":")[0] for line in lines] == [f"step {i}/5" for i in range(1, 6)]
    assert lines[-1].endswith("about 0 s left")
    assert f"mean loss {result.step_losses[-1]:.4f} over the last 1 " in lines[-1]
    # Without the bound: epochs x optimiser steps per pass (3 micro-batches of 16, 2 a step: 2 steps).
    caplog.clear()
    with caplog.at_level("INFO", logger="common.models.generation.kinds.seq2seq"):
        fine_tune(
            PAIRS,
            str(tmp_path / "t5b"),
            ModelSpec(vocab_size=60),
            TrainSpec(epochs=2, learning_rate=3e-3, batch_size=16, grad_accumulation=2, seed=1),
        )
    assert [r.getMessage().split(":")[0] for r in caplog.records if r.getMessage().startswith("step ")] == [
        f"step {i}/4" for i in range(1, 5)
    ]


def test_fine_tuning_runs_as_a_ray_task_and_logs_checkpoints_to_mlflow(tmp_path, ray_runtime, tracking_uri):
    import mlflow
    import pyarrow as pa
    import pyarrow.parquet as pq
    from transformers import T5ForConditionalGeneration

    from common.models.generation.on_ray.fine_tune_ray import fine_tune_on_ray

    files = []
    for part in range(2):  # the task reads a table's files itself, like a Delta version's
        chunk = PAIRS[part::2] + [("", "empty source is skipped"), ("  ", None)]
        path = tmp_path / f"part-{part}.parquet"
        pq.write_table(pa.table({"source_text": [s for s, _ in chunk], "target_text": [t for _, t in chunk]}), path)
        files.append(str(path))
    mlflow.set_tracking_uri(tracking_uri)
    mlflow.set_experiment("test-seq2seq")
    with mlflow.start_run() as run:
        result = fine_tune_on_ray(
            ray_runtime,
            files,
            str(tmp_path / "models" / "t5"),
            ModelSpec(vocab_size=60),
            TrainSpec(epochs=3, learning_rate=3e-3, batch_size=16, seed=1),
            tracking_uri=tracking_uri,
            run_id=run.info.run_id,
            checkpoint_every=1,
        )
    assert result.examples == 3 * 48 and len(result.step_losses) == 3 * 3 and result.device == "cpu"
    client = mlflow.MlflowClient(tracking_uri)
    assert {a.path for a in client.list_artifacts(run.info.run_id, "checkpoints")} == {
        "checkpoints/epoch-1",
        "checkpoints/epoch-2",
    }
    assert "model/config.json" in {a.path for a in client.list_artifacts(run.info.run_id, "model")}
    history = client.get_metric_history(run.info.run_id, "train_loss")
    assert [m.step for m in history] == list(range(9))
    assert [m.value for m in history] == pytest.approx(result.step_losses)
    assert len(client.get_metric_history(run.info.run_id, "epoch_loss")) == 3
    T5ForConditionalGeneration.from_pretrained(tmp_path / "models" / "t5")  # the final model reached out_uri


def test_warm_minilm_encoder_reproduces_bert_and_shares_embeddings():
    import torch
    from transformers import BertModel

    from common.models.generation.kinds.warm_start import build_warm_minilm
    from common.models.pretrained import minilm_folder

    tok, bart = build_warm_minilm(64, seed=0)
    bert = BertModel.from_pretrained(str(minilm_folder())).eval()
    enc = tok(
        ["red running shoes size 10", "acme kettle 1.5l, stainless steel (black)"], padding=True, return_tensors="pt"
    )
    assert "token_type_ids" not in enc  # BART takes no token types
    with torch.no_grad():
        expected = bert(**enc).last_hidden_state
        got = bart.eval().model.encoder(**enc).last_hidden_state
    real = enc.attention_mask.bool()
    # Equal up to the LayerNorm epsilon (BERT 1e-12, BART 1e-5): measured max gap about 1e-3.
    assert (expected[real] - got[real]).abs().max().item() < 1e-2
    # One vocabulary matrix: encoder, decoder and LM head; the decoder's self-attention is BERT's too.
    shared = bart.model.shared.weight
    assert bart.lm_head.weight.data_ptr() == shared.data_ptr() == bart.model.decoder.embed_tokens.weight.data_ptr()
    assert torch.equal(
        bart.model.decoder.layers[3].self_attn.q_proj.weight, bert.encoder.layer[3].attention.self.query.weight
    )
    assert (bart.config.decoder_start_token_id, bart.config.eos_token_id) == (tok.cls_token_id, tok.sep_token_id)


def test_warm_minilm_fine_tunes_reloads_and_generates(tmp_path):
    from common.models.generation.on_ray.pool import GenerationSpec, T5Generator

    result = fine_tune(
        PAIRS,
        str(tmp_path / "warm"),
        ModelSpec(kind="warm_minilm"),
        TrainSpec(epochs=3, learning_rate=1e-4, batch_size=16, seed=1),
    )
    assert len(result.step_losses) == 3 * 3
    assert sum(result.step_losses[-3:]) < sum(result.step_losses[:3])
    generator = T5Generator(
        str(tmp_path / "warm"), "warm-v1", GenerationSpec(n_samples=2, max_new_tokens=8, max_source_tokens=32, seed=3)
    )
    assert type(generator.model).__name__ == "BartForConditionalGeneration"
    samples = generator._generate(["acme mug red", "nova lamp black"])
    assert [len(s) for s in samples] == [2, 2]
    assert all(isinstance(text, str) and 1 <= tokens <= 9 for pair in samples for text, tokens in pair)
    # The ctranslate2 engine serves it too (the converter's two gaps filled: no `normalize_before` in
    # transformers 5's BartConfig, no bos/eos in a BERT tokenizer), and greedy float32 decoding is hf's.
    from common.models.generation.engines.ct2 import CT2Generator

    greedy = dict(n_samples=1, mode="beam", num_beams=1, max_new_tokens=8, max_source_tokens=32)
    texts = ["acme mug red", "nova lamp black", "zeta pan blue"]
    served = CT2Generator(
        str(tmp_path / "warm"), "warm-v1", GenerationSpec(**greedy, engine="ctranslate2", compute_type="float32")
    )
    assert served._ct2 is not None
    hf = T5Generator(str(tmp_path / "warm"), "v", GenerationSpec(**greedy))
    assert served._generate(texts) == hf._generate(texts)
    config = json.loads((tmp_path / "warm" / "ct2-float32" / "config.json").read_text())
    assert (config["bos_token"], config["eos_token"], config["decoder_start_token"]) == ("[CLS]", "[SEP]", "[CLS]")
    assert "normalize_before" not in json.loads((tmp_path / "warm" / "config.json").read_text())  # never written


def test_a_converter_failure_is_remembered_and_served_by_hf(tmp_path):
    """A model CTranslate2's converter does not take (here a BERT encoder, no conversion registered) is
    served by hf, and the failure is remembered beside it: the next actor or run is told at once."""
    from transformers import BertConfig, BertModel

    from common.models.generation.engines.ct2_conversion import convert, converted

    BertModel(
        BertConfig(vocab_size=32, hidden_size=8, num_hidden_layers=1, num_attention_heads=1, intermediate_size=16)
    ).save_pretrained(str(tmp_path / "bert"))
    folder, reason = converted(str(tmp_path / "bert"), "int8")
    assert folder is None and "converter failed" in reason and "BertConfig" in reason
    assert "BertConfig" in (tmp_path / "bert" / "ct2-int8.failed").read_text()
    assert not (tmp_path / "bert" / "ct2-int8").exists()
    with pytest.raises(RuntimeError, match="failed to convert it before"):
        convert(str(tmp_path / "bert"), "int8")
