#!/usr/bin/env python3
"""Reference phase 1, written the way the seed thesis's prototype worked
(Table 3.4): query the BDII with ldap3, parse the CDER data of each GPU
ComputingShare into an HTCondor ClassAd Resource Offer (classad2), match the
request against each offer, rank, and print the matching CEs.

    twophase_reference.py LDAP_URL attribute-extension|class-extension JOB.jdl

Prints the CEs, best rank first, one per line, then a line
`#work_seconds <t>`: the time from connecting to printing (imports and
interpreter start-up excluded; the caller also measures the whole process).
Used by cder-twophase-bench (tests/src/bin) as the reference it compares
`cder-jdl list-match` against, in the same run.
"""
import sys
import time

import classad2
import ldap3

KEYS_NUMERIC = {"GPGPUTotalInstances", "GPGPUUsedInstances", "GPGPUFreeInstances", "GPGPUPerNode",
                "GPGPUMainMemorySize", "GPGPUMP", "GPGPUCoresPerMP", "GPGPUCores", "GPGPUClockSpeed"}


def typed(v):
    try:
        return int(v)
    except ValueError:
        pass
    try:
        return float(v)
    except ValueError:
        pass
    if v.lower() in ("true", "false"):
        return v.lower() == "true"
    return v


def search(conn, base, flt, attrs):
    return list(conn.extend.standard.paged_search(base, flt, attributes=attrs, paged_size=1000, generator=True))


def main():
    url, strategy, jdl = sys.argv[1:4]
    request = classad2.parseOne(open(jdl).read())
    start = time.perf_counter()
    conn = ldap3.Connection(ldap3.Server(url, get_info=ldap3.NONE), auto_bind=True, read_only=True)
    data = {}  # share id -> {key: value}
    ce_of = {}  # share id -> CE id
    if strategy == "attribute-extension":
        # All OtherInfo values of the shares carrying GPU keys (the thesis: "all OtherInfo values are retrieved").
        for e in search(conn, "o=glue", "(&(objectClass=GLUE2ComputingShare)(GLUE2EntityOtherInfo=GPGPU*))",
                        ["GLUE2ShareID", "GLUE2EntityOtherInfo"]):
            if e.get("type") != "searchResEntry":
                continue
            a = e["attributes"]
            sid = a["GLUE2ShareID"][0] if isinstance(a["GLUE2ShareID"], list) else a["GLUE2ShareID"]
            kv = {}
            for v in a.get("GLUE2EntityOtherInfo", []):
                if "=" not in v:
                    continue
                k, val = v.split("=", 1)
                if k == "CREAMCEId":
                    ce_of[sid] = val
                elif k.startswith("GPGPU"):
                    kv[k] = typed(val)
            data[sid] = kv
    else:
        for e in search(conn, "o=glue", "(&(objectClass=GLUE2Extension)(GLUE2ExtensionKey=GPGPU*))",
                        ["GLUE2ExtensionKey", "GLUE2ExtensionValue", "GLUE2ExtensionEntityForeignKey"]):
            if e.get("type") != "searchResEntry":
                continue
            a = e["attributes"]
            fk = a["GLUE2ExtensionEntityForeignKey"][0]
            key = a["GLUE2ExtensionKey"]
            key = key[0] if isinstance(key, list) else key
            val = a["GLUE2ExtensionValue"]
            val = val[0] if isinstance(val, list) else val
            data.setdefault(fk, {})[key] = typed(val)
        ids = sorted(data)
        for i in range(0, len(ids), 500):
            flt = "(&(objectClass=GLUE2ComputingShare)(|%s))" % "".join(
                "(GLUE2ShareID=%s)" % ldap3.utils.conv.escape_filter_chars(s) for s in ids[i:i + 500])
            for e in search(conn, "o=glue", flt, ["GLUE2ShareID", "GLUE2EntityOtherInfo"]):
                if e.get("type") != "searchResEntry":
                    continue
                a = e["attributes"]
                sid = a["GLUE2ShareID"][0] if isinstance(a["GLUE2ShareID"], list) else a["GLUE2ShareID"]
                for v in a.get("GLUE2EntityOtherInfo", []):
                    if v.startswith("CREAMCEId="):
                        ce_of[sid] = v.split("=", 1)[1]
    conn.unbind()
    best = {}
    rank_expr = request.lookup("Rank") if "Rank" in request else None
    for sid, kv in data.items():
        offer = classad2.ClassAd(kv)
        offer["Requirements"] = True
        ce = ce_of.get(sid, sid)
        offer["GlueCEUniqueID"] = ce
        # classad2: a.matches(b) evaluates b's Requirements against a.
        if offer.matches(request):
            r = rank_expr.simplify(request, offer) if rank_expr is not None else 0
            r = float(r) if isinstance(r, (int, float)) and not isinstance(r, bool) else 0.0
            if ce not in best or r > best[ce]:
                best[ce] = r
    for ce, r in sorted(best.items(), key=lambda x: (-x[1], x[0])):
        print(ce, r)
    print("#work_seconds %.6f" % (time.perf_counter() - start))


if __name__ == "__main__":
    main()
