"""Reference evaluator for cder-classad's differential tests (jdl-tools/classad/tests/differential.rs): HTCondor's classad2.

Reads one JSON value per line on stdin and prints one JSON object per line:
* a string: an expression, evaluated with no ad in scope;
* {"expr": E, "my": AD, "target": AD}: E evaluated in ad MY against TARGET;
* {"request": AD, "offer": AD}: matchmaking; the answer's value is
  {"matches": offer.matches(request), "symmetric": request.symmetricMatch(offer),
   "rank": request's Rank evaluated against the offer}.
Values are {"type": T, "value": V} as `cder-jdl eval --json` prints them, with
non-finite reals as the strings "inf", "-inf", "nan", and {"type": "parse_error"}
when classad2 rejects the text.
"""
import json
import math
import sys

import htcondor2  # noqa: F401  -- registers the stringList* functions with classad2
import classad2


def conv(v, src, depth=0, scope=None, target=None):
    """v is the value of the expression text src (needed to evaluate list
    elements in their scope: classad2 returns them as unevaluated trees)."""
    if depth > 50:
        return {"type": "error", "value": None}
    if isinstance(v, classad2.ExprTree):
        v = classad2.ExprTree(src).eval(scope, target)
    # classad2.Value is an IntEnum, so it must be told apart before int.
    if isinstance(v, classad2.Value):
        if v == classad2.Value.Undefined:
            return {"type": "undefined", "value": None}
        return {"type": "error", "value": None}
    if isinstance(v, bool):
        return {"type": "boolean", "value": v}
    if isinstance(v, int):
        return {"type": "integer", "value": v}
    if isinstance(v, float):
        if math.isnan(v):
            return {"type": "real", "value": "nan"}
        if math.isinf(v):
            return {"type": "real", "value": "inf" if v > 0 else "-inf"}
        return {"type": "real", "value": v}
    if isinstance(v, str):
        return {"type": "string", "value": v}
    if isinstance(v, list):
        return {"type": "list", "value": [conv(x, "(%s)[%d]" % (src, i), depth + 1, scope, target) for i, x in enumerate(v)]}
    if isinstance(v, classad2.ClassAd):
        return {"type": "classad", "value": {k: conv(v.eval(k), "(%s).%s" % (src, k), depth + 1) for k in v.keys()}}
    return {"type": "unknown", "value": repr(v)}


def main():
    out = sys.stdout
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        case = json.loads(line)
        scope = target = None
        try:
            if isinstance(case, dict) and "request" in case:
                request, offer = classad2.ClassAd(case["request"]), classad2.ClassAd(case["offer"])
                rank = request.lookup("Rank") if "Rank" in request else None
                res = {"type": "match", "value": {
                    "matches": offer.matches(request),
                    "symmetric": request.symmetricMatch(offer),
                    "rank": conv(rank.eval(request, offer), "Rank", 0, request, offer) if rank is not None else None,
                }}
                out.write(json.dumps(res) + "\n")
                continue
            if isinstance(case, dict):
                src = case["expr"]
                scope, target = classad2.ClassAd(case["my"]), classad2.ClassAd(case["target"])
            else:
                src = case
            tree = classad2.ExprTree(src)
        except Exception:
            out.write('{"type": "parse_error", "value": null}\n')
            continue
        try:
            res = conv(tree.eval(scope, target), src, 0, scope, target)
        except Exception as e:  # a crash in the reference is reported, not hidden
            res = {"type": "exception", "value": str(e)}
        out.write(json.dumps(res) + "\n")
    out.flush()


if __name__ == "__main__":
    main()
