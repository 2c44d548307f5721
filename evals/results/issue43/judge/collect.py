"""Collect prompts + model answers for the tuning sets (judge experiment)."""
import json, sys, logging
from pathlib import Path
from evals.harness import build_setup
from evals.questions import load_questions
from copilot.answer.question import QuestionRequest, GenerationParams
from copilot.answer.assembly import AnswerAssembler
sets = {"sample": ("evals/data/questions.jsonl", "evals/data/unanswerable.jsonl", "evals/data/corpus"),
        "site2": ("evals/data/site2/questions.jsonl", "evals/data/site2/unanswerable.jsonl", "evals/data/site2/corpus"),
        "longrec": ("evals/data/longrec/questions.jsonl", None, "evals/data/longrec/corpus")}
name = sys.argv[1]
qf, uf, corpus = sets[name]
setup = build_setup(Path(corpus), None)
svc = setup.service
qs = load_questions(Path(qf)) + (load_questions(Path(uf)) if uf else [])
out = []
for q in qs:
    if q.first: continue
    question = svc.question(QuestionRequest(q.question, generation=GenerationParams(loop_span=setup.loop_span)))
    prep = svc.prepare(question)
    a = AnswerAssembler(prep)
    for ev in svc.stream(prep): a.add(ev)
    ans = a.answer()
    out.append({"id": q.id, "question": q.question, "answerable": q.answerable, "span": q.answer_span,
                "prompt_ids": list(prep.prompt.input_ids), "model_text": ans.model_text, "text": ans.text,
                "not_found": ans.not_found or ans.text.lower().lstrip("[]0123456789 ").startswith("not found"),
                "highlights": [[s.n, s.header, list(s.highlights)] for s in ans.sources],
                "quotes": [[x.literal, x.n] for x in ans.quotes]})
    print(q.id, out[-1]["not_found"], ans.model_text[:80].replace("\n"," "), flush=True)
json.dump(out, open(f"evals/results/issue43/judge/{name}.json", "w"))
