#!/usr/bin/env python3
"""Reference phase 1, written the way the seed thesis's prototype worked
(Table 3.4): query the BDII with ldap3, parse the CDER data of each GPU
ComputingShare or ExecutionEnvironment into an HTCondor ClassAd Resource
Offer (classad2; an EE is offered by the shares of its service that name it,
or by all of them when none names an EE), match the request against each
offer, rank, and print the matching CEs.

    twophase_reference.py LDAP_URL attribute-extension|class-extension JOB.jdl

Prints the CEs, best rank first, one per line, then a line
`#work_seconds <t>`: the time from connecting to printing (imports and
interpreter start-up excluded; the caller also measures the whole process).
Used by cder-twophase-bench (tests/demos) as the reference it compares
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


def search(conn, base, flt, attrs, scope=ldap3.SUBTREE):
    return [e for e in conn.extend.standard.paged_search(base, flt, search_scope=scope, attributes=attrs, paged_size=1000, generator=True)
            if e.get("type") == "searchResEntry"]


def values(a, name):
    v = a.get(name, [])
    return v if isinstance(v, list) else [v]


def parent(dn):
    """The parent DN (GLUE IDs here carry no escaped commas)."""
    return dn.split(",", 1)[1]


def ce_id(a):
    for v in values(a, "GLUE2EntityOtherInfo"):
        if v.startswith("CREAMCEId="):
            return v.split("=", 1)[1]
    return values(a, "GLUE2ShareID")[0]


SHARE_ATTRS = ["GLUE2ShareID", "GLUE2EntityOtherInfo", "GLUE2ComputingShareExecutionEnvironmentForeignKey"]


def main():
    url, strategy, jdl = sys.argv[1:4]
    request = classad2.parseOne(open(jdl).read())
    start = time.perf_counter()
    conn = ldap3.Connection(ldap3.Server(url, get_info=ldap3.NONE), auto_bind=True, read_only=True)
    data = {}  # carrier DN -> {key: value}
    shares = {}  # share DN -> attributes
    ees = {}  # EE DN -> EE id
    if strategy == "attribute-extension":
        # All OtherInfo values of the shares and EEs carrying GPU keys (the thesis: "all OtherInfo values are retrieved").
        for cls, attrs in (("GLUE2ComputingShare", SHARE_ATTRS), ("GLUE2ExecutionEnvironment", ["GLUE2ResourceID", "GLUE2EntityOtherInfo"])):
            for e in search(conn, "o=glue", "(&(objectClass=%s)(GLUE2EntityOtherInfo=GPGPU*))" % cls, attrs):
                a = e["attributes"]
                kv = {}
                for v in values(a, "GLUE2EntityOtherInfo"):
                    if "=" not in v:
                        continue
                    k, val = v.split("=", 1)
                    if k.startswith("GPGPU"):
                        kv[k] = typed(val)
                data[e["dn"]] = kv
                if cls == "GLUE2ComputingShare":
                    shares[e["dn"]] = a
                else:
                    ees[e["dn"]] = values(a, "GLUE2ResourceID")[0]
    else:
        share_ids = {}
        for e in search(conn, "o=glue", "(&(objectClass=GLUE2Extension)(GLUE2ExtensionKey=GPGPU*))",
                        ["GLUE2ExtensionKey", "GLUE2ExtensionValue", "GLUE2ExtensionEntityForeignKey"]):
            a = e["attributes"]
            fk = values(a, "GLUE2ExtensionEntityForeignKey")[0]
            owner = parent(e["dn"])
            data.setdefault(owner, {})[values(a, "GLUE2ExtensionKey")[0]] = typed(values(a, "GLUE2ExtensionValue")[0])
            if owner.startswith("GLUE2ResourceID="):
                ees[owner] = fk
            else:
                share_ids[fk] = owner
        ids = sorted(share_ids)
        for i in range(0, len(ids), 500):
            flt = "(&(objectClass=GLUE2ComputingShare)(|%s))" % "".join(
                "(GLUE2ShareID=%s)" % ldap3.utils.conv.escape_filter_chars(s) for s in ids[i:i + 500])
            for e in search(conn, "o=glue", flt, SHARE_ATTRS):
                if e["dn"] in data:
                    shares[e["dn"]] = e["attributes"]
    # The shares that offer a GPU EE: those of its service that name it, or all of them when none names an EE.
    offers = [(ce_id(a), dict(data[dn])) for dn, a in shares.items()]
    by_service = {}
    for dn, eid in ees.items():
        by_service.setdefault(parent(dn), []).append((dn, eid))
    for service, gpu_ees in by_service.items():
        for e in search(conn, service, "(objectClass=GLUE2ComputingShare)", SHARE_ATTRS, scope=ldap3.LEVEL):
            a = e["attributes"]
            named = set(values(a, "GLUE2ComputingShareExecutionEnvironmentForeignKey"))
            for dn, eid in gpu_ees:
                if not named or eid in named:
                    kv = dict(data[dn])
                    kv.update(data.get(e["dn"], {}))
                    offers.append((ce_id(a), kv))
    conn.unbind()
    best = {}
    rank_expr = request.lookup("Rank") if "Rank" in request else None
    for ce, kv in offers:
        offer = classad2.ClassAd(kv)
        offer["Requirements"] = True
        offer["GlueCEUniqueID"] = ce
        # classad2: a.matches(b) evaluates b's Requirements against a.
        if offer.matches(request):
            r = rank_expr.eval(request, offer) if rank_expr is not None else 0
            r = float(r) if isinstance(r, (int, float)) and not isinstance(r, bool) else 0.0
            if ce not in best or r > best[ce]:
                best[ce] = r
    for ce, r in sorted(best.items(), key=lambda x: (-x[1], x[0])):
        print(ce, r)
    print("#work_seconds %.6f" % (time.perf_counter() - start))


if __name__ == "__main__":
    main()
