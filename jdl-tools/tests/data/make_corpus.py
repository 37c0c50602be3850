"""Writes corpus.txt: the differential-test corpus for cder-jdl.

Every binary and unary operator over representatives of every type (undefined
and error included, so every three-valued case), every function over typical,
edge and mistyped arguments, then hand-written cases (handwritten.txt).
Run: python3 make_corpus.py > corpus.txt
"""
import itertools
import os

VALUES = ["1", "0", "-3", "2.5", "0.0", "true", "false", '"abc"', '"ABC"', "undefined", "error", "{1,2}", "[a=1]"]
BINOPS = ["||", "&&", "|", "^", "&", "==", "!=", "=?=", "=!=", "is", "isnt", "<", "<=", ">", ">=",
          "<<", ">>", ">>>", "+", "-", "*", "/", "%"]
UNOPS = ["-", "+", "!", "~"]

ARGS = {
    "member": [("1", "{1,2}"), ("3", "{1,2}"), ('"A"', '{"a","b"}'), ("1.0", "{1}"), ("undefined", "{1}"),
               ("1", "undefined"), ("1", "{undefined,1}"), ("2", "{undefined,1}"), ("1", "1"), ("{1}", "{{1}}"),
               ("error", "{1}"), ("1", '{"a"}'), ("true", "{1}")],
    "identicalMember": [("1", "{1,2}"), ('"A"', '{"a"}'), ('"a"', '{"a"}'), ("1.0", "{1}"), ("undefined", "{undefined}"),
                        ("1", "undefined"), ("1", "{1,\"a\"}")],
    "regexp": [('"a.c"', '"ABC"'), ('"a.c"', '"ABC"', '"i"'), ('"^b"', '"a\\nb"', '"m"'), ('"^b"', '"a\\nb"'),
               ('"a.b"', '"a\\nb"', '"s"'), ('"a b"', '"ab"', '"x"'), ('".*gpgpu$"', '"ce.example.org:8443/cream-pbs-gpgpu"'),
               ('"("', '"a"'), ('"a"', "undefined"), ("undefined", '"a"'), ('"a"', "1"), ('"A"', '"a"', '"I"'),
               ('"a"', '"a"', "1"), ('"[0-9]+"', '"abc123"'), ('"^[a-z]+$"', '"abc123"'), ('"x|y"', '"zzy"')],
    "regexpMember": [('"a.c"', '{"abc","x"}'), ('"A"', '{"abc"}', '"i"'), ('"a"', '{"b", 1}'), ('"a"', '{"b", undefined}'),
                     ('"a"', '{"a", undefined}'), ('"a"', "{}"), ('"a"', "undefined"), ("1", '{"a"}'), ('"a"', '"a"')],
    "stringListMember": [('"a"', '"b,a,c"'), ('"A"', '"b,a,c"'), ('"a"', '"b a;c"', '";"'), ('"b"', '"a b"'),
                         ('"b"', '"a;b"'), ('""', '"a,,b"'), ("1", '"1,2"'), ('"a"', "undefined"), ("undefined", '"a"'),
                         ('"a"', "1"), ('"x"', '""')],
    "stringListIMember": [('"A"', '"b,a,c"'), ('"a"', '"B,A"'), ('"z"', '"b,a"'), ('"a"', '"b;A"', '";"')],
    "stringListSize": [('"a, b ,c"',), ('""',), ('"a,,b"',), ('" , "',), ('"a b"',), ('"a"', '";"'), ("undefined",), ("1",)],
    "stringListSum": [('"1,2,3"',), ('"1,2.5"',), ('"1,a"',), ('""',), ('"2,3.0"',), ('"1e2"',)],
    "stringListAvg": [('"1,2"',), ('""',), ('"1,2,4"',), ('"1.5,2"',)],
    "stringListMin": [('"3,1,2"',), ('""',), ('"a"',), ('"2,1.5"',)],
    "stringListMax": [('"3,1,2.5"',), ('""',), ('"1.0,2"',), ('"7,3"',)],
    "ifThenElse": [("true", "1", "2"), ("false", "1", "2"), ("undefined", "1", "2"), ("error", "1", "2"), ("1", "1", "2"),
                   ("0", "1", "2"), ('"a"', "1", "2"), ("true", "1", "1/0"), ("false", "1/0", "2")],
    "isUndefined": [(v,) for v in VALUES],
    "isError": [(v,) for v in VALUES],
    "isString": [(v,) for v in VALUES],
    "isInteger": [(v,) for v in VALUES],
    "isReal": [(v,) for v in VALUES],
    "isBoolean": [(v,) for v in VALUES],
    "isList": [(v,) for v in VALUES],
    "isClassAd": [(v,) for v in VALUES],
    "int": [(v,) for v in VALUES] + [("3.7",), ("-3.7",), ('"12"',), ('"12.7"',), ('" 3"',), ('"3x"',), ("1e300",)],
    "real": [(v,) for v in VALUES] + [('"1e3"',), ('"  3"',), ('"3x"',), ("3",)],
    "string": [(v,) for v in VALUES] + [("1.5",), ("1e20",), ("0.1",), ("123456789.123",), ("1.5e-300",), ("-2.5",)],
    "bool": [(v,) for v in VALUES] + [('"true"',), ('"FALSE"',), ('"yes"',), ('"0"',), ("2.0",)],
    "floor": [(v,) for v in VALUES] + [("-2.5",), ("2.7",), ('"2.5"',)],
    "ceiling": [(v,) for v in VALUES] + [("-0.5",), ("2.1",)],
    "round": [(v,) for v in VALUES] + [("3.5",), ("-2.5",), ("1.4",), ("-0.5",), ('"2.5"',)],
    "pow": [("2", "3"), ("2", "-1"), ("2.0", "3"), ("0", "0"), ("2", "0.5"), ("2", "62"), ('"2"', "1"), ("undefined", "1"),
            ("3", "3"), ("-2", "2"), ("-2.0", "3"), ("0", "-1"), ("2", "undefined"), ("1.5", "2.0")],
    "strcat": [(), ('"a"', "1", "2.5", "true"), ('"a"', "undefined"), ("undefined", "error"), ("error", "undefined"),
               ("{1}",), ('"x"', '"y"', '"z"', '"w"')],
    "substr": [('"hello"', "1"), ('"hello"', "1", "2"), ('"hello"', "-2"), ('"hello"', "1", "-1"), ('"hello"', "10"),
               ('"hello"', "1.5"), ('"hello"', '"1"'), ("12345", "1"), ('"hello"', "-10"), ('"hello"', "2", "-10"),
               ('"hello"', "2", "0"), ('"hello"', "5"), ("undefined", "1"), ('"hello"', "undefined")],
    "toUpper": [(v,) for v in VALUES] + [('"aB"',), ("1.5",)],
    "toLower": [(v,) for v in VALUES] + [('"aB"',)],
    "size": [(v,) for v in VALUES] + [('""',), ("{}",), ("[a=1;b=2]",)],
    "strcmp": [('"a"', '"B"'), ('"b"', '"a"'), ('"a"', '"a"'), ("1", '"1"'), ("undefined", '"a"')],
    "stricmp": [('"a"', '"B"'), ('"A"', '"a"'), ('"b"', '"A"')],
    "sum": [("{1,2,3}",), ("{1,2.0}",), ("{}",), ("{1,\"a\"}",), ("{1,undefined}",), ("1",), ("{true,false}",), ("undefined",)],
    "avg": [("{1,2}",), ("{}",), ("{1,2,3}",), ("{1.0,2}",), ("{1,undefined,3}",), ('{"a"}',)],
    "min": [("{3,1}",), ("{}",), ("{2,1.0}",), ('{1,"a"}',), ("{undefined}",), ("{5,undefined,2}",)],
    "max": [("{3,1.5}",), ("{}",), ("{undefined}",), ("{1,7,3}",), ("{true,2}",)],
    "anyCompare": [('"<"', "{1,2}", "2"), ('"=="', '{"a"}', '"A"'), ('"is"', '{"a"}', '"A"'), ('"<"', "{}", "1"),
                   ('"foo"', "{1}", "1"), ('"<"', '{"a"}', "1"), ('"=="', "{undefined}", "1"), ('"<"', "1", "{1}"),
                   ('"!="', "{1,2}", "1"), ('"isnt"', "{1}", "1.0"), ('">="', "{0,1}", "1"), ('">"', "{0}", "1")],
    "allCompare": [('"<"', "{1,2}", "3"), ('"<"', "{}", "1"), ('">="', "{1,2}", "1"), ('"<="', "{1,2}", "1"),
                   ('"=="', '{"a","A"}', '"a"'), ('"is"', "{1,1}", "1"), ('"<"', "undefined", "1")],
}

def main():
    out = []
    for op in BINOPS:
        for a, b in itertools.product(VALUES, VALUES):
            out.append(f"{a} {op} {b}")
    for op in UNOPS:
        for a in VALUES:
            out.append(f"{op}{a}")
    for c, a, b in itertools.product(["true", "false", "undefined", "error", "1", "0.0", '"s"'], ["1", "undefined"], ["2", "error"]):
        out.append(f"{c} ? {a} : {b}")
    for fn, cases in ARGS.items():
        for args in cases:
            out.append(f"{fn}({', '.join(args)})")
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "handwritten.txt")) as f:
        for line in f:
            line = line.rstrip("\n")
            if line.strip() and not line.startswith("#"):
                out.append(line)
    print("# Generated by make_corpus.py: one expression per line. Do not edit; edit make_corpus.py or handwritten.txt.")
    for e in out:
        print(e)

main()
