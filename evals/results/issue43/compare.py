"""Issue 43's goal table from the answers-eval JSON reports in before/ and after/ (one row per set and revision).

    python evals/results/issue43/compare.py before,after sample,site2,longrec,site3,site4,site5
"""
import json
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
def load(tag, set_):
    out=[]
    for f in ("questions","unanswerable"):
        p=os.path.join(HERE, tag, f"{set_}_{f}.json")
        if os.path.exists(p): out+=json.load(open(p))["rows"]
    return out
def med(v):
    v=[x for x in v if x is not None]; return round(statistics.median(v)) if v else None
def row(tag,set_):
    rows=load(tag,set_)
    if not rows: return None
    copy=[r for r in rows if r["copy"] and r["answerable"]]
    ans=[r for r in rows if r["answerable"]]; un=[r for r in rows if not r["answerable"]]
    k=lambda kind: [r for r in copy if r["kind"]==kind]
    f=lambda rs,key: f"{sum(1 for r in rs if r[key])}/{len(rs)}" if rs else "-"
    cbs=[r for r in ans if r.get("cited_by_support", r["rank"] is not None and r["rank"] in r["cited"])]
    return {"set":set_,"rev":tag,"line shown":f(copy,"span_in_highlights"),"literal":f(copy,"span_in_answer"),
      "final-fix":f(k("final-fix"),"span_in_answer"),"table":f(k("table"),"span_in_answer"),
      "cited":f"{sum(1 for r in ans if r['rank'] is not None and r['rank'] in r['cited'])}/{len(ans)}",
      "cited by support":f"{len(cbs)}/{len(ans)}",
      "not found (unans)":f(un,"not_found"),"false not found":f(ans,"not_found"),
      "invented":sum(len(r["invented"]) for r in rows),
      "prompt tok":med([r["prompt_tokens"] for r in rows]),"wall ms":med([r["wall_ms"] for r in rows]),
      "first text ms":med([r["first_text_ms"] for r in rows]), "retrieval ms":med([r["retrieval_ms"] for r in rows]), "n":len(rows)}
tags=sys.argv[1].split(","); sets=sys.argv[2].split(",")
rs=[r for s in sets for t in tags for r in [row(t,s)] if r]
keys=list(rs[0].keys())
print("| "+" | ".join(keys)+" |"); print("|"+"---|"*len(keys))
for r in rs: print("| "+" | ".join(str(r[k]) for k in keys)+" |")
