"""Builders for tiny GGUF files: a random Llama with a byte-level BPE tokenizer, written the way
llama.cpp's converter writes Llama checkpoints (F32 tensors, q/k rows permuted for its rotary layout)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

CHATML = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
    "'<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")  # ids 0, 1, 2 as in SmolLM2
CORPUS = [
    "the cat sat on the mat",
    "what is the capital of france? paris.",
    "hello world, hello there",
    "opposite of hot is cold",
    "translate: good morning",
    "one two three four five six seven",
] * 4


def bpe_tokenizer(vocab_size: int = 300):
    """A byte-level BPE tokenizer (GGUF model type "gpt2") with ChatML specials and template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIALS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    backend.train_from_iterator(CORPUS, trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token="<|im_start|>",
        eos_token="<|im_end|>",
        pad_token="<|im_end|>",
        unk_token="<|endoftext|>",
    )
    tokenizer.chat_template = CHATML
    return tokenizer


def random_llama(tokenizer, *, tie: bool, seed: int = 0, **overrides):
    """A 2-layer grouped-query Llama (8 query heads over 2 KV heads) with non-unit norm gains;
    `overrides` change its config (e.g. `hidden_size`, `num_attention_heads`)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    settings = dict(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=8,
        num_key_value_heads=2,
        max_position_embeddings=256,
        rms_norm_eps=1e-5,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=2,
        tie_word_embeddings=tie,
    )
    config = LlamaConfig(**{**settings, **overrides})
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    with torch.no_grad():  # unit gains would hide a norm that is dropped or misplaced
        for name, parameter in model.named_parameters():
            if "norm" in name:
                parameter.copy_(1 + 0.3 * torch.randn_like(parameter))
    return model.eval()


def _rope_theta(config) -> float:
    parameters = getattr(config, "rope_parameters", None) or {}
    return float(parameters.get("rope_theta", getattr(config, "rope_theta", 10000.0)))


def _permute(weight: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp's row order for q/k projections: per head, interleave the two rotary halves."""
    return (
        weight.reshape(n_head, 2, weight.shape[0] // n_head // 2, *weight.shape[1:])
        .swapaxes(1, 2)
        .reshape(weight.shape)
    )


def write_llama_gguf(model, tokenizer, path: Path, quantise: dict[str, str] | None = None) -> Path:
    """Write `model` (a `LlamaForCausalLM`) and `tokenizer` (byte-level BPE) as a GGUF file: F32
    tensors, except those named in `quantise` (GGUF tensor kind -> type, e.g. `{"attn_output": "Q4_1"}`),
    which are quantised with the `gguf` package as llama.cpp's quantiser lays them out."""
    import gguf
    from gguf.quants import quantize

    quantise = quantise or {}

    config = model.config
    head_dim = config.hidden_size // config.num_attention_heads
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name("tiny-llama")
    writer.add_block_count(config.num_hidden_layers)
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_head_count(config.num_attention_heads)
    writer.add_head_count_kv(config.num_key_value_heads)
    writer.add_rope_freq_base(_rope_theta(config))
    writer.add_layer_norm_rms_eps(config.rms_norm_eps)
    writer.add_rope_dimension_count(head_dim)
    writer.add_vocab_size(config.vocab_size)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)

    vocab = tokenizer.backend_tokenizer.get_vocab(with_added_tokens=True)
    tokens = [t for t, _ in sorted(vocab.items(), key=lambda item: item[1])]
    assert [vocab[t] for t in tokens] == list(range(len(tokens)))
    saved = json.loads(tokenizer.backend_tokenizer.to_str())["model"]["merges"]
    merges = [m if isinstance(m, str) else " ".join(m) for m in saved]  # newer tokenizers store pairs
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types([gguf.TokenType.CONTROL if t in SPECIALS else gguf.TokenType.NORMAL for t in tokens])
    writer.add_token_merges(merges)
    writer.add_bos_token_id(tokenizer.bos_token_id)
    writer.add_eos_token_id(tokenizer.eos_token_id)
    writer.add_pad_token_id(tokenizer.pad_token_id)
    writer.add_unk_token_id(tokenizer.unk_token_id)
    writer.add_add_bos_token(False)
    writer.add_chat_template(tokenizer.chat_template)

    names = gguf.TENSOR_NAMES
    kinds = gguf.MODEL_TENSOR

    def add(kind, weight: torch.Tensor, bid: int | None = None) -> None:
        name = names[kind].format(bid=bid) + ".weight"
        data = weight.detach().to(torch.float32).numpy().copy()
        qtype = quantise.get(names[kind].split(".")[-1])
        if qtype is None:
            writer.add_tensor(name, data)
            return
        qtype = gguf.GGMLQuantizationType[qtype]
        writer.add_tensor(name, quantize(data, qtype), raw_dtype=qtype)  # bytes: the shape is derived

    add(kinds.TOKEN_EMBD, model.model.embed_tokens.weight)
    for i, layer in enumerate(model.model.layers):
        attention, mlp = layer.self_attn, layer.mlp
        add(kinds.ATTN_NORM, layer.input_layernorm.weight, i)
        q = _permute(attention.q_proj.weight.detach().numpy(), config.num_attention_heads)
        k = _permute(attention.k_proj.weight.detach().numpy(), config.num_key_value_heads)
        add(kinds.ATTN_Q, torch.from_numpy(q), i)
        add(kinds.ATTN_K, torch.from_numpy(k), i)
        add(kinds.ATTN_V, attention.v_proj.weight, i)
        add(kinds.ATTN_OUT, attention.o_proj.weight, i)
        add(kinds.FFN_NORM, layer.post_attention_layernorm.weight, i)
        add(kinds.FFN_GATE, mlp.gate_proj.weight, i)
        add(kinds.FFN_UP, mlp.up_proj.weight, i)
        add(kinds.FFN_DOWN, mlp.down_proj.weight, i)
    add(kinds.OUTPUT_NORM, model.model.norm.weight)
    if not config.tie_word_embeddings:  # llama.cpp omits output.weight for tied embeddings
        add(kinds.OUTPUT, model.lm_head.weight)

    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def build_llama_gguf(folder: Path, *, tie: bool = False, seed: int = 0) -> tuple[Path, Path]:
    """(GGUF file, the Hugging Face directory it was written from) in `folder`."""
    tokenizer = bpe_tokenizer()
    model = random_llama(tokenizer, tie=tie, seed=seed)
    hf_dir = folder / "hf"
    model.save_pretrained(hf_dir)
    tokenizer.save_pretrained(hf_dir)
    return write_llama_gguf(model, tokenizer, folder / f"tiny-{'tied' if tie else 'untied'}.gguf"), hf_dir
