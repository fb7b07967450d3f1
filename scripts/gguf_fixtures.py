"""Pieces the scripts that write GGUF fixtures share (imported by them; run from this folder)."""


def byte_chars():
    """The 256 GPT-2 byte-level characters, in byte order (GPT-2's bytes_to_unicode)."""
    bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return [chr(c) for _, c in sorted(zip(bs, cs))]


def vocab_only_hparams(w):
    """The llama hyperparameters llama.cpp reads before a vocabulary, for a file of metadata only (no tensors)."""
    w.add_context_length(64)
    w.add_embedding_length(8)
    w.add_block_count(1)
    w.add_feed_forward_length(16)
    w.add_head_count(2)
    w.add_head_count_kv(2)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(4)
