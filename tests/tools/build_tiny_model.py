"""Build the tiny random-weight Llama model that tests and the demo serve.

No model hub is reachable from CI, so the model is made locally: a 2-layer
Llama (hidden 128, 4 heads of 32 -- vLLM's CPU attention rejects head size 16)
with random float32 weights, and a byte-level BPE tokenizer trained on a
synthetic corpus. The output is deterministic for a given seed, ~2.5 MB.

Usage: python tests/tools/build_tiny_model.py OUT_DIR
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "<|{{ message['role'] }}|>{{ message['content'] }}\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)

WORDS = (
    "the rollout engine profiles prefill and decode steps for reinforcement "
    "learning of language models with tensor parallel ranks on gpus and npus "
    "reward policy value trainer batch token sequence trace merge step global"
).split()


def synthetic_corpus(n_lines: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 20))) for _ in range(n_lines)]


def build(out_dir: Path, seed: int = 0) -> Path:
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    out_dir.mkdir(parents=True, exist_ok=True)
    specials = ["<unk>", "<s>", "</s>", "<pad>"]
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=1000,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(synthetic_corpus(2000, seed), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        pad_token="<pad>",
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out_dir)

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(fast),
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        head_dim=32,
        max_position_embeddings=512,
        bos_token_id=fast.bos_token_id,
        eos_token_id=fast.eos_token_id,
        pad_token_id=fast.pad_token_id,
        tie_word_embeddings=False,
        torch_dtype="float32",
    )
    model = LlamaForCausalLM(config).to(torch.float32)
    model.save_pretrained(out_dir, safe_serialization=True)
    return out_dir


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: build_tiny_model.py OUT_DIR")
    print(build(Path(sys.argv[1])))
