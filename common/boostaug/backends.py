"""BoostAug's edit-based augmentation backends: EDA, spelling noise, word split.

Each backend turns one text into one candidate, driven by a ``random.Random`` seeded from (seed, source id,
backend, candidate index): the same row always gives the same candidates, whichever Spark task runs it.
Texts are split on whitespace (SST-2 and most corpora come tokenised; punctuation stays a token).

EDA (Wei and Zou, 2019): one of synonym replacement, random insertion, random swap, random deletion per
candidate, touching ``max(1, round(p * n_words))`` words (deletion: each word with probability p). Synonyms
come from :func:`synonym_table`, the nearest neighbours of a word among MiniLM's whole-word vocabulary:
WordNet's data cannot be installed offline here. Embedding neighbours include related words that are not
synonyms (sometimes antonyms: "good" and "bad" share contexts), which is the kind of breaking edit the
surrogate's label constraint is there to catch.
"""

from __future__ import annotations

import random
from functools import lru_cache
from typing import Callable, Mapping, Sequence

# Keyboard neighbours on a QWERTY layout, for spelling noise.
_ROWS = ("qwertyuiop", "asdfghjkl", "zxcvbnm")
_KEYBOARD: dict[str, str] = {}
for _r, _row in enumerate(_ROWS):
    for _c, _ch in enumerate(_row):
        near = [_row[j] for j in (_c - 1, _c + 1) if 0 <= j < len(_row)]
        # Each row sits half a key right of the one above: row above at columns c, c + 1; below at c - 1, c.
        near += [_ROWS[_r - 1][j] for j in (_c, _c + 1) if _r > 0 and j < len(_ROWS[_r - 1])]
        near += [_ROWS[_r + 1][j] for j in (_c - 1, _c) if _r < 2 and 0 <= j < len(_ROWS[_r + 1])]
        _KEYBOARD[_ch] = "".join(sorted(set(near)))

# EDA's stop words are never replaced (its own list, abridged to the function words).
STOP_WORDS = frozenset(
    """a about above after again against all am an and any are as at be because been before
being below between both but by can could did do does doing down during each few for from further had has have
having he her here hers herself him himself his how i if in into is it its itself just me more most my myself no
nor not now of off on once only or other our ours ourselves out over own same she should so some such than that
the their theirs them themselves then there these they this those through to too under until up very was we were
what when where which while who whom why will with would you your yours yourself yourselves""".split()
)

Synonyms = Mapping[str, Sequence[str]]


def rng_for(seed: int, source_id: str, backend: str, index: int) -> random.Random:
    """The candidate's own generator: string seeds hash with SHA-512, the same in every process."""
    return random.Random(f"{seed}:{source_id}:{backend}:{index}")


def n_changes(n_words: int, p: float) -> int:
    """Words one EDA operation touches: ``max(1, round(p * n))``."""
    return max(1, int(round(p * n_words)))


def _replaceable(words: Sequence[str], synonyms: Synonyms) -> list[int]:
    return [i for i, w in enumerate(words) if w.lower() not in STOP_WORDS and synonyms.get(w.lower())]


def synonym_replacement(words: list[str], rng: random.Random, p: float, synonyms: Synonyms) -> list[str]:
    """Replace ``n`` distinct non-stop words that have synonyms by a random synonym each."""
    out = list(words)
    positions = _replaceable(words, synonyms)
    rng.shuffle(positions)
    for i in positions[: n_changes(len(words), p)]:
        out[i] = rng.choice(list(synonyms[words[i].lower()]))
    return out


def random_insertion(words: list[str], rng: random.Random, p: float, synonyms: Synonyms) -> list[str]:
    """Insert a synonym of a random non-stop word at a random position, ``n`` times."""
    out = list(words)
    for _ in range(n_changes(len(words), p)):
        positions = _replaceable(out, synonyms)
        if not positions:
            break
        word = out[rng.choice(positions)].lower()
        out.insert(rng.randrange(len(out) + 1), rng.choice(list(synonyms[word])))
    return out


def random_swap(words: list[str], rng: random.Random, p: float, synonyms: Synonyms) -> list[str]:
    """Swap two random positions, ``n`` times."""
    out = list(words)
    if len(out) < 2:
        return out
    for _ in range(n_changes(len(words), p)):
        i, j = rng.sample(range(len(out)), 2)
        out[i], out[j] = out[j], out[i]
    return out


def random_deletion(words: list[str], rng: random.Random, p: float, synonyms: Synonyms) -> list[str]:
    """Delete each word with probability ``p``; one random word survives if all would go."""
    if len(words) <= 1:
        return list(words)
    out = [w for w in words if rng.random() >= p]
    return out or [rng.choice(words)]


EDA_OPERATIONS: tuple[Callable[..., list[str]], ...] = (
    synonym_replacement,
    random_insertion,
    random_swap,
    random_deletion,
)


def eda(text: str, rng: random.Random, p: float, synonyms: Synonyms) -> str:
    """One EDA candidate: a random one of the four operations."""
    operation = rng.choice(EDA_OPERATIONS)
    return " ".join(operation(text.split(), rng, p, synonyms))


