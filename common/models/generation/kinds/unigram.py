"""The scratch T5's tokenizer: a Unigram model trained on the fine-tuning pairs, with ids that do not
change from run to run on the same texts (T5's special tokens: pad = 0, eos = 1, unk = 2)."""

from __future__ import annotations

from typing import Sequence

PAD, EOS, UNK = "<pad>", "</s>", "<unk>"


def train_tokenizer(texts: Sequence[str], vocab_size: int):
    """A Unigram tokenizer trained on ``texts``, wrapped as a ``PreTrainedTokenizerFast`` with T5's
    special tokens (pad = 0, eos = 1, unk = 2) and ``</s>`` appended to every encoded text."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.Unigram())
    tokenizer.normalizer = normalizers.NFKC()
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
    tokenizer.decoder = decoders.Metaspace()
    trainer = trainers.UnigramTrainer(
        vocab_size=vocab_size, special_tokens=[PAD, EOS, UNK], unk_token=UNK, show_progress=False
    )
    tokenizer.train_from_iterator(list(texts), trainer=trainer)
    specials, pieces = _unigram_pieces(tokenizer)
    tokenizer.model = models.Unigram(specials + pieces, unk_id=2)  # the same texts, the same ids
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"$A {EOS}", special_tokens=[(EOS, tokenizer.token_to_id(EOS))]
    )
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, pad_token=PAD, eos_token=EOS, unk_token=UNK)


def _unigram_pieces(tokenizer) -> tuple[list, list]:
    """(special tokens, other pieces) of a trained Unigram tokenizer as (piece, score), in an order that
    does not change from run to run. The trainer's runs differ in two ways, each of which reorders the ids:
    its scores vary in the last bits (sums in hash-map order), so pieces within 1e-6 of each other (a chain
    of such steps) count as tied, share one score and are ordered by name; and the characters it must keep
    without having chosen them get scores 1e-4 apart above its lowest score, in hash-set order. That tail is
    the run of pieces on the grid ``lowest + k * 1e-4`` (k = 0, 1, ... without a gap); chosen pieces can fall
    between its points and keep their own scores. The tail's scores go to its pieces in sorted order."""
    import json

    vocab = [(p, round(score, 9)) for p, score in json.loads(tokenizer.to_str())["model"]["vocab"]]
    pieces = sorted(vocab[3:], key=lambda p: -p[1])
    if not pieces:
        return vocab[:3], pieces
    lowest = pieces[-1][1]
    tail, top = [], 0
    for piece, score in reversed(pieces):  # upwards from the lowest score
        if score > lowest + (top + 1) * 1e-4 + 1e-7:
            break  # past the grid's last point and the gap above it
        k = round((score - lowest) / 1e-4)
        if abs(score - lowest - k * 1e-4) < 1e-7:
            tail.append((piece, score))
            top = max(top, k)
    names = {p for p, _ in tail}
    canonical = list(zip(sorted(names), sorted((s for _, s in tail), reverse=True)))
    ordered, previous = [], None
    for piece, score in sorted([p for p in pieces if p[0] not in names] + canonical, key=lambda p: -p[1]):
        # A tie group's pieces share its first (highest) score, so ids still follow the scores.
        group = ordered[-1][0] if previous is not None and previous - score < 1e-6 else score
        ordered.append((group, piece))
        previous = score
    return vocab[:3], [(piece, group) for group, piece in sorted(ordered, key=lambda p: (-p[0], p[1]))]
