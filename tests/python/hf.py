"""Hugging Face GPT-2 folders for the --init_from_hf / export --format hf tests (#31), through
transformers itself.

usage:
  hf.py make DIR [SHARD]   a tiny random GPT2LMHeadModel (torch seed 0: 2 layers, 2 heads, n_embd 32,
                           n_positions 16, vocab 96, gelu_new), saved by save_pretrained(DIR), in shards
                           of SHARD (e.g. 20KB) when given
  hf.py make-arch ARCH DIR [SHARD]
                           the same for the Llama family (torch seed 0: 2 layers, hidden 32, 4 heads, MLP
                           48, 16 positions, vocab 96, rope_theta 500, rms_norm_eps 1e-5):
                           llama (GQA: 2 key/value heads, untied), llama_tied (4 key/value heads, tied),
                           llama_bias (attention_bias: q/k/v/o), qwen2 (q/k/v biases, GQA, tied),
                           mistral (GQA, sliding_window 16)
  hf.py logits DIR B T OUT from_pretrained(DIR) (no missing, unexpected or mismatched tensors allowed):
                           its float32 logits on the B x T tokens (i * 7 + 3) % vocab into OUT (raw), and
                           its loss with labels = the tokens into OUT.loss
  hf.py config DIR KEY=JSON ...
                           rewrites DIR/config.json with KEY set to the JSON value
  hf.py check              imports transformers (exit 1 where there is none)
  hf.py serve              the commands above from standard input, one a line: LOG, a tab, then the
                           command and its arguments (split as a shell splits them); each command's
                           output (Python's and the libraries') goes to LOG, and a line with its exit
                           status (0 or 1) to standard output. Importing torch and transformers, about
                           4 s, once for all of a test's commands (tests/unit/hf_fixtures.h)
"""
import json
import sys


def make(d, shard=None):
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    cfg = GPT2Config(n_layer=2, n_head=2, n_embd=32, n_positions=16, vocab_size=96, activation_function="gelu_new",
                     bos_token_id=93, eos_token_id=94)
    perturb_and_save(GPT2LMHeadModel(cfg), d, shard, weight_scale=1)


def perturb_and_save(model, d, shard, weight_scale):
    """Biases and norms moved away from their 0/1 init, so that a misplaced one shows, and the
    matrices scaled by weight_scale (10: logits far from 0); then save_pretrained(d), in shards
    of `shard` when given."""
    import torch

    with torch.no_grad():
        for _, p in model.named_parameters():
            if p.dim() == 1:
                p.add_(torch.randn_like(p) * 0.1)
            elif weight_scale != 1:
                p.mul_(weight_scale)
    kwargs = {"max_shard_size": shard} if shard else {}
    model.save_pretrained(d, **kwargs)


def make_arch(arch, d, shard=None):
    import torch
    import transformers as tf

    torch.manual_seed(0)
    common = dict(vocab_size=96, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
                  max_position_embeddings=16, rope_theta=500.0, rms_norm_eps=1e-5)
    if arch == "llama":
        cfg = tf.LlamaConfig(num_key_value_heads=2, tie_word_embeddings=False, **common)
        model = tf.LlamaForCausalLM(cfg)
    elif arch == "llama_tied":
        cfg = tf.LlamaConfig(num_key_value_heads=4, tie_word_embeddings=True, **common)
        model = tf.LlamaForCausalLM(cfg)
    elif arch == "llama_bias":
        cfg = tf.LlamaConfig(num_key_value_heads=2, attention_bias=True, **common)
        model = tf.LlamaForCausalLM(cfg)
    elif arch == "qwen2":
        cfg = tf.Qwen2Config(num_key_value_heads=2, tie_word_embeddings=True, **common)
        model = tf.Qwen2ForCausalLM(cfg)
    elif arch == "mistral":
        cfg = tf.MistralConfig(num_key_value_heads=2, sliding_window=16, head_dim=8, **common)
        model = tf.MistralForCausalLM(cfg)
    else:
        sys.exit(f"hf.py: unknown architecture {arch!r}")
    perturb_and_save(model, d, shard, weight_scale=10)


def logits(d, b, t, out):
    import torch
    from transformers import AutoModelForCausalLM

    model, info = AutoModelForCausalLM.from_pretrained(d, output_loading_info=True)
    bad = {k: v for k, v in info.items() if v}
    if bad:
        sys.exit(f"hf.py: from_pretrained({d}) reported {bad}")
    model.eval()
    vocab = model.config.vocab_size
    tokens = ((torch.arange(b * t) * 7 + 3) % vocab).reshape(b, t)
    with torch.no_grad():
        o = model(tokens, labels=tokens)
    o.logits.float().contiguous().numpy().tofile(out)
    open(out + ".loss", "w").write(repr(o.loss.item()) + "\n")


def config(d, pairs):
    path = f"{d}/config.json"
    c = json.load(open(path))
    for p in pairs:
        k, v = p.split("=", 1)
        c[k] = json.loads(v)
    json.dump(c, open(path, "w"))


def run(argv):
    cmd, args = argv[0], argv[1:]
    if cmd == "make":
        make(args[0], args[1] if len(args) > 1 else None)
    elif cmd == "make-arch":
        make_arch(args[0], args[1], args[2] if len(args) > 2 else None)
    elif cmd == "logits":
        logits(args[0], int(args[1]), int(args[2]), args[3])
    elif cmd == "config":
        config(args[0], args[1:])
    elif cmd == "check":
        import transformers  # noqa: F401
    else:
        sys.exit(f"hf.py: unknown command {cmd!r}; see the docstring")


def serve():
    import os
    import shlex
    import traceback

    replies = os.fdopen(os.dup(1), "w")
    for line in sys.stdin:
        log, _, command = line.rstrip("\n").partition("\t")
        status = 0
        with open(log, "w") as out:
            sys.stdout.flush()
            sys.stderr.flush()
            saved = os.dup(1), os.dup(2)
            os.dup2(out.fileno(), 1)
            os.dup2(out.fileno(), 2)
            try:
                run(shlex.split(command))
            except SystemExit as e:
                if e.code not in (None, 0):
                    print(e.code, file=sys.stderr)
                    status = 1
            except Exception:
                traceback.print_exc()
                status = 1
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os.dup2(saved[0], 1)
                os.dup2(saved[1], 2)
                os.close(saved[0])
                os.close(saved[1])
        replies.write(f"{status}\n")
        replies.flush()


def main():
    if sys.argv[1:] == ["serve"]:
        serve()
    else:
        run(sys.argv[1:])


if __name__ == "__main__":
    main()
