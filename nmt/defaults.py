"""The defaults chosen by measurement where one value does not fit every run: the training
budget, each model family's own, and those that follow the corpus size. The config
(:mod:`nmt.config`) applies them; why each value: docs/choices.md and docs/small-corpus.md."""
from __future__ import annotations

from typing import Any

# The budget when none is given: until validation BLEU has not improved for DEFAULT_PATIENCE
# validations, in at most DEFAULT_MAX_EPOCHS epochs. A fixed count of epochs ended a 30,000-pair
# run while it still improved, and ran fra-eng's past its best (docs/choices.md, "The default
# budget"). Counted in validations and epochs, not minutes, so the same seed, data and CPU
# still give the same model.
DEFAULT_PATIENCE = 3
DEFAULT_MAX_EPOCHS = 50

# Each family's settings that follow the size of its corpus: under SMALL_CORPUS_PAIRS training
# pairs the first value, from there on the second. The Transformer's tied decoder embeddings and
# more label smoothing gained 1.7 BLEU on 30,000 fra-eng pairs and cost 0.5-1.6 on 70,000 and on
# all 163,000 (docs/small-corpus.md, "The Transformer's tied embeddings and label smoothing"),
# and R-Drop at alpha 5 gained 1.6 / 1.8 BLEU English→French and was level French→English on
# 30,000 pairs, for about 2.5 times the training time (docs/r-drop.md, "Until patience, both
# directions"; not measured on more, where it stays off);
# the GRU's regularisers (Sennrich and Zhang 2019) gained 1.2 / 1.6 on 30,000 English→French
# pairs and 1.0 / 1.9 French→English (docs/small-corpus.md,
# "Screening, English→French: vocabulary, sampling, word dropout"), tying its decoder's
# embeddings 0.7 / 0.1 and 0.6 / 0.4 more ("The GRU's tied embeddings"), and a width of 512
# 0.6 / 0.7 and 1.7 / 1.0 more, for three times the training time (docs/gru-width.md, "Until
# patience, both directions"); none was measured on more, where the earlier values stay. A GRU
# ties by default only where its two sizes come out equal; told to tie, a size left out follows
# the one given. None in a config stands for "by corpus size" until nmt train has counted the
# pairs (choose_by_corpus_size); the config dataclasses' own defaults are the large-corpus values.
# A Transformer's patience follows the size only under the default budget (none given): on
# 30,000 pairs its validation BLEU stalls for 3-5 epochs and then climbs again, and patience 6
# gained 0.7 / 0.8 test BLEU English→French and 0.5 / 0.4 French→English (docs/choices.md, "The
# default budget"); the GRU's did not gain.
SMALL_CORPUS_PAIRS = 50_000
BY_CORPUS_SIZE: dict[str, dict[str, tuple[Any, Any]]] = {
    "gru": {"dropout": (0.3, 0.2), "source_word_dropout": (0.1, 0.0), "label_smoothing": (0.2, 0.1),
            "tie_embeddings": (True, False), "embed_size": (512, 256), "hidden_size": (512, 256)},
    "transformer": {"tie_embeddings": (True, False), "label_smoothing": (0.2, 0.1), "rdrop_alpha": (5.0, 0.0),
                    "patience": (6, DEFAULT_PATIENCE)},
}

# Each family's defaults where they differ from the dataclasses'; chosen by measurement
# (docs/choices.md). A config built for the CLI or a YAML file starts from these.
ARCH_DEFAULTS: dict[str, dict[str, Any]] = {
    "gru": dict.fromkeys(BY_CORPUS_SIZE["gru"]),
    "transformer": {"embed_size": 256, "hidden_size": 256, "dropout": 0.1, "source_word_dropout": 0.0,
                    "schedule": "noam", "warmup_steps": 400, "lr": 1e-3, "max_pass_pieces": 4500,
                    **dict.fromkeys(BY_CORPUS_SIZE["transformer"])},
}


def choose_by_corpus_size(arch: str, current: dict[str, Any], pairs: int) -> tuple[dict[str, Any], str]:
    """The settings of ``current`` (every key of ``BY_CORPUS_SIZE[arch]``, the model's two sizes
    and its tying) left to the corpus size, None, chosen for ``pairs`` training pairs; and the
    choice in words, as ``nmt train`` logs it. A GRU's tying needs its output layer's size: told
    to tie, a size left out follows the one given; tying left to the size is dropped where the
    sizes come out unequal."""
    small = pairs < SMALL_CORPUS_PAIRS
    chosen = {key: values[0 if small else 1] for key, values in BY_CORPUS_SIZE[arch].items() if current[key] is None}
    embed, hidden = (chosen.get(key, current[key]) for key in ("embed_size", "hidden_size"))
    if embed != hidden and current["tie_embeddings"]:
        given = current["embed_size"] or current["hidden_size"]
        chosen.update({key: given for key in ("embed_size", "hidden_size") if key in chosen})
    elif embed != hidden and chosen.get("tie_embeddings"):
        chosen["tie_embeddings"] = False
    settings = ", ".join(f"{key} {str(value).lower()}" for key, value in chosen.items())
    side = "under" if small else "at least"
    return chosen, f"{settings} ({pairs:,} training pairs, {side} {SMALL_CORPUS_PAIRS:,})"
