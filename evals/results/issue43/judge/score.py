"""Score judge variants with llama.cpp directly: margin = logit(Yes) - logit(No) at the judge's first answer token."""
import json, sys
import numpy as np
from llama_cpp import Llama
from transformers import AutoTokenizer
GGUF = ".opscopilot/models/qwen2.5-coder-1.5b-instruct.gguf"
tok = AutoTokenizer.from_pretrained(".opscopilot/models/qwen2.5-coder-1.5b-instruct.a0d004583a25.tokenizer")
llm = Llama(GGUF, n_ctx=4096, n_threads=2, n_batch=512, verbose=False)
def ids(s): return tok(s, add_special_tokens=False)["input_ids"]
YES = [ids(w)[0] for w in ("Yes", "yes")]; NO = [ids(w)[0] for w in ("No", "no")]
VARIANTS = {
 "plain": "Does the text above answer my question? Reply Yes or No.",
 "append": "Check that answer against the sources above. Do they state what the question asks, for exactly the host, ticket, date and event it names? Reply with Yes or No.",
}
def margin(base, suffix):
    if list(llm._input_ids[:llm.n_tokens]) != list(base):
        llm.reset(); llm.eval(base)
    n = len(base)
    llm._ctx.kv_cache_seq_rm(-1, n, -1); llm.n_tokens = n
    llm.eval(suffix)
    lg = np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(llm.n_vocab(),)).copy()
    return float(max(lg[YES]) - max(lg[NO])), int(lg.argmax())
res = {}
for name in sys.argv[1:]:
    rows = sorted(json.load(open(f"evals/results/issue43/judge/{name}.json")), key=lambda r: r["answerable"])
    for r in rows:
        if r["not_found"]: continue
        out = {}
        for v, instr in VARIANTS.items():
            base = r["prompt_ids"] + ids(r["model_text"] + "<|im_end|>\n<|im_start|>user\n")
            m, top = margin(base, ids(instr + "<|im_end|>\n<|im_start|>assistant\n"))
            out[v] = m
        res[r["id"]] = {"answerable": r["answerable"], **out}
        print(name, r["id"], r["answerable"], {k: round(v, 2) for k, v in out.items()}, flush=True)
json.dump(res, open(f"evals/results/issue43/judge/scores_{'_'.join(sys.argv[1:])}.json", "w"))