def _misspell(word: str, rng: random.Random) -> str:
    """A keyboard-neighbour substitution, a dropped letter, or a doubled letter, at a random letter."""
    letters = [i for i, ch in enumerate(word) if ch.lower() in _KEYBOARD]
    if not letters:
        return word
    i = rng.choice(letters)
    kind = rng.randrange(3) if len(word) > 2 else 0
    if kind == 0:
        near = rng.choice(_KEYBOARD[word[i].lower()])
        return word[:i] + (near.upper() if word[i].isupper() else near) + word[i + 1 :]
    if kind == 1:
        return word[:i] + word[i + 1 :]
    return word[:i] + word[i] + word[i:]


def spelling(text: str, rng: random.Random, p: float, synonyms: Synonyms = None) -> str:
    """Spelling noise: each word of 2+ letters is misspelt with probability ``p`` (at least one is)."""
    words = text.split()
    eligible = [i for i, w in enumerate(words) if sum(ch.isalpha() for ch in w) >= 2]
    chosen = [i for i in eligible if rng.random() < p]
    if not chosen and eligible:
        chosen = [rng.choice(eligible)]
    for i in chosen:
        words[i] = _misspell(words[i], rng)
    return " ".join(words)


def word_split(text: str, rng: random.Random, p: float, synonyms: Synonyms = None) -> str:
    """Word split: each word of 4+ characters is cut in two at a random inner point with probability ``p``
    (at least one is)."""
    words = text.split()
    eligible = [i for i, w in enumerate(words) if len(w) >= 4]
    chosen = {i for i in eligible if rng.random() < p}
    if not chosen and eligible:
        chosen = {rng.choice(eligible)}
    out = []
    for i, w in enumerate(words):
        if i in chosen:
            cut = rng.randrange(1, len(w))
            out += [w[:cut], w[cut:]]
        else:
            out.append(w)
    return " ".join(out)


BACKENDS: dict[str, Callable[[str, random.Random, float, Synonyms], str]] = {
    "eda": eda,
    "spelling": spelling,
    "split": word_split,
}


def augment_text(
    text: str, source_id: str, backend: str, n: int, seed: int, p: float, synonyms: Synonyms
) -> list[str]:
    """``n`` candidates of ``backend`` for one text (candidate ``i`` seeded by (seed, source_id, backend, i))."""
    make = BACKENDS[backend]
    return [make(text, rng_for(seed, source_id, backend, i), p, synonyms) for i in range(n)]


@lru_cache(maxsize=4)
def synonym_table(k: int = 5, min_cosine: float = 0.45) -> dict[str, tuple[str, ...]]:
    """word -> its ``k`` nearest whole words (cosine >= ``min_cosine``) in MiniLM's input embeddings.

    Bounded by MiniLM's vocabulary (about 21k alphabetic whole words), whatever the corpus. Computed in
    chunks of a matrix product (10-20 s on 2 cores) and kept as JSON under ``$AUGMENT_CACHE`` (default
    ``~/.cache/catalog-augment``), so later Python workers on the machine load it in well under a second.
    """
    import json
    import os
    from pathlib import Path

    from common.platform.storage import cache_root

    cache = Path(cache_root()) / f"minilm-synonyms-{k}-{min_cosine:g}.json"
    if cache.is_file():
        try:
            return {w: tuple(near) for w, near in json.loads(cache.read_text(encoding="utf-8")).items()}
        except ValueError:
            pass  # a torn write by a concurrent worker: recompute
    table = _compute_synonyms(k, min_cosine)
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(table), encoding="utf-8")
        os.replace(tmp, cache)  # atomic: readers see the old file or the whole new one
    except OSError:
        pass  # a read-only home: every worker computes its own
    return table


def _compute_synonyms(k: int, min_cosine: float) -> dict[str, tuple[str, ...]]:
    import numpy as np
    from safetensors.numpy import load_file

    from common.models.pretrained import minilm_folder

    folder = minilm_folder()
    vocab = (folder / "vocab.txt").read_text(encoding="utf-8").splitlines()
    weights = load_file(str(folder / "model.safetensors"))
    key = next(k for k in weights if k.endswith("embeddings.word_embeddings.weight"))
    keep = [i for i, w in enumerate(vocab) if w.isalpha() and w.isascii() and len(w) >= 2]
    words = [vocab[i] for i in keep]
    emb = weights[key][keep].astype(np.float32)
    emb /= np.linalg.norm(emb, axis=1, keepdims=True) + 1e-12
    table: dict[str, tuple[str, ...]] = {}
    for start in range(0, len(words), 2048):
        sims = emb[start : start + 2048] @ emb.T
        for row, i in enumerate(range(start, min(start + 2048, len(words)))):
            sims[row, i] = -1.0
        top = np.argpartition(-sims, k, axis=1)[:, :k]
        for row, candidates in enumerate(top):
            ranked = sorted(candidates, key=lambda j: -sims[row, j])
            near = tuple(words[j] for j in ranked if sims[row, j] >= min_cosine)
            if near:
                table[words[start + row]] = near
    return table
